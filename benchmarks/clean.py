"""Benchmark of ``c4forge clean`` on the 20,000-page corpus of ``benchmarks/corpus.py``.

Two measurements:

1. **End to end**: ``python -m c4forge clean CORPUS --output TMP --workers N`` as a subprocess,
   for each ``--workers`` value (default 1 and 2).  Prints wall time, pages/s and input MB/s,
   the same per core (divided by N), the CPU seconds the job's processes used (user + sys,
   ``RUSAGE_CHILDREN``) and pages per CPU second (robust when the machine is shared), and peak
   memory (sum of the RSS of the job's process tree, sampled every 0.2 s).
2. **Stage shares** (single core, one process): Beam does not expose per-stage CPU time, so the
   clean job runs on the local engine with one worker (``c4forge.engines.local``: the same
   plan as the Beam and Spark engines, every task in this process), whose ``seconds`` give the
   CPU time per engine step: ``wet`` (the front of each chunk: gzip + WARC + page text + the
   page stages + clean), ``url_dedup``, ``passN`` (a pass applying the corpus-wide decisions
   and the document stages after them), each corpus stage's decide step (``dedup`` …) and
   ``output`` (JSON + gzip shards, to a temporary folder). Punkt's calls are timed and taken out
   of ``wet``. Fast and stock langdetect are then timed on every 10th written document.

``--langdetect fast|stock|as-is`` chooses the backend of the end-to-end job through the
``C4FORGE_LANGDETECT`` environment variable, which ``c4forge.langid.langdetect_filter`` reads in every
process (workers included); ``as-is`` leaves the environment alone (fast by default).

Usage: ``python benchmarks/clean.py [--workers 1 2] [--langdetect fast] [--skip-e2e]``
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
# benchmarks/langdetect.py must not shadow the real langdetect package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
_spec = importlib.util.spec_from_file_location("c4forge_bench_corpus", _HERE / "corpus.py")
corpus_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(corpus_mod)

GOAL_PAGES_PER_CORE_S = 450


# ------------------------------------------------------------------------------------------
# end to end


def _tree_rss(root_pid: int) -> int:
    """Sum of VmRSS (bytes) of ``root_pid`` and all its descendants, from /proc."""
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(b")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children[ppid].append(int(entry))
    total, stack = 0, [root_pid]
    while stack:
        pid = stack.pop()
        stack.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def run_job(files_dir: Path, workers: int, langdetect: str, extra: list[str]) -> dict:
    out = Path(tempfile.mkdtemp(prefix="c4forge-bench-clean-"))
    shutil.rmtree(out)
    env = dict(os.environ)
    if langdetect != "as-is":
        # c4forge.langid.langdetect_filter reads it in every worker process: "fast" (default) or "stock".
        env["C4FORGE_LANGDETECT"] = langdetect
    cmd = [sys.executable, "-m", "c4forge", "clean", str(files_dir), "--output", str(out)]
    cmd += ["--workers", str(workers), "--quiet", *extra]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT)
    peak = 0
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            peak = max(peak, _tree_rss(proc.pid))
            stop.wait(0.2)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    rc = proc.wait()
    wall = time.perf_counter() - t0
    stop.set()
    sampler.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if rc != 0:
        raise SystemExit(f"clean job failed (exit {rc}): {' '.join(cmd)}")
    stats = json.loads((out / "stats.json").read_text())
    shutil.rmtree(out, ignore_errors=True)
    totals = stats["totals"]
    return {
        "workers": workers,
        "wall": wall,
        "cpu": cpu,
        "peak_rss": peak,
        "pages": totals["pages_in"],
        "bytes": totals["bytes_in"],
        "docs_out": totals["documents_out"],
        "shard_sha256": sorted(
            f["content_sha256"] for split in stats["outputs"].values() for f in split["files"]
        ),
    }


def _digest(content_hashes: list[str]) -> str:
    """Short digest of every shard's content sha256, to compare runs (backends, workers)."""
    import hashlib

    return hashlib.sha256("".join(content_hashes).encode()).hexdigest()[:16]


# ------------------------------------------------------------------------------------------
# single-core stage profile


