"""Exact-substring dedup (``clean --dedup-substrings N``): what the stage costs on top of the
same clean, its memory, CPU and shuffle bytes, 1 vs 2 workers, and a C4-scale projection.

Corpus: ``benchmarks/corpus.py --unique`` (real text recombined, as ``benchmarks/scale.py``);
its sentences come from a finite real pool, so many long substrings repeat across pages: a
heavier case for the stage than a crawl, where most bytes occur once.

Per worker count, two runs through ``scale.run`` (each a subprocess whose process tree is
sampled: peak PSS of the tree, CPU of the tree, wall; the engine's stage profile):

* ``plain``: ``c4forge clean CORPUS --workers W``;
* ``substrings``: the same with ``--dedup-substrings N --substrings-keep K``.

Reported: the ratios (peak PSS, CPU) of ``substrings`` over ``plain``, the speed-up of the
second worker (wall, on an otherwise idle machine), shuffle bytes of the stage's two passes
per byte of text entering it, the stage's counters, and a projection to C4 (the C4 paper's
~750 GB of clean English text) from the measured CPU per byte entering the stage: CPU-days,
shuffle volume, memory per worker (flat: no step holds more than one document or one key's
occurrences), beside the reference tool's published requirements (google-research
``deduplicate-text-datasets``: 96 cores and > 600 GB of RAM for C4).

Usage: ``python benchmarks/substrings.py --pages 10000 --files 4 --workers 1 2
--json results.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
import scale  # noqa: E402  (it imports benchmarks/corpus.py and then leaves sys.path as it was)

corpus_mod = scale.corpus_mod

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

C4_TEXT_BYTES = 750e9  # "about 750 GB of reasonably clean … English text" (Raffel et al. 2020)
REFERENCE = "deduplicate-text-datasets (suffix array): 96 cores, > 600 GB RAM for C4 (its README)"
STAGES = ("substrings_fp", "substrings")


def measured(corpus: Path, config: str, workers: int, tmp: Path) -> dict:
    """``scale.run`` of one configuration, with the stage's counters and the UTF-8 bytes of
    the documents written (``plain``: what enters the stage)."""
    import gzip

    r = scale.run(corpus, config, workers, tmp, keep=True)
    out = Path(r.pop("output"))
    stats = json.loads((out / "stats.json").read_text())
    r["stage_counters"] = stats["counters"].get("substrings", {})
    r["bytes_written"] = 0
    for p in sorted(out.glob("c4-*.json.gz")):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            r["bytes_written"] += sum(len(json.loads(x)["text"].encode("utf-8")) for x in f)
    shutil.rmtree(out.parent, ignore_errors=True)
    return r


def compare(plain: dict, sub: dict, entering: int) -> dict:
    """The stage's cost: ratios over the plain clean, per byte entering the stage."""
    extra_cpu = sub["cpu_s"] - plain["cpu_s"]
    text = plain["text_mb"] * 1e6
    per_text = sub.get("shuffle_bytes_per_text_byte", {})
    stage_shuffle = sum(per_text.get(s, 0.0) for s in STAGES) * text
    keys_extra = (sub.get("shuffle_keys_per_text_byte", 0) - plain.get("shuffle_keys_per_text_byte", 0)) * text
    return {
        "workers": sub["workers"],
        "pages": sub["pages"],
        "stage_input_mb": round(entering / 1e6, 2),
        "peak_ratio": round(sub["peak_pss_gb"] / plain["peak_pss_gb"], 3),
        "cpu_ratio": round(sub["cpu_s"] / plain["cpu_s"], 3),
        "stage_cpu_s": round(extra_cpu, 1),
        "stage_cpu_s_per_mb": round(extra_cpu / (entering / 1e6), 3),
        "stage_group_shuffle_per_byte": round(stage_shuffle / entering, 3),
        "keys_shuffle_extra_per_byte": round(keys_extra / entering, 3),
        "bytes_struck_fraction": round(sub["stage_counters"].get("bytes_struck", 0) / entering, 4),
    }


def projection(row: dict) -> dict:
    """C4 (``C4_TEXT_BYTES`` entering the stage) at the measured per-byte rates."""
    per_mb = row["stage_cpu_s_per_mb"]
    cpu_days = per_mb * C4_TEXT_BYTES / 1e6 / 86400
    return {
        "c4_text_gb": C4_TEXT_BYTES / 1e9,
        "stage_cpu_days": round(cpu_days, 1),
        "wall_days_on_96_cores": round(cpu_days / 96, 2),
        "shuffle_tb": round(row["keys_shuffle_extra_per_byte"] * C4_TEXT_BYTES / 1e12, 2),
        "reference": REFERENCE,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", type=Path, help="corpus folder (default: built under ~/.cache)")
    ap.add_argument("--n", type=int, default=100, help="--dedup-substrings (bytes)")
    ap.add_argument("--keep", default="none", choices=["none", "first"])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--json", type=Path, help="append each run's figures here (JSON lines)")
    args = ap.parse_args(argv)
    corpus = args.corpus or (
        Path.home() / ".cache" / "c4forge-bench" / f"unique-s{args.seed}-n{args.pages}"
    )
    corpus_mod.build(corpus, args.pages, args.seed, args.files, [], unique=True)
    scale.CONFIGS["plain"] = []
    scale.CONFIGS["substrings"] = [
        "--dedup-substrings", str(args.n), "--substrings-keep", args.keep,
    ]
    rows: dict[int, dict] = {}
    for w in args.workers:
        plain = measured(corpus, "plain", w, args.tmp)
        sub = measured(corpus, "substrings", w, args.tmp)
        entering = plain["bytes_written"]
        for r in (plain, sub):
            scale._write(r, args.json)
        row = compare(plain, sub, entering)
        row["wall_s"] = {"plain": plain["wall_s"], "substrings": sub["wall_s"]}
        row["peak_pss_gb"] = {"plain": plain["peak_pss_gb"], "substrings": sub["peak_pss_gb"]}
        row["cpu_s"] = {"plain": plain["cpu_s"], "substrings": sub["cpu_s"]}
        row["counters"] = sub["stage_counters"]
        rows[w] = row
        scale._write({"stage": "substrings_cost", **row}, args.json)
    if len(rows) > 1:
        lo, hi = min(rows), max(rows)
        speedup = rows[lo]["wall_s"]["substrings"] / rows[hi]["wall_s"]["substrings"]
        scale._write({"stage": "substrings_speedup", "workers": [lo, hi], "wall": round(speedup, 2)}, args.json)
    best = rows[max(rows)]
    scale._write({"stage": "substrings_c4_projection", **projection(best)}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
