"""`c4forge clean --estimate` against the run it predicts, from 1 MB to 1M pages.

Why: the estimate projects CPU and the peak memory of the run's process tree from a sample;
this checks it. It runs the estimate, then (unless ``--measured`` gives the figures of a run
made elsewhere, such as a 1M-page clean too long to repeat) the real command as a user would
(`c4forge clean IN -o OUT`, same ``--workers``), sampling the PSS of its process tree
(``c4forge.proctree``) and its CPU seconds (user + system of the whole tree), and prints both
side by side with the error of each. ``--json`` appends the row; ``--table`` prints the
Markdown table of RESULTS §24 from such rows (goal: within ±30 % on peak and CPU).

    python benchmarks/estimate_small.py WET… [--workers 2] [--label 10k] [--json rows.jsonl]
    python benchmarks/estimate_small.py DIR --measured CPU_S PEAK_GIB --json rows.jsonl
    python benchmarks/estimate_small.py --table rows.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

GOAL = 0.30  # the estimate within ±30 % of the measured peak and CPU


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _input_bytes(inputs: list[str]) -> int:
    from c4forge.io.inputs import resolve_inputs

    return sum(f.size for f in resolve_inputs(inputs))


def measure(inputs: list[str], workers: int, measured: list[float] | None = None) -> dict:
    from c4forge import proctree

    with tempfile.TemporaryDirectory(prefix="c4forge-estimate-bench-") as tmp:
        cmd = [sys.executable, "-m", "c4forge", "clean", *inputs, "--workers", str(workers)]
        cpu0 = _children_cpu()
        done = subprocess.run(
            [*cmd, "-o", f"{tmp}/estimate", "--estimate"], capture_output=True, text=True
        )
        estimate_cpu = _children_cpu() - cpu0
        if done.returncode:
            raise SystemExit(done.stderr[-2000:])
        est = json.loads(open(f"{tmp}/estimate/estimate.json").read())["input"]
        if measured is None:
            cpu0 = _children_cpu()
            child = subprocess.Popen([*cmd, "-o", f"{tmp}/real", "--quiet"])
            with proctree.PeakSampler(child.pid, interval=0.05) as sampler:
                child.wait()
            cpu, peak = _children_cpu() - cpu0, sampler.peak / 2**30
        else:
            cpu, peak = measured
    return {
        "input_mb": round(_input_bytes(inputs) / 1e6, 2),
        "files": est["files"],
        "pages_estimate": est["pages"],
        "peak_gib_estimate": est["peak_memory_gib"],
        "peak_gib_measured": round(peak, 3),
        "cpu_s_estimate": est["cpu_s"],
        "cpu_s_measured": round(cpu, 1),
        "estimate_cpu_s": round(estimate_cpu, 1),
        "memory_parts_gib": est.get("memory_parts_gib"),
    }


def _err(estimate: float, measured: float) -> float:
    return estimate / max(measured, 1e-9) - 1


def table(rows: list[dict]) -> str:
    """RESULTS §24's table: estimate vs measured, error, goal met."""
    lines = [
        "| input | MB gz | pages | files | CPU-s: estimate / measured (error) "
        "| peak GiB: estimate / measured (error) | within ±30 % | the estimate's own CPU-s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cpu = _err(r["cpu_s_estimate"], r["cpu_s_measured"])
        peak = _err(r["peak_gib_estimate"], r["peak_gib_measured"])
        met = "yes" if abs(cpu) <= GOAL and abs(peak) <= GOAL else "**no**"
        lines.append(
            f"| {r.get('label', '')} | {r['input_mb']:,.1f} | {r['pages_estimate']:,} "
            f"| {r['files']} | {r['cpu_s_estimate']:,.1f} / {r['cpu_s_measured']:,.1f} "
            f"({cpu:+.0%}) | {r['peak_gib_estimate']:.2f} / {r['peak_gib_measured']:.3f} "
            f"({peak:+.0%}) | {met} | {r.get('estimate_cpu_s', '')} |"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("inputs", nargs="*")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--label", default="", help="the row's name in the table")
    p.add_argument(
        "--measured",
        nargs=2,
        type=float,
        metavar=("CPU_S", "PEAK_GIB"),
        help="the real run's figures, measured elsewhere (no real run here)",
    )
    p.add_argument("--json", help="append the row to this JSON-lines file")
    p.add_argument("--table", help="print the Markdown table of the rows in this file, only")
    args = p.parse_args()
    if args.table:
        with open(args.table) as f:
            print(table([json.loads(line) for line in f if line.strip()]))
        return
    if not args.inputs:
        p.error("give the inputs (or --table ROWS)")
    row = {"label": args.label, **measure(args.inputs, args.workers, args.measured)}
    row["measured_here"] = args.measured is None
    row["load_1min"] = round(os.getloadavg()[0], 1)
    print(json.dumps(row))
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