def stage_profile(files: list[Path], stock_every: int) -> None:
    """The clean job on the local engine in this process (one worker, so every task runs
    here): CPU seconds per engine step (``LocalEngine.seconds``, keyed by the step label's first
    part: ``wet`` is the front per chunk, read + page stages + clean; ``url_dedup``; ``passN``
    applies the corpus-wide decisions; the corpus stages ``dedup`` …; ``shards`` writes), with
    Punkt's share taken out of the front; then fast and stock langdetect on every
    ``stock_every``-th written document."""
    from c4forge.clean.config import CleanJob
    from c4forge.clean.driver import run_clean
    from c4forge.corpus.clean_docs import iter_documents, list_clean_shards
    from c4forge.corpus.counting import CounterBag
    from c4forge.engines.local import LocalEngine
    from c4forge.langid import langdetect_filter as langid
    from c4forge.langid.langdetect_fast import detect_langs_fast
    from c4forge.rules import lines as clean_mod
    from c4forge.rules.badwords import badwords_filter

    # warm-ups outside the timed regions (tables, Punkt parameters, bad-words regex)
    detect_langs_fast("warm up")
    clean_mod.split_sentences("Warm up. Punkt.")
    badwords_filter("warm up", "en", "x", CounterBag())

    punkt_seconds = 0.0
    punkt = clean_mod.split_sentences

    def timed_punkt(line: str) -> list[str]:
        nonlocal punkt_seconds
        a = time.process_time()
        try:
            return punkt(line)
        finally:
            punkt_seconds += time.process_time() - a

    out = Path(tempfile.mkdtemp(prefix="c4forge-bench-profile-")) / "out"
    job = CleanJob(
        inputs=tuple(str(f) for f in files),
        output=str(out),
        input_format="wet",
        workers=1,
        quiet=True,
    )
    engine = LocalEngine(job)
    in_bytes = sum(f.stat().st_size for f in files)
    clean_mod.split_sentences = timed_punkt
    try:
        code = run_clean(job, engine)
    finally:
        clean_mod.split_sentences = punkt
        engine.close()
    if code:
        raise SystemExit(f"the profiled clean job failed (exit {code})")
    texts = [
        doc["text"]
        for split in ("train", "validation")
        for path in list_clean_shards(str(out), split)
        for doc in iter_documents(path)
    ]
    shutil.rmtree(out.parent, ignore_errors=True)

    # langid.py picks its backend from C4FORGE_LANGDETECT (fast by default): both backends on
    # the same sample of the written (English) documents.
    sample = texts[::stock_every]
    per_text = {}
    backend = langid._BACKEND
    try:
        for name in ("fast", "stock"):
            langid._BACKEND = name
            langid.langid_filter("warm up the profiles", CounterBag())
            a = time.process_time()
            for txt in sample:
                langid.langid_filter(txt, CounterBag())
            per_text[name] = (time.process_time() - a) / max(len(sample), 1)
    finally:
        langid._BACKEND = backend

    t = dict(engine.seconds)
    t["wet"] = t.get("wet", 0.0) - punkt_seconds
    t["sentence split (Punkt in the front)"] = punkt_seconds
    c = engine.counters()
    n_pages = c["wet"].get("pages", 0)
    total = sum(t.values())
    print(
        f"\nStage profile (local engine, one process, CPU time): {n_pages:,} pages "
        f"({in_bytes / 1e6:.1f} MB gzip WET) -> {len(texts):,} documents written"
    )
    for name, secs in t.items():
        per_page = secs / max(n_pages, 1) * 1e3
        print(f"  {name:<36} {secs:7.2f} s  {secs / total:6.1%}  {per_page:.3f} ms/input page")
    print(f"  {'total':<36} {total:7.2f} s  -> {n_pages / total:,.0f} pages/s on one core")
    print(
        f"  langdetect on every {stock_every}th written document ({len(sample):,}): fast "
        f"{per_text['fast'] * 1e3:.3f} ms, stock {per_text['stock'] * 1e3:.3f} ms per document "
        f"(x{per_text['stock'] / max(per_text['fast'], 1e-12):.0f})"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, nargs="*", default=[1, 2])
    ap.add_argument("--langdetect", choices=["fast", "stock", "as-is"], default="fast")
    ap.add_argument("--skip-e2e", action="store_true", help="only the stage profile")
    ap.add_argument("--skip-profile", action="store_true", help="only the end-to-end runs")
    ap.add_argument("--stock-every", type=int, default=10)
    ap.add_argument("job_args", nargs="*", help="after --: more `c4forge clean` options")
    args = ap.parse_args(argv)

    out = corpus_mod.build(
        corpus_mod.default_out(args.pages, args.seed), args.pages, args.seed, 20, []
    )
    files = corpus_mod.corpus_files(out)
    text_mb = json.loads((out / "manifest.json").read_text())["text_bytes"] / 1e6
    print(f"corpus: {out} ({len(files)} files, {text_mb:.1f} MB text); host: {os.cpu_count()} CPUs")

    if not args.skip_e2e:
        digests = set()
        for workers in args.workers:
            r = run_job(out, workers, args.langdetect, args.job_args)
            digests.add(tuple(r["shard_sha256"]))
            mb = text_mb  # MB/s of WET text (uncompressed payload)
            print(
                f"end to end, --workers {workers}, langdetect {args.langdetect}: "
                f"{r['pages']:,} pages ({mb:.1f} MB text, {r['bytes'] / 1e6:.1f} MB gzip) -> "
                f"{r['docs_out']:,} docs in {r['wall']:.1f} s wall: "
                f"{r['pages'] / r['wall']:,.0f} pages/s, {mb / r['wall']:.2f} MB/s; per core "
                f"{r['pages'] / r['wall'] / workers:,.0f} pages/s, "
                f"{mb / r['wall'] / workers:.2f} MB/s; CPU {r['cpu']:.1f} s -> "
                f"{r['pages'] / r['cpu']:,.0f} pages and {mb / r['cpu']:.2f} MB per CPU-second "
                f"(goal {GOAL_PAGES_PER_CORE_S} pages); peak RSS {r['peak_rss'] / 2**20:,.0f} MiB; "
                f"shard contents {_digest(r['shard_sha256'])}"
            )
        if len(args.workers) > 1:
            print(f"  shard contents identical across worker counts: {len(digests) == 1}")

    if not args.skip_profile:
        stage_profile(files, args.stock_every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
