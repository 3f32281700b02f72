"""One stage (`clean` or `shards`) on every engine and worker count: wall, CPU and peak PSS of
the process tree, with the machine's load average beside each run.

Why a benchmark of its own: the engines now share one plan per stage, so what differs between
them is overhead (process start, a JVM, gRPC) and memory shape; this prints both for the same
input, and can run a second source tree (``--base /work/base``) the same way for a before /
after comparison. Each run is ``python -m c4forge STAGE …`` in a fresh process; PSS is summed
over its process tree every 0.2 s (``c4forge.proctree``), CPU is the tree's user + system
seconds (``getrusage`` of the waited child, which includes its waited descendants).

Usage::

    python benchmarks/stage_engines.py shards DOCS --vocab V --engines local,beam,spark \\
        --workers 1,2 [--base /work/base] [-- extra stage options]
    python benchmarks/stage_engines.py clean WET_DIR --engines beam,local --workers 1,2
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
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from c4forge.proctree import PeakSampler  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run_once(stage: str, source: Path, inp: str, out: Path, opts: list[str]) -> dict:
    """One run of ``stage`` from the source tree ``source``; its figures."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    cmd = [sys.executable, "-m", "c4forge", stage, inp, "-o", str(out), "--quiet", *opts]
    load0 = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with PeakSampler(proc.pid) as sampler:
        _, err = proc.communicate()
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{err.decode()[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
        "peak_pss_mb": round(sampler.peak / 1e6, 1),
        "load": f"{load0:.1f}..{os.getloadavg()[0]:.1f}",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("stage", choices=["clean", "shards"])
    ap.add_argument("input")
    ap.add_argument("--vocab", help="shards: the vocabulary folder")
    ap.add_argument("--engines", default="local,beam,spark")
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--base", type=Path, help="also run this source tree (e.g. /work/base)")
    ap.add_argument("--json", type=Path, help="write the figures here too")
    args, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    trees = [("this", ROOT)] + ([("base", args.base)] if args.base else [])
    rows = []
    tmp = Path(tempfile.mkdtemp(prefix="c4forge-stage-engines-"))
    try:
        for name, source in trees:
            # the base tree of `shards` had one engine (Beam) and no --engine flag
            engines = (
                args.engines.split(",") if name == "this" or args.stage == "clean" else ["beam"]
            )
            for engine in engines:
                for w in (int(x) for x in args.workers.split(",")):
                    opts = [*extra, "--workers", str(w)]
                    if engine != "auto" and (name == "this" or args.stage == "clean"):
                        opts += ["--engine", engine]
                    if engine == "spark":
                        opts += ["--master", f"local[{w}]"]
                    if args.vocab:
                        opts += ["--vocab", args.vocab]
                    out = tmp / f"{name}-{engine}-{w}"
                    r = run_once(args.stage, source, args.input, out, opts)
                    r.update(tree=name, engine=engine, workers=w)
                    rows.append(r)
                    print(
                        f"{name:5} {engine:6} w={w}  wall {r['wall_s']:7.1f} s  CPU "
                        f"{r['cpu_s']:7.1f} s  peak PSS {r['peak_pss_mb']:8.1f} MB  "
                        f"load {r['load']}",
                        flush=True,
                    )
                    shutil.rmtree(out, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
