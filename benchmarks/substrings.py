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

Every figure is printed beside its input size (pages, files, MB of text), the load average
at the start and end of the run (CPU seconds and peak PSS are robust to other sessions' load,
wall seconds are not) and the stage's shuffle bytes (absolute, and per byte entering it).

``--runs`` picks the configurations (``plain`` alone: the baseline of a large corpus, run in
its own invocation; ``substrings`` alone takes the bytes entering the stage from the ``plain``
row of the same pages already in ``--json``). ``--baseline`` appends each ``plain`` run in a
short shared form (pages, files, workers, cpu_s, wall_s, peak_pss_gib, load, commit, flags).

Usage: ``python benchmarks/substrings.py --pages 10000 --files 4 --workers 1 2
--json results.json``; a prepared scale corpus: ``--corpus DIR`` (used as it is).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
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

    before = os.getloadavg()
    r = scale.run(corpus, config, workers, tmp, keep=True)
    after = os.getloadavg()
    r["load"] = {"start_1min": round(before[0], 2), "end": [round(x, 2) for x in after]}
    out = Path(r.pop("output"))
    stats = json.loads((out / "stats.json").read_text())
    r["stage_counters"] = stats["counters"].get("substrings", {})
    r["bytes_written"] = 0
    for p in sorted(out.glob("c4-*.json.gz")):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            r["bytes_written"] += sum(len(json.loads(x)["text"].encode("utf-8")) for x in f)
    shutil.rmtree(out.parent, ignore_errors=True)
    profile_stage = r.get("shuffle_bytes_per_text_byte", {})
    text = r["text_mb"] * 1e6
    r["stage_shuffle_bytes"] = {s: round(profile_stage.get(s, 0.0) * text) for s in STAGES}
    return r


def commit() -> str:
    """The checkout's commit (``+dirty`` where tracked files differ from it)."""

    def git(*a: str) -> str:
        return subprocess.run(
            ["git", *a], cwd=_HERE, capture_output=True, text=True, check=False
        ).stdout.strip()

    return git("rev-parse", "--short", "HEAD") + (
        "+dirty" if git("status", "--porcelain", "-uno") else ""
    )


def size(r: dict) -> str:
    return f"{r['pages']:,} pages ({r['files']} files, {r['text_mb']:,.0f} MB text)"


def line(r: dict) -> str:
    """One readable line per run: input size beside every figure."""
    load = r["load"]
    out = (
        f"{r['config']:<10} {size(r)}, {r['workers']} worker(s): CPU {r['cpu_s']:,} s, "
        f"wall {r['wall_s']:,} s, peak PSS {r['peak_pss_gb']} GiB, "
        f"load {load['start_1min']} → {'/'.join(map(str, load['end']))} (1/5/15 min)"
    )
    sb = sum(r["stage_shuffle_bytes"].values())
    if sb:
        c = r["stage_counters"]
        out += (
            f"; fingerprint + window shuffles {sb / 1e6:,.0f} MB, candidate windows {c.get('candidate_windows', 0):,}, "
            f"bytes struck {c.get('bytes_struck', 0):,}, empty {c.get('empty', 0):,}"
        )
    return out


def baseline_row(r: dict, corpus: Path) -> dict:
    """The short shared form of a run (other benchmarks read it)."""
    return {
        "pages": r["pages"],
        "files": r["files"],
        "workers": r["workers"],
        "cpu_s": r["cpu_s"],
        "wall_s": r["wall_s"],
        "peak_pss_gib": r["peak_pss_gb"],
        "load": r["load"],
        "commit": commit(),
        "flags": scale.CONFIGS[r["config"]],
        "corpus": str(corpus),
        "text_mb": r["text_mb"],
        "bytes_entering_stage": r["bytes_written"] if r["config"] == "plain" else None,
    }


def prior_plain(path: Path | None, pages: int, workers: int) -> dict | None:
    """The latest ``plain`` run of these pages in ``path`` (the same worker count first)."""
    if not path or not path.exists():
        return None
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    rows = [r for r in rows if r.get("config") == "plain" and r.get("pages") == pages]
    same = [r for r in rows if r.get("workers") == workers]
    return (same or rows or [None])[-1]


def compare(plain: dict, sub: dict, entering: int) -> dict:
    """The stage's cost: ratios over the plain clean, per byte entering the stage."""
    extra_cpu = sub["cpu_s"] - plain["cpu_s"]
    text = plain["text_mb"] * 1e6
    per_text = sub.get("shuffle_bytes_per_text_byte", {})
    stage_shuffle = sum(per_text.get(s, 0.0) for s in STAGES) * text
    keys_extra = (
        sub.get("shuffle_keys_per_text_byte", 0) - plain.get("shuffle_keys_per_text_byte", 0)
    ) * text
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
        "candidate_fraction": round(
            sub["stage_counters"].get("candidate_windows", 0) / entering, 4
        ),
        # every pass the stage adds (the two named shuffles and the joins that route
        # candidates and decisions back to their documents): the difference in key bytes
        "stage_shuffle_mb": round(keys_extra / 1e6, 1),
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


