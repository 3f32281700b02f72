"""Beam (DirectRunner, 2 workers) vs native Spark (local[2]) on the same input, and MinHash
near-dedup on its own at two corpus sizes.

1. **End to end**: ``python -m c4forge clean CORPUS`` as a subprocess, once with
   ``--workers 2`` (Beam FnApiRunner, multi-processing) and once with ``--engine spark
   --master local[2]``. The corpus is ``benchmarks/corpus.py``'s (real text recombined;
   ``--pages``, default 2,000). Prints wall time, pages/s, CPU seconds of the process tree
   (sampled from /proc every 0.2 s, so a slight undercount),
   peak memory (sum of the tree's RSS, sampled every 0.2 s) and whether the two engines wrote
   the same shards (content_sha256 of every shard).
2. **Near-dedup alone** (``--near-pages``, default 1,000 and 4,000): pages are made *inside*
   the workers from the 1,000 real C4 documents (page ``i`` = document ``i % 1000`` with 1 % of
   its words replaced for every further copy, so each document has ``n / 1000`` near copies),
   then the plan's MinHash-LSH near-dedup stage runs (``c4forge.dedup.minhash.NearDedupStage``
   on ``engines.beam.BeamEngine`` / ``engines.spark.SparkEngine``). Printed: pages/s, removed pages, and peak RSS of the
   largest *worker* process versus the driver/JVM. The claim under test: a worker's memory
   does not grow with the number of pages (each holds one bucket / one node at a time); the
   DirectRunner's driver and Spark's JVM hold the shuffled data, which is their job.

Usage: ``python benchmarks/engines.py [--pages 2000] [--near-pages 1000 4000] [--skip-e2e]``
(``--near-only ENGINE N`` is the child process of part 2.)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
C4_SAMPLE = ROOT / "c4forge/data/sample/c4-sample.00000-of-00001.json.gz"


def _load_corpus_module():
    spec = importlib.util.spec_from_file_location("c4forge_bench_corpus", _HERE / "corpus.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# --------------------------------------------------------------------------------------------
# process-tree memory sampling (/proc, Linux)


def _children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _cpu_ticks(pid: int) -> int:
    """utime + stime of one process (clock ticks), from /proc/PID/stat."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    except (OSError, IndexError, ValueError):
        return 0


def _kind(pid: int, root: int) -> str:
    if pid == root:
        return "driver"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    if "java" in cmd.split(" ", 1)[0]:
        return "jvm"
    return "worker" if "python" in cmd else "other"


class TreeSampler:
    """Peak RSS of a process tree (total, and the largest single process of each kind) and its
    CPU time (last utime + stime seen per process; RUSAGE_CHILDREN misses Spark's workers,
    which the JVM, not our child, reaps)."""

    def __init__(self, root: int, every: float = 0.2) -> None:
        self.root, self.every = root, every
        self.peak_total = 0
        self.peak: dict[str, int] = {}
        self.ticks: dict[int, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            seen, todo, total = set(), [self.root], 0
            while todo:
                pid = todo.pop()
                if pid in seen:
                    continue
                seen.add(pid)
                rss = _rss_kb(pid)
                self.ticks[pid] = max(self.ticks.get(pid, 0), _cpu_ticks(pid))
                total += rss
                kind = _kind(pid, self.root)
                self.peak[kind] = max(self.peak.get(kind, 0), rss)
                todo += _children(pid)
            self.peak_total = max(self.peak_total, total)
            self._stop.wait(self.every)

    @property
    def cpu_s(self) -> float:
        return sum(self.ticks.values()) / os.sysconf("SC_CLK_TCK")

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _mb(kb: int) -> str:
    return f"{kb / 1024:,.0f} MB"


def run_tree(
    cmd: list[str], env: dict[str, str] | None = None
) -> tuple[float, float, TreeSampler, str]:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    with TreeSampler(proc.pid) as sampler:
        out, err = proc.communicate()
    wall = time.monotonic() - t0
    cpu = sampler.cpu_s
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:6])} … failed ({proc.returncode}):\n{err[-3000:]}")
    return wall, cpu, sampler, out


# --------------------------------------------------------------------------------------------
# 1. end to end


