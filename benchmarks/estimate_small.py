"""`c4forge clean --estimate` against the run it predicts, on small inputs (1 MB to a few MB).

Why: the estimate's memory fit extrapolates from two cuts of the sample; on an input smaller
than the sample both cuts are the whole input, and a fit through two equal sizes once
projected 8,678 GB for 3.2 MB of WET. This runs the estimate, then the real command as a
user would (`c4forge clean IN -o OUT`, same ``--workers``), sampling the PSS of its process
tree (``c4forge.proctree``) and its CPU seconds (user + system of the whole tree), and
prints both figures side by side.

    python benchmarks/estimate_small.py WET… [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def measure(inputs: list[str], workers: int) -> dict:
    from c4forge import proctree

    with tempfile.TemporaryDirectory(prefix="c4forge-estimate-bench-") as tmp:
        cmd = [sys.executable, "-m", "c4forge", "clean", *inputs, "--workers", str(workers)]
        done = subprocess.run(
            [*cmd, "-o", f"{tmp}/estimate", "--estimate"], capture_output=True, text=True
        )
        if done.returncode:
            raise SystemExit(done.stderr[-2000:])
        est = json.loads(open(f"{tmp}/estimate/estimate.json").read())["input"]
        cpu0 = _children_cpu()
        child = subprocess.Popen([*cmd, "-o", f"{tmp}/real", "--quiet"])
        with proctree.PeakSampler(child.pid, interval=0.05) as sampler:
            child.wait()
        cpu = _children_cpu() - cpu0
    mb = sum(os.path.getsize(p) for p in inputs) / 1e6
    return {
        "input_mb": round(mb, 2),
        "peak_gb_estimate": est["peak_memory_gb"],
        "peak_gb_measured": round(sampler.peak / 2**30, 3),
        "cpu_s_estimate": est["cpu_s"],
        "cpu_s_measured": round(cpu, 1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="+")
    p.add_argument("--workers", type=int, default=2)
    args = p.parse_args()
    row = measure(args.inputs, args.workers)
    row["peak_ratio"] = round(row["peak_gb_estimate"] / max(row["peak_gb_measured"], 1e-9), 2)
    row["cpu_ratio"] = round(row["cpu_s_estimate"] / max(row["cpu_s_measured"], 1e-9), 2)
    print(json.dumps(row))


if __name__ == "__main__":
    main()
