"""Crawl scale: memory, CPU and shuffle bytes of `c4forge clean` as the corpus grows.

Corpus: ``benchmarks/corpus.py --unique`` (the bundled real text recombined, every prose line
rebuilt from at least three drawn sentences, so three-sentence spans are unique and dedup
removes little, as on a real crawl); ``--pages`` in ``--files`` WET files.

Each run is ``python -m c4forge clean CORPUS -o OUT --quiet [config options] --workers W`` as a
subprocess. Measured per run:

* CPU seconds of the whole process tree: ``RUSAGE_CHILDREN``, or the sum of each process's
  last sampled ``utime + stime`` where larger (Spark's JVM and workers are not always reaped);
* peak PSS of the process tree: every 0.5 s the tree under the command is walked in /proc and
  the ``Pss`` of each process (``smaps_rollup``; threads share their process's, so they are
  counted once) summed; the peak over samples is reported (a sampler can miss a short spike);
* wall seconds (noisy on a shared machine: read CPU seconds first), pages per CPU-second;
* where the peak sits: the engine step running at the peak sample, the driver's and each
  worker's PSS then, and the peak while each stage ran (local engine: its step timeline);
* shuffle bytes per stage per byte of input text (``C4FORGE_ENGINE_PROFILE``): the local
  engine's pickled spill bytes, Beam's elements in the coder of each shuffle, Spark's shuffle
  files (lz4) from its event log;
* a crawl projection: 3.3 × 10⁹ pages at the measured pages per CPU-second, in CPU-days.

Configurations (``--configs``): ``default`` (no engine option: ``--engine auto``), ``beam``
(``--engine beam``, the DirectRunner), ``spark`` (``--engine spark --master local[W]``).

Usage: ``python benchmarks/scale.py --pages 250000 --files 8 --configs default --workers 2
--json results.json`` (results are appended to ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
sys.path.insert(0, str(_HERE))
# isort: off
import corpus as corpus_mod  # noqa: E402

from c4forge.proctree import cpu_s, pss, tree  # noqa: E402
# isort: on

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

CRAWL_PAGES = 3.3e9
CONFIGS = {
    "default": [],
    "beam": ["--engine", "beam"],
    "spark": ["--engine", "spark", "--master", "local[{w}]"],
}


def run(corpus: Path, config: str, workers: int, tmp: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix="scale-", dir=tmp)) / "out"
    profile = out.parent / "profile.json"
    opts = [o.replace("{w}", str(workers)) for o in CONFIGS[config]]
    cmd = [sys.executable, "-m", "c4forge", "clean", str(corpus), "-o", str(out), *opts]
    cmd += ["--workers", str(workers)]
    env = dict(os.environ, C4FORGE_ENGINE_PROFILE=str(profile))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, env=env, cwd="/", stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    peak: dict = {"pss": 0, "procs": 0, "at": 0.0, "by_pid": {}}
    timeline: list[tuple[float, int]] = []  # (wall time, tree PSS) per sample
    seen: dict[int, float] = {}  # last CPU seconds sampled per process of the tree
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            pids = tree(proc.pid)
            for p in pids:
                c = cpu_s(p)
                if c is not None:
                    seen[p] = max(c, seen.get(p, 0.0))
            by_pid = {p: pss(p) for p in pids}
            total = sum(by_pid.values())
            now = time.time()
            timeline.append((now, total))
            if total > peak["pss"]:
                peak.update(pss=total, procs=len(pids), at=now, by_pid=by_pid)
            stop.wait(0.5)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    stdout, stderr = proc.communicate()
    wall = time.monotonic() - started
    stop.set()
    t.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"clean failed ({config}, {workers}): {stderr[-3000:]}")
    stats = json.loads((out / "stats.json").read_text())
    meta = json.loads((corpus / "manifest.json").read_text())
    text_bytes = meta["text_bytes"]
    # rusage covers the processes that were waited for; a JVM (Spark) and its Python workers
    # are not always reaped by the command, so the sampled figure can be the larger one
    cpu = max(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, sum(seen.values()))
    pages = stats["counters"]["wet"]["pages"]
    first = (stderr.splitlines() or [""])[0]
    result = {
        "config": config,
        "workers": workers,
        "pages": pages,
        "files": len(corpus_mod.corpus_files(corpus)),
        "text_mb": round(text_bytes / 1e6, 1),
        "input_gz_mb": round(sum(p.stat().st_size for p in corpus_mod.corpus_files(corpus)) / 1e6, 1),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "pages_per_cpu_s": round(pages / cpu, 1),
        "peak_pss_gb": round(peak["pss"] / 2**30, 3),
        "procs_at_peak": peak["procs"],
        "load_1min": round(load, 2),
        "documents": stats["totals"]["documents_out"],
        "crawl_cpu_days": round(CRAWL_PAGES / (pages / cpu) / 86400, 1),
        "first_line": first,
    }
    if profile.exists():
        prof = json.loads(profile.read_text())
        shuffled = prof["shuffle_bytes"]
        result["shuffle_bytes_per_text_byte"] = {
            k: round(v / text_bytes, 4) for k, v in sorted(shuffled.items())
        }
        result["shuffle_total_per_text_byte"] = round(sum(shuffled.values()) / text_bytes, 3)
        keys = sum(v for k, v in shuffled.items() if k != "output")
        result["shuffle_keys_per_text_byte"] = round(keys / text_bytes, 3)
        result["stage_cpu_s"] = {k: round(v, 1) for k, v in sorted(prof["seconds"].items())}
        result["peak_during"] = _step_at(prof.get("timeline", []), peak["at"])
        result["stage_peak_pss_gb"] = _peak_per_step(prof.get("timeline", []), timeline)
    # where the peak sits: the command's own process (the driver) and each child
    result["peak_driver_gb"] = round(peak["by_pid"].get(proc.pid, 0) / 2**30, 3)
    result["peak_children_gb"] = sorted(
        (round(v / 2**30, 3) for p, v in peak["by_pid"].items() if p != proc.pid), reverse=True
    )
    shutil.rmtree(out.parent, ignore_errors=True)
    return result


def _step_at(steps: list, t: float) -> str:
    """The engine step (``LocalEngine.timeline``: label, wall start, end) running at ``t``."""
    running = [label for label, start, end in steps if start <= t <= end]
    return running[-1] if running else "between steps"


def _peak_per_step(steps: list, samples: list[tuple[float, int]]) -> dict[str, float]:
    """Peak tree PSS (GB) while each stage (first part of the step label) ran."""
    out: dict[str, float] = {}
    for label, start, end in steps:
        inside = [v for t, v in samples if start <= t <= end]
        if inside:
            stage = label.split("/", 1)[0]
            out[stage] = max(out.get(stage, 0.0), round(max(inside) / 2**30, 3))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=1_000_000)
    ap.add_argument("--files", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--corpus", type=Path, help="corpus folder (default: built under ~/.cache)")
    ap.add_argument("--configs", nargs="+", default=["default"], choices=list(CONFIGS))
    ap.add_argument("--workers", type=int, nargs="+", default=[2])
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    ap.add_argument("--json", type=Path, help="append each run's figures here (JSON lines)")
    args = ap.parse_args(argv)
    corpus = args.corpus or (
        Path.home() / ".cache" / "c4forge-bench" / f"unique-s{args.seed}-n{args.pages}"
    )
    corpus_mod.build(corpus, args.pages, args.seed, args.files, [], unique=True)
    for config in args.configs:
        for w in args.workers:
            r = run(corpus, config, w, args.tmp)
            print(json.dumps(r), flush=True)
            if args.json:
                with open(args.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
