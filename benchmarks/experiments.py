"""The four shipped experiments end to end: glu_table1, t5_objectives, t5_corpora, hire.

Each runs as ``c4forge experiment NAME -o WORK/NAME --stages WORK/stages`` in a child process,
one after another (``--parallel 2``: two chains at once, for a busy shared machine), all with one
stage store, so a stage that two configs share (the C4 clean, the vocabulary, the span-corruption
shards, the geglu pretraining and its fine-tunings, the random starts) runs once. Printed per
config: its table (results.md), the wall time, and the CPU seconds of its own stages (from the
stage.json markers: what the config costs when run alone) next to the child's CPU seconds.

Usage: ``python benchmarks/experiments.py --work /tmp/exp-runs [--parallel 2]``
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

CONFIGS = ["glu_table1", "t5_objectives", "t5_corpora", "hire"]


def run_one(name: str, work: str) -> dict:
    out = os.path.join(work, name)
    argv = [sys.executable, "-m", "c4forge", "experiment", name, "-o", out, "--device", "cpu"]
    argv += ["--stages", os.path.join(work, "stages")]
    t0 = time.perf_counter()
    with open(os.path.join(work, f"{name}.log"), "w") as log:
        code = subprocess.call(argv, stdout=log, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    return {"name": name, "exit": code, "wall_seconds": wall, "out": out}


def summary(entry: dict) -> str:
    res = json.load(open(os.path.join(entry["out"], "results.json")))
    table = open(os.path.join(entry["out"], "results.md")).read()
    b = res["budget"]
    return (
        f"## {entry['name']}: exit {entry['exit']}, {entry['wall_seconds']:.0f} s wall this "
        f"invocation; its {b['stages']} stages cost {b['cpu_seconds']:.0f} CPU s "
        f"({b['wall_seconds']:.0f} s wall when they ran)\n\n{table}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--work", required=True)
    ap.add_argument("--parallel", type=int, choices=(1, 2), default=1)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    names = args.configs.split(",")
    chains = [names] if args.parallel == 1 else [names[:1], names[1:]]
    import threading

    entries: list[dict] = []

    def chain(items: list[str]) -> None:
        for name in items:
            entries.append(run_one(name, args.work))

    threads = [threading.Thread(target=chain, args=(c,)) for c in chains]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    for entry in sorted(entries, key=lambda e: names.index(e["name"])):
        print(summary(entry), "\n")
    print(f"all children: {kids.ru_utime + kids.ru_stime:.0f} CPU s")


if __name__ == "__main__":
    main()
