"""Stock langdetect (seed 0) vs ``c4forge.langid.langdetect_fast``: speed and exact identity.

Two page sets, both real text:

* ``real``: every page of the real data in the repo (1,000 C4 documents, the derived WET's
  191 records, the genuine WET excerpts, the multilingual Common Crawl excerpt, the synthetic
  cc_net WET fixtures, the datatrove peer outputs, the text of the WARC HTML responses via
  ``c4forge.readers.warc_html``) plus, when
  present, the full multilingual dolma CC file in ``c4forge/data/sample`` and any ``--extra``
  ``.jsonl[.gz]`` file: raw page text, many languages.
* ``corpus``: the first ``--pages`` pages of the benchmark corpus (``benchmarks/corpus.py``)
  after ``clean_page``, i.e. what the job's langid stage sees (before span dedup).

For each page both detectors run (timed in CPU seconds of this process, so a busy machine
distorts the figures less); "exact" means the same list of ``(lang, prob)`` with ``==``
on the floats (or the same ``LangDetectException``), "decision" means the same C4 verdict
(top language ``en`` with prob >= 0.99).  Prints ms/page, the speed-up, and every difference.

Usage: ``python benchmarks/langdetect.py [--set real|corpus|both] [--pages 2000]``
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import sys
import time
from pathlib import Path

# Run as a script, this file's folder is sys.path[0] and this module would shadow the real
# ``langdetect`` package: drop the folder and load the sibling corpus.py by path instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
_spec = importlib.util.spec_from_file_location("c4forge_bench_corpus", _HERE / "corpus.py")
corpus_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus_mod)


def stock_detect(text: str):
    from langdetect import DetectorFactory, LangDetectException, detect_langs

    DetectorFactory.seed = 0
    try:
        return [(lp.lang, lp.prob) for lp in detect_langs(text)]
    except LangDetectException as exc:
        return ("LangDetectException", str(exc))


def fast_detect(text: str):
    from langdetect import LangDetectException

    from c4forge.langid.langdetect_fast import detect_langs_fast

    try:
        return [tuple(lp) for lp in detect_langs_fast(text)]
    except LangDetectException as exc:
        return ("LangDetectException", str(exc))


def decision(result) -> bool:  # noqa: ANN001
    return (
        isinstance(result, list) and bool(result) and result[0][0] == "en" and result[0][1] >= 0.99
    )


def real_pages(extra: list[Path]) -> dict[str, list[str]]:
    sets: dict[str, list[str]] = {}
    sets["c4-sample (1,000 real C4 docs)"] = [
        t for _, t in corpus_mod._read_jsonl(corpus_mod.SAMPLE / "c4-sample.00000-of-00001.json.gz")
    ]
    wet = []
    for path in sorted(corpus_mod.SAMPLE.glob("*.wet.gz")) + sorted(
        corpus_mod.TESTS_DATA.glob("wet/*.wet*")
    ):
        wet += [t for _, t in corpus_mod._read_wet(path)]
    sets["WET pages (derived + genuine CC)"] = wet
    sets["tests/data multilingual CC excerpt"] = [
        t
        for _, t in corpus_mod._read_jsonl(
            corpus_mod.TESTS_DATA / "langdetect" / "dolma-cc-multilingual.jsonl.gz"
        )
    ]
    from c4forge.corpus.counting import CounterBag
    from c4forge.readers.wet import read_wet

    synthetic = []
    for path in sorted(corpus_mod.TESTS_DATA.glob("synthetic/*.wet")):
        with open(path, "rb") as f:  # lengths do not match: c4forge's reader copes
            synthetic += [page.text for page in read_wet(f, str(path), CounterBag())]
    sets["tests/data synthetic WET + datatrove peer outputs"] = synthetic + [
        t
        for path in sorted(corpus_mod.TESTS_DATA.glob("peer/**/*.jsonl.gz"))
        for _, t in corpus_mod._read_jsonl(path)
    ]
    try:
        from c4forge.readers.warc_html import read_warc

        html = []
        for path in sorted(corpus_mod.TESTS_DATA.glob("warc/*.warc.gz")):
            with open(path, "rb") as f:
                html += [page.text for page in read_warc(f, str(path), CounterBag())]
        sets["tests/data WARC HTML -> text (c4forge.readers.warc_html)"] = html
    except ImportError:  # the HTML reader is optional for this benchmark
        pass
    if corpus_mod.DOLMA.exists():
        with gzip.open(corpus_mod.DOLMA, "rt", encoding="utf-8") as f:
            sets["dolma CC-MAIN-2019-30 file (697, incl. empty)"] = [
                json.loads(line)["text"] for line in f
            ]
    for path in extra:
        sets[str(path)] = [t for _, t in corpus_mod._read_jsonl(path)]
    return sets


def corpus_pages(pages: int) -> list[str]:
    from c4forge.corpus.counting import CounterBag
    from c4forge.readers.wet import read_wet
    from c4forge.rules.lines import clean_page

    out = corpus_mod.build(corpus_mod.default_out(20_000, 0), 20_000, 0, 20, [])
    texts: list[str] = []
    bag = CounterBag()
    for path in corpus_mod.corpus_files(out):
        with open(path, "rb") as f:
            for page in read_wet(f, str(path), bag):
                cleaned = clean_page(page.text, bag)
                if cleaned is not None:
                    texts.append(cleaned.text)
                if len(texts) >= pages:
                    return texts
    return texts


def compare(name: str, texts: list[str]) -> tuple[int, int, int, float, float]:
    # CPU time of this process, not wall time: the benchmark machine may be shared
    t0 = time.process_time()
    stock = [stock_detect(t) for t in texts]
    t1 = time.process_time()
    fast = [fast_detect(t) for t in texts]
    t2 = time.process_time()
    exact = sum(s == f for s, f in zip(stock, fast))
    same_decision = sum(decision(s) == decision(f) for s, f in zip(stock, fast))
    n = len(texts)
    chars = sum(len(t) for t in texts)
    print(
        f"{name}: {n} pages, {chars / max(n, 1):,.0f} chars/page; exact {exact}/{n}, "
        f"decision {same_decision}/{n}, kept(en>=0.99) {sum(map(decision, fast))}; "
        f"stock {(t1 - t0) / n * 1e3:.2f} ms/page, fast {(t2 - t1) / n * 1e3:.3f} ms/page, "
        f"x{(t1 - t0) / (t2 - t1):.1f}"
    )
    for i, (s, f) in enumerate(zip(stock, fast)):
        if s != f:
            print(f"  DIFF page {i}: stock={s} fast={f} text={texts[i][:60]!r}")
    return n, exact, same_decision, t1 - t0, t2 - t1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--set", choices=["real", "corpus", "both"], default="both")
    ap.add_argument("--pages", type=int, default=2000, help="corpus pages (after clean_page)")
    ap.add_argument("--extra", type=Path, nargs="*", default=[])
    args = ap.parse_args(argv)

    from c4forge.langid import langdetect_fast

    t = time.perf_counter()
    fast_detect("warm-up: tables, numba kernels (cached after the first compile)")
    print(f"fast backend: {langdetect_fast.backend()}, start-up {time.perf_counter() - t:.2f} s")
    t = time.perf_counter()
    stock_detect("warm-up: stock profiles")
    print(f"stock start-up {time.perf_counter() - t:.2f} s")

    totals = [0, 0, 0, 0.0, 0.0]
    sets: dict[str, list[str]] = {}
    if args.set in ("real", "both"):
        sets.update(real_pages(args.extra))
    if args.set in ("corpus", "both"):
        sets[f"benchmark corpus, cleaned ({args.pages} pages)"] = corpus_pages(args.pages)
    for name, texts in sets.items():
        for k, v in enumerate(compare(name, texts)):
            totals[k] += v
    n, exact, same, ts, tf = totals
    print(
        f"TOTAL {n} pages: exact {exact}/{n}, decision {same}/{n}; stock {ts / n * 1e3:.2f} "
        f"ms/page, fast {tf / n * 1e3:.3f} ms/page, speed-up x{ts / tf:.1f}"
    )
    return 0 if exact == n else 1


if __name__ == "__main__":
    sys.exit(main())
