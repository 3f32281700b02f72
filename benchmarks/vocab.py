"""`c4forge vocab`'s memory against its sample, the fit behind its estimate, and how much the
pieces move when the sample shrinks.

``run``: ``python -m c4forge vocab DOCS -o OUT --vocab-size N [--sample-chars C]`` as a subprocess
per sample size; measured per run: peak PSS of the process tree (``c4forge.proctree``, sampled
every 0.2 s), CPU seconds, wall seconds, the sample's characters and lines (vocab.json), and the
estimate the run printed on its first line. ``--fit`` fits peak = a + b × (characters + lines)
by least squares over the runs in ``--json`` (what ``c4forge/vocab/memory.py`` holds).

``compare A B --held-out DOCS``: overlap of the two vocabularies' piece sets and tokens per
character of each on held-out text (e.g. the clean output's validation split, which no
vocabulary sample reads).

Usage::

    python benchmarks/vocab.py run CLEAN --vocab-size 8000 --sample-chars 25000000 50000000 \
        --json vocab.jsonl
    python benchmarks/vocab.py run CLEAN --vocab-size 8000 --json vocab.jsonl   # the default
    python benchmarks/vocab.py fit --json vocab.jsonl
    python benchmarks/vocab.py compare OLD_VOCAB NEW_VOCAB --held-out CLEAN
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "benchmarks"]
sys.path.insert(0, str(ROOT))
# isort: off
from c4forge.proctree import PeakSampler  # noqa: E402
# isort: on


def run_one(docs: str, vocab_size: int, sample_chars: int | None, out: Path, python: str) -> dict:
    """One `c4forge vocab` run (``sample_chars`` None: the default sample)."""
    cmd = [python, "-m", "c4forge", "vocab", docs, "-o", str(out), "--vocab-size", str(vocab_size)]
    cmd += ["--overwrite"] + ([] if sample_chars is None else ["--sample-chars", str(sample_chars)])
    env = dict(os.environ)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    started = time.monotonic()
    # cwd "/": `python -m` puts the working folder first on sys.path, ahead of PYTHONPATH
    proc = subprocess.Popen(
        cmd, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with PeakSampler(proc.pid, interval=0.2) as sampler:
        stdout, stderr = proc.communicate()
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"vocab failed ({sample_chars}): {stderr[-2000:]}")
    desc = json.loads((out / "vocab.json").read_text())
    s = desc["sample"]
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    first = next((ln for ln in stderr.splitlines() if ln.startswith("vocab:")), "")
    return {
        "code": os.environ.get("PYTHONPATH", ""),
        "docs": docs,
        "vocab_size": vocab_size,
        "sample_chars_flag": sample_chars,
        "sample_chars": s["characters"],
        "sample_lines": s["lines"],
        "elements": s["characters"] + s["lines"],
        "peak_pss_gb": round(sampler.peak / 1e9, 3),
        "cpu_s": round(cpu, 1),
        "wall_s": round(wall, 1),
        "load_1min": round(load, 2),
        "sha256": desc["sha256"],
        "first_line": first,
        "vocab_dir": str(out),
    }


def fit(rows: list[dict]) -> tuple[float, float]:
    """Least squares peak = a + b × elements (bytes) over ``rows``."""
    import numpy as np

    x = np.array([r["elements"] for r in rows], dtype=float)
    y = np.array([r["peak_pss_gb"] * 1e9 for r in rows], dtype=float)
    b, a = np.polyfit(x, y, 1)
    return float(a), float(b)


def compare(old: str, new: str, held_out: str, limit_docs: int) -> dict:
    """Piece-set overlap and tokens per character on held-out text."""
    import sentencepiece as spm

    from c4forge.corpus import clean_docs

    sps = [
        spm.SentencePieceProcessor(model_file=os.path.join(d, "sentencepiece.model"))
        for d in (old, new)
    ]
    sets = [{sp.id_to_piece(i) for i in range(sp.get_piece_size())} for sp in sps]
    if os.path.isfile(held_out):
        files = [held_out]
    else:
        files = clean_docs.list_clean_shards(held_out, "validation")
    texts: list[str] = []
    for path in files:
        for doc in clean_docs.iter_documents(path):
            texts.append(doc["text"])
            if len(texts) >= limit_docs:
                break
    chars = sum(len(t) for t in texts)
    tokens = [sum(len(x) for x in sp.encode(texts)) for sp in sps]
    unk = [sum(x.count(sp.unk_id()) for x in sp.encode(texts)) for sp in sps]
    inter = len(sets[0] & sets[1])
    return {
        "old": old,
        "new": new,
        "pieces": [len(s) for s in sets],
        "shared_pieces": inter,
        "overlap_of_old": round(inter / len(sets[0]), 4),
        "jaccard": round(inter / len(sets[0] | sets[1]), 4),
        "held_out_docs": len(texts),
        "held_out_chars": chars,
        "tokens": tokens,
        "tokens_per_char": [round(t / chars, 5) for t in tokens],
        "unk_tokens": unk,
        "tokens_change": round(tokens[1] / tokens[0] - 1, 5),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("docs")
    r.add_argument("--vocab-size", type=int, default=8000)
    r.add_argument("--sample-chars", type=int, nargs="*", default=[None])
    r.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "vocab-bench")
    r.add_argument("--json", type=Path)
    r.add_argument("--python", default=sys.executable)
    f = sub.add_parser("fit")
    f.add_argument("--json", type=Path, required=True)
    c = sub.add_parser("compare")
    c.add_argument("old")
    c.add_argument("new")
    c.add_argument("--held-out", required=True)
    c.add_argument("--docs", type=int, default=5000)
    args = ap.parse_args(argv)
    if args.cmd == "run":
        for chars in args.sample_chars or [None]:
            out = args.out / f"v{args.vocab_size}-{chars or 'default'}"
            row = run_one(args.docs, args.vocab_size, chars, out, args.python)
            print(json.dumps(row), flush=True)
            if args.json:
                with open(args.json, "a") as fh:
                    fh.write(json.dumps(row) + "\n")
    elif args.cmd == "fit":
        rows = [json.loads(x) for x in args.json.read_text().splitlines() if x.strip()]
        a, b = fit(rows)
        print(f"peak = {a / 1e9:.3f} GB + {b:.2f} bytes × (characters + lines), {len(rows)} runs")
        for row in rows:
            pred = (a + b * row["elements"]) / 1e9
            print(f"  {row['elements']:>13,} elements: {row['peak_pss_gb']:.3f} GB, fit {pred:.3f}")
    else:
        print(json.dumps(compare(args.old, args.new, args.held_out, args.docs), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
