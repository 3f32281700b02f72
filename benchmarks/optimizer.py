"""One optimizer step over a T5 preset's parameters: ops dispatched, host reads, time.

The op and host-read counts (torch profiler, ``tests/optim_references.py``) are what a GPU pays
in launches and syncs, and they are the same on any machine; the times are this machine's (the
CPU here: eager, no compile), taken in turns so every optimizer sees the same load.

Usage: ``python benchmarks/optimizer.py --preset small --repeat 5``
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from c4forge.trainers.config import make_config
from c4forge.trainers.models.t5 import GLUTransformer
from c4forge.trainers.optim import build_optimizer

# the references are test helpers (tests/optim_references.py), not part of the package
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from optim_references import optimizer_step_ops, torch_adafactor  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="small")
    ap.add_argument("--embedding-size", type=int, default=32128)
    ap.add_argument("--repeat", type=int, default=5, help="timed steps per optimizer")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    builders = {
        "sync-free Adafactor": lambda ps: build_optimizer("adafactor", ps),
        "torch.optim.Adafactor": torch_adafactor,
        "torch.optim.AdamW (foreach)": lambda ps: torch.optim.AdamW(ps, foreach=True),
    }
    runs = {}
    for name, build in builders.items():
        torch.manual_seed(0)
        model = GLUTransformer(make_config(args.preset, args.embedding_size)).to(args.device)
        params = list(model.parameters())
        opt = build(params)
        count = optimizer_step_ops(opt, params)  # also allocates the state
        runs[name] = (opt, count, [])
        n = sum(p.numel() for p in params)
        print(f"{name:<28} {count.line()}  [{len(params)} tensors, {n / 1e6:.1f} M parameters]")
    for _ in range(args.repeat):  # in turns: every optimizer sees the same load
        for opt, _, times in runs.values():
            start = time.perf_counter()
            opt.step()
            if args.device.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"step() time, median of {args.repeat} ({args.device}, load average {load}):")
    for name, (_, _, times) in runs.items():
        print(f"  {name:<28} {1000 * statistics.median(times):9.1f} ms")


if __name__ == "__main__":
    main()