def end_to_end(pages: int) -> None:
    corpus = _load_corpus_module()
    out_dir = corpus.default_out(pages, 0)
    corpus.build(out_dir, pages, 0, 4, [])
    tmp = Path(tempfile.mkdtemp(prefix="c4forge-engines-"))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    results = {}
    try:
        for name, extra in (
            ("beam (FnApiRunner, 2 workers)", ["--workers", "2"]),
            ("spark (local[2])", ["--engine", "spark", "--master", "local[2]"]),
        ):
            out = tmp / name.split()[0]
            cmd = [
                sys.executable,
                "-m",
                "c4forge",
                "clean",
                str(out_dir),
                "-o",
                str(out),
                "--quiet",
                *extra,
            ]
            wall, cpu, s, _ = run_tree(cmd, env)
            stats = json.loads((out / "stats.json").read_text())
            n = stats["counters"]["wet"]["pages"]
            results[name] = stats["outputs"]
            print(
                f"{name:<32} {n:,} pages in {wall:6.1f} s = {n / wall:6.1f} pages/s "
                f"({n / cpu:6.1f} pages per CPU-s, {cpu:6.1f} CPU-s); peak RSS tree "
                f"{_mb(s.peak_total)}, driver {_mb(s.peak.get('driver', 0))}, largest worker "
                f"{_mb(s.peak.get('worker', 0))}, jvm {_mb(s.peak.get('jvm', 0))}; "
                f"{stats['totals']['documents_out']:,} documents",
                flush=True,
            )
        a, b = results.values()
        print(f"shards identical (content_sha256 per shard): {a == b}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# 2. near-dedup alone (child process)

_DOCS: list[str] = []


def make_page(i: int):  # -> Doc, built inside the worker
    import gzip
    import random

    from c4forge.corpus.documents import Doc

    if not _DOCS:
        with gzip.open(C4_SAMPLE, "rt", encoding="utf-8") as f:
            _DOCS.extend(json.loads(line)["text"] for line in f)
    base, copy = i % len(_DOCS), i // len(_DOCS)
    text = _DOCS[base]
    if copy:
        rng = random.Random(i)
        words = text.split(" ")
        for k in rng.sample(range(len(words)), max(1, len(words) // 100)):
            words[k] = words[k][::-1]
        text = " ".join(words)
    url = f"https://bench{copy}.example/{base}"
    return Doc(url, "2019-04-20T00:00:00Z", url, text)


def near_only(engine: str, n: int) -> None:
    from c4forge.dedup.minhash import MAX_ROUNDS, NearDedupStage, make_params

    stage = NearDedupStage("near_dedup", make_params(), MAX_ROUNDS)
    t0 = time.monotonic()
    if engine == "spark":
        from c4forge.engines.spark import SparkEngine
        from c4forge.engines.spark_launch import make_context

        sc = make_context("local[2]", None, [])
        t0 = time.monotonic()  # JVM start excluded
        spark = SparkEngine(spark_context=sc)
        spark.parts = 4
        docs = sc.parallelize(range(n), 8).map(make_page)
        kept = stage.expand(spark, docs).count()
        counters = spark.counters()["near_dedup"]
        sc.stop()
    else:
        import apache_beam as beam

        from c4forge.clean.config import CleanJob
        from c4forge.engines.beam import BeamEngine

        beam_engine = BeamEngine(CleanJob(("-",), "-", workers=2))
        p = beam_engine.pipeline
        docs = p | beam.Create(list(range(n))) | beam.Reshuffle() | beam.Map(make_page)
        _ = stage.expand(beam_engine, docs) | beam.combiners.Count.Globally()
        beam_engine.execute()
        counters = beam_engine.counters()["near_dedup"]
        kept = counters.get("passed", 0)
    wall = time.monotonic() - t0
    print(json.dumps({"wall": wall, "kept": kept, "counters": counters}))


def near_dedup_sizes(sizes: list[int]) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    for engine in ("beam", "spark"):
        for n in sizes:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--near-only", engine, str(n)]
            wall_all, cpu, s, out = run_tree(cmd, env)
            res = json.loads(out.strip().splitlines()[-1])
            c = res["counters"]
            print(
                f"near-dedup {engine:<5} {n:>6,} pages: {res['wall']:6.1f} s = "
                f"{n / res['wall']:6.1f} pages/s; removed {c.get('removed', 0):,}, candidates "
                f"{c.get('candidates', 0):,}, true pairs {c.get('true_pairs', 0):,}; peak RSS largest worker "
                f"{_mb(s.peak.get('worker', 0))}, driver {_mb(s.peak.get('driver', 0))}, jvm "
                f"{_mb(s.peak.get('jvm', 0))}, tree {_mb(s.peak_total)}",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, default=2000, help="end-to-end corpus size")
    ap.add_argument("--near-pages", type=int, nargs="+", default=[1000, 4000])
    ap.add_argument("--skip-e2e", action="store_true")
    ap.add_argument("--skip-near", action="store_true")
    ap.add_argument("--near-only", nargs=2, metavar=("ENGINE", "N"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.near_only:
        near_only(args.near_only[0], int(args.near_only[1]))
        return 0
    print(f"machine: {os.cpu_count()} cores; load average {os.getloadavg()[0]:.1f}")
    if not args.skip_e2e:
        end_to_end(args.pages)
    if not args.skip_near:
        near_dedup_sizes(args.near_pages)
    return 0


if __name__ == "__main__":
    sys.exit(main())