def report(paths: list[Path]) -> int:
    """Pair the ``plain`` and ``substrings`` runs of the same pages in JSON-lines files written
    by earlier invocations (each configuration may have run on its own) and print their cost
    and the C4 projection per pair; a pair takes the plain run of the same worker count, else
    any plain run of those pages (its ``plain_workers`` says which)."""
    rows = [json.loads(x) for p in paths for x in p.read_text().splitlines() if x.strip()]
    runs = [r for r in rows if r.get("stage") == "clean" and "stage_counters" in r]
    for sub in (r for r in runs if r["config"] == "substrings"):
        plains = [r for r in runs if r["config"] == "plain" and r["pages"] == sub["pages"]]
        same = [r for r in plains if r["workers"] == sub["workers"]]
        plain = (same or plains or [None])[-1]
        print(line(sub))
        if plain is None:
            print("  no plain run of these pages")
            continue
        row = compare(plain, sub, plain["bytes_written"])
        row["plain_workers"] = plain["workers"]
        print(f"  against: {line(plain)}")
        print(f"  cost: {json.dumps(row)}")
        print(f"  C4: {json.dumps(projection(row))}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--files", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", type=Path, help="a built corpus folder, used as it is")
    ap.add_argument("--n", type=int, default=100, help="--dedup-substrings (bytes)")
    ap.add_argument("--keep", default="none", choices=["none", "first"])
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument(
        "--runs", nargs="+", default=["plain", "substrings"], choices=["plain", "substrings"]
    )
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--json", type=Path, help="append each run's figures here (JSON lines)")
    ap.add_argument("--baseline", type=Path, help="append each plain run's short form here")
    ap.add_argument(
        "--report", type=Path, nargs="+", help="only pair and print the runs in these --json files"
    )
    args = ap.parse_args(argv)
    if args.report:
        return report(args.report)
    if args.corpus and (args.corpus / "manifest.json").exists():
        corpus = args.corpus  # never rebuilt: a shared corpus of other options stays as it is
    else:
        corpus = args.corpus or (
            Path.home() / ".cache" / "c4forge-bench" / f"unique-s{args.seed}-n{args.pages}"
        )
        corpus_mod.build(corpus, args.pages, args.seed, args.files, [], unique=True)
    scale.CONFIGS["plain"] = []
    scale.CONFIGS["substrings"] = [
        "--dedup-substrings",
        str(args.n),
        "--substrings-keep",
        args.keep,
    ]
    rows: dict[int, dict] = {}
    for w in args.workers:
        done = {c: measured(corpus, c, w, args.tmp) for c in args.runs}
        for r in done.values():
            scale._write(r, args.json)
            print(line(r), flush=True)
            if r["config"] == "plain" and args.baseline:
                with open(args.baseline, "a") as f:
                    f.write(json.dumps(baseline_row(r, corpus)) + "\n")
        if "substrings" not in done:
            continue
        sub = done["substrings"]
        plain = done.get("plain") or prior_plain(args.json, sub["pages"], w)
        if plain is None:
            print(f"no plain run of {sub['pages']:,} pages in --json: no ratios", flush=True)
            continue
        row = compare(plain, sub, plain["bytes_written"])
        row["plain_workers"] = plain["workers"]
        row["wall_s"] = {"plain": plain["wall_s"], "substrings": sub["wall_s"]}
        row["peak_pss_gb"] = {"plain": plain["peak_pss_gb"], "substrings": sub["peak_pss_gb"]}
        row["cpu_s"] = {"plain": plain["cpu_s"], "substrings": sub["cpu_s"]}
        row["counters"] = sub["stage_counters"]
        rows[w] = row
        scale._write({"stage": "substrings_cost", **row}, args.json)
        print(
            f"stage cost at {size(sub)}, {w} worker(s): peak ×{row['peak_ratio']}, "
            f"CPU ×{row['cpu_ratio']} ({row['stage_cpu_s_per_mb']} CPU-s per MB entering, "
            f"{row['stage_input_mb']:,} MB), f = {row['candidate_fraction']}, "
            f"struck {row['bytes_struck_fraction']}, stage shuffle (all passes) "
            f"{row['stage_shuffle_mb']:,} MB",
            flush=True,
        )
    if len(rows) > 1:
        lo, hi = min(rows), max(rows)
        speedup = rows[lo]["wall_s"]["substrings"] / rows[hi]["wall_s"]["substrings"]
        scale._write(
            {"stage": "substrings_speedup", "workers": [lo, hi], "wall": round(speedup, 2)},
            args.json,
        )
    if rows:
        best = rows[max(rows)]
        scale._write({"stage": "substrings_c4_projection", **projection(best)}, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
