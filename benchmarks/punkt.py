"""Sentence splitting and ``clean_page``: NLTK's Punkt vs c4forge's exact fast Punkt.

Inputs (real text only): the 191-record WET derived from real HTML and the 1,000 real C4
documents (``c4forge/data/sample/``), and the genuine Common Crawl WET excerpts
(``tests/data/wet/``); ``--wet`` adds more WET files (e.g. the corpus of benchmarks/corpus.py).
Every page goes through ``clean_page`` once per mode, on one core (CPU time of this process):

* ``nltk``: ``split_sentences`` = NLTK's ``PunktSentenceTokenizer.tokenize`` (the "before");
* ``fast, cold``: ``FastPunkt`` with empty caches, i.e. what the first pages of a worker see;
* ``fast, warm``: the same pages again with the caches the cold pass filled (an upper bound).

Also times ``split_sentences`` alone on the lines ``clean_page`` hands it, checks that every
mode gives the same pages, sentences and counters, and prints the share of lines that take the
no-candidate shortcut. Timings use ``time.process_time``; the best of ``--repeat`` runs.

Usage: ``python benchmarks/punkt.py [--repeat 3] [--wet FILE ...]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Run as a script, benchmarks/ is sys.path[0]; keep it from shadowing real packages.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT))

SAMPLE = ROOT / "c4forge" / "data" / "sample"
TESTS_WET = ROOT / "tests" / "data" / "wet"


def load_pages(extra: list[str]) -> tuple[list[str], dict[str, int]]:
    from c4forge.corpus.counting import CounterBag
    from c4forge.readers.wet import read_wet
    from c4forge.samples import iter_c4_sample

    wet_files = [SAMPLE / "real-warc-html-to-wet.resiliparse.warc.wet.gz"]
    wet_files += sorted(p for p in TESTS_WET.iterdir() if ".wet" in p.name)
    wet_files += [Path(p) for p in extra]
    texts: list[str] = []
    sources: dict[str, int] = {}
    for path in wet_files:
        with open(path, "rb") as f:
            pages = [p.text for p in read_wet(f, str(path), CounterBag())]
        sources[path.name] = len(pages)
        texts += pages
    docs = [d["text"] for d in iter_c4_sample()]
    sources["c4-sample (1,000 C4 documents)"] = len(docs)
    return texts + docs, sources


def run_clean(texts: list[str]):  # noqa: ANN201
    from c4forge.corpus.counting import CounterBag
    from c4forge.rules.lines import clean_page

    bag = CounterBag()
    start = time.process_time()
    out = [clean_page(t, bag) for t in texts]
    return time.process_time() - start, out, bag.as_dict()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="timed runs per mode (best is kept)")
    ap.add_argument("--wet", nargs="*", default=[], help="extra WET files")
    args = ap.parse_args()

    import nltk

    from c4forge.rules import lines as clean_mod
    from c4forge.rules import sentences

    texts, sources = load_pages(args.wet)
    n_pages = len(texts)
    mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6

    # The lines clean_page hands to Punkt (recorded once, with the NLTK splitter).
    split_nltk = sentences.use_punkt_implementation("nltk")
    lines: list[str] = []

    def recording(line: str) -> list[str]:
        lines.append(line)
        return split_nltk(line)

    clean_mod.split_sentences = recording
    try:
        _, expected, expected_counts = run_clean(texts)
    finally:
        clean_mod.split_sentences = sentences.split_sentences

    split_fast = sentences.use_punkt_implementation("fast")
    fast = sentences.fast_punkt()
    if fast is None or sentences.punkt_implementation() != "fast":
        print("fast Punkt is disabled for this NLTK (see the warning above)")
        return 1

    def best(fn, prepare=lambda: None):  # noqa: ANN001, ANN202
        times = []
        for _ in range(args.repeat):
            prepare()
            times.append(fn())
        return min(times)

    def time_split(split):  # noqa: ANN001, ANN202
        start = time.process_time()
        for line in lines:
            split(line)
        return time.process_time() - start

    results: dict[str, tuple[float, float]] = {}
    identical = True

    split = sentences.split_sentences  # what clean_page and dedup call
    sentences.use_punkt_implementation("nltk")
    t_split = best(lambda: time_split(split))
    t_clean = best(lambda: run_clean(texts)[0])
    results["nltk (before)"] = (t_split, t_clean)

    sentences.use_punkt_implementation("fast")
    t_split = best(lambda: time_split(split), fast.clear_caches)
    fast.clear_caches()
    time_split(split_fast)
    shortcut = fast.no_candidate / max(fast.calls, 1)

    def clean_checked() -> float:
        nonlocal identical
        t, out, counts = run_clean(texts)
        identical &= counts == expected_counts and all(
            (a is None and b is None)
            or (a is not None and b is not None and (a.text, a.sentences) == (b.text, b.sentences))
            for a, b in zip(out, expected)
        )
        return t

    t_clean = best(clean_checked, fast.clear_caches)
    results["fast, cold caches"] = (t_split, t_clean)
    fast.clear_caches()
    time_split(split_fast)
    run_clean(texts)
    sizes = fast.cache_sizes()
    results["fast, warm caches"] = (best(lambda: time_split(split)), best(clean_checked))

    print(
        f"pages: {n_pages:,} ({mb:.1f} MB of text; "
        + ", ".join(f"{k}: {v}" for k, v in sources.items())
        + ")"
    )
    print(f"lines reaching Punkt: {len(lines):,} ({len(set(lines)):,} distinct)")
    print(f"nltk {nltk.__version__}; one core, CPU time, best of {args.repeat}")
    print(f"{'mode':<20} {'split lines/s':>14} {'speed-up':>9} {'clean_page pages/s':>19}")
    base_split, base_clean = results["nltk (before)"]
    for name, (t_split, t_clean) in results.items():
        print(
            f"{name:<20} {len(lines) / t_split:>14,.0f} {base_split / t_split:>8.1f}x "
            f"{n_pages / t_clean:>12,.0f} ({base_clean / t_clean:.1f}x)"
        )
    print(f"lines answered without a candidate break (shortcut 1): {shortcut:.1%}")
    print(f"cache entries after one cold pass: {sizes}")
    print(f"identical pages, sentences and counters in every mode: {'yes' if identical else 'NO'}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
