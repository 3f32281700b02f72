"""Where the clean job's CPU goes beyond its filters, and how it scales with local workers.

Three measurements on the 20,000-page, 20-file corpus of ``benchmarks/corpus.py``:

1. ``e2e``: ``python -m c4forge clean CORPUS --workers N --quiet`` as a subprocess, for each N,
   repeated ``--repeat`` times *alternating* N (1, 2, 1, 2, …) so load changes on a shared
   machine hit both alike. Per run: wall seconds, CPU seconds of the whole process tree
   (``RUSAGE_CHILDREN``, exact), and CPU seconds per role, sampled from ``/proc/PID/stat``
   every 50 ms: the *controller* (the ``c4forge clean`` process: driver, Beam's FnApiRunner,
   its grouping buffers and gRPC data plane) and each *SDK worker* process. The shards'
   content digest shows every run wrote the same documents.
2. ``shuffle``: the job in one process (``--workers 1``) with Beam's grouping and stage
   buffers instrumented (``fn_api_runner.execution.GroupingBuffer.append`` /
   ``ListBuffer.append``): bytes and elements that cross each shuffle or stage boundary,
   labelled by the transform or PCollection the buffer belongs to.
3. ``amdahl``: from the ``e2e`` figures of N = 1 and N = 2, the serial part (controller CPU
   while workers run, plus start-up) and the parallel part (worker CPU), and the projected
   speed-up at 16 and 64 cores: ``S(N) = T1 / (serial + parallel / min(N, width))``, where
   ``width`` is the widest a stage can go (the front is one input file per bundle: 20 here).

Usage: ``python benchmarks/scaling.py e2e --workers 1 2 --repeat 3`` /
``python benchmarks/scaling.py shuffle`` / ``python benchmarks/scaling.py amdahl RESULT.json``
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import corpus as corpus_mod  # benchmarks/corpus.py: this folder is sys.path[0] for a script

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
# then off the path: benchmarks/langdetect.py must not shadow the real langdetect package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from c4forge.proctree import tree as process_tree  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------------------
# 1. end to end, CPU per process role


def _cpu_and_role(pid: int) -> tuple[float, str] | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return None
    cpu = (int(fields[11]) + int(fields[12])) / TICK  # utime + stime of this process only
    if not cmd:
        return None  # exiting: its last figure was taken while it ran
    if cmd.startswith("/bin/sh"):
        return cpu, "shell"  # `sh -c python -m …beam_worker`, Beam's launcher of a worker
    role = "sdk_worker" if "beam_worker" in cmd or "sdk_worker_main" in cmd else "controller"
    return cpu, role


def run_e2e(corpus: Path, workers: int, extra: list[str], tree: Path = ROOT) -> dict:
    out = Path(tempfile.mkdtemp(prefix="c4forge-scaling-")) / "out"
    cmd = [sys.executable, "-m", "c4forge", "clean", str(corpus), "-o", str(out)]
    cmd += ["--workers", str(workers), "--quiet", *extra]
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    seen: dict[int, tuple[float, str]] = {}
    marks: dict[str, float] = {}
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            for p in process_tree(proc.pid):
                got = _cpu_and_role(p)
                if got is not None:
                    # A zombie's cmdline is empty: keep the role it had while it ran.
                    role = "controller" if p == proc.pid else seen.get(p, got)[1]
                    seen[p] = (got[0], role)
                    if role == "sdk_worker" and "startup" not in marks and proc.pid in seen:
                        marks["startup"] = seen[proc.pid][0]  # controller CPU before workers
            stop.wait(0.05)

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    _, err = proc.communicate()
    wall = time.monotonic() - started
    stop.set()
    t.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"clean failed: {err.decode()[-2000:]}")
    stats = json.loads((out / "stats.json").read_text())
    digest = hashlib.sha256(
        "".join(f["content_sha256"] for s in stats["outputs"].values() for f in s["files"]).encode()
    ).hexdigest()[:16]
    roles: dict[str, float] = collections.defaultdict(float)
    per_worker = []
    for cpu, role in seen.values():
        roles[role] += cpu
        if role == "sdk_worker":
            per_worker.append(round(cpu, 2))
    import shutil

    shutil.rmtree(out.parent, ignore_errors=True)
    return {
        "workers": workers,
        "wall_s": round(wall, 2),
        "cpu_s": round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 2),
        "controller_cpu_s": round(roles["controller"], 2),
        "controller_startup_cpu_s": round(marks.get("startup", 0.0), 2),
        "worker_cpu_s": round(roles["sdk_worker"], 2),
        "per_worker_cpu_s": sorted(per_worker),
        "load_1min": round(load, 2),
        "documents": stats["totals"]["documents_out"],
        "digest": digest,
    }


def cmd_e2e(args: argparse.Namespace) -> int:
    corpus = corpus_mod.default_out(args.pages, args.seed)
    if not corpus.exists():
        corpus_mod.main(["--pages", str(args.pages), "--seed", str(args.seed)])
    results = []
    print(f"corpus: {corpus} ({len(corpus_mod.corpus_files(corpus))} files)")
    print("run workers   wall s   CPU s  controller  workers (each)            load  docs  digest")
    trees = [ROOT, *[Path(t) for t in args.compare]]
    for r in range(args.repeat):
        for tree in trees:
            for n in args.workers:
                res = run_e2e(corpus, n, args.job_args, tree)
                res["run"], res["tree"] = r + 1, str(tree)
                results.append(res)
                print(
                    f"{tree.name:>8} "
                    f"{r + 1:>3} {n:>7} {res['wall_s']:>8.2f} {res['cpu_s']:>7.2f} "
                    f"{res['controller_cpu_s']:>11.2f} {res['worker_cpu_s']:>8.2f} "
                    f"{str(res['per_worker_cpu_s']):<16} {res['load_1min']:>5.2f} "
                    f"{res['documents']:>5} {res['digest']}",
                    flush=True,
                )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    _summary(results)
    return 0


def _summary(results: list[dict]) -> None:
    groups: dict[tuple[str, int], list[dict]] = collections.defaultdict(list)
    for r in results:
        groups[(Path(r.get("tree", ROOT)).name, r["workers"])].append(r)
    print("\ntree      workers  wall s (min / median / max)   CPU s (min / median / max)")
    for (tree, n), rs in sorted(groups.items()):
        walls = sorted(r["wall_s"] for r in rs)
        cpus = sorted(r["cpu_s"] for r in rs)
        print(
            f"{tree:<9} {n:>7}  {walls[0]:.1f} / {walls[len(walls) // 2]:.1f} / {walls[-1]:.1f}"
            f"        {cpus[0]:.1f} / {cpus[len(cpus) // 2]:.1f} / {cpus[-1]:.1f}"
        )
    for tree in sorted({t for t, _ in groups}):
        one, two = groups.get((tree, 1), []), groups.get((tree, 2), [])
        speedups = [round(a["wall_s"] / b["wall_s"], 2) for a, b in zip(one, two, strict=False)]
        if speedups:
            print(f"{tree}: wall speed-up of 2 workers over 1, per alternating pair: {speedups}")
    digests = {r["digest"] for r in results}
    print(f"shard digests: {sorted(digests)} ({'identical' if len(digests) == 1 else 'DIFFER'})")


# ------------------------------------------------------------------------------------------
# 2. bytes across each shuffle / stage boundary


def cmd_shuffle(args: argparse.Namespace) -> int:
    from apache_beam.runners.portability.fn_api_runner import execution

    corpus = corpus_mod.default_out(args.pages, args.seed)
    traffic: dict[int, dict] = {}
    order: list[int] = []

    def record(buf: object, data: bytes, kind: str) -> None:
        entry = traffic.get(id(buf))
        if entry is None:
            entry = traffic[id(buf)] = {"kind": kind, "bytes": 0, "appends": 0}
            order.append(id(buf))
        entry["bytes"] += len(data)
        entry["appends"] += 1

    grouping_append = execution.GroupingBuffer.append
    list_append = execution.ListBuffer.append

    grouping_partition = execution.GroupingBuffer.partition

    def g_append(self, data):  # noqa: ANN001, ANN202
        record(self, data, "shuffle")
        t = time.process_time()
        before = sum(len(v) for v in self._table.values())
        try:
            return grouping_append(self, data)
        finally:
            e = traffic[id(self)]
            e["runner_cpu_s"] = e.get("runner_cpu_s", 0.0) + time.process_time() - t
            e["elements"] = (
                e.get("elements", 0) + sum(len(v) for v in self._table.values()) - before
            )

    def g_partition(self, n):  # noqa: ANN001, ANN202
        t = time.process_time()
        try:
            return grouping_partition(self, n)
        finally:
            e = traffic.get(id(self))
            if e is not None:
                e["runner_cpu_s"] = e.get("runner_cpu_s", 0.0) + time.process_time() - t

    def l_append(self, data):  # noqa: ANN001, ANN202
        record(self, data, "stage")
        return list_append(self, data)

    get_buffer = execution.BundleContextManager.get_buffer
    names: dict[int, str] = {}

    def named_get_buffer(self, buffer_id, transform_id):  # noqa: ANN001, ANN202
        buf = get_buffer(self, buffer_id, transform_id)
        kind, name = execution.split_buffer_id(buffer_id)
        components = self.execution_context.pipeline_components
        if kind == "group" and name in components.transforms:
            names[id(buf)] = components.transforms[name].unique_name
        elif kind == "materialize" and name in components.pcollections:
            names[id(buf)] = "PCollection " + components.pcollections[name].unique_name
        else:
            names.setdefault(id(buf), f"{kind} {name} (consumer {transform_id})")
        return buf

    execution.BundleContextManager.get_buffer = named_get_buffer
    execution.GroupingBuffer.append = g_append
    execution.GroupingBuffer.partition = g_partition
    execution.ListBuffer.append = l_append
    from c4forge.cli import main

    out = Path(tempfile.mkdtemp(prefix="c4forge-shuffle-")) / "out"
    started = time.process_time()
    assert (
        main(["clean", str(corpus), "-o", str(out), "--workers", "1", "--quiet", *args.job_args])
        == 0
    )
    cpu = time.process_time() - started
    total = sum(e["bytes"] for e in traffic.values())
    print(f"in-process run: {cpu:.1f} CPU s; {total / 1e6:.1f} MB crossed stage boundaries")
    print(f"{'kind':<8} {'MB':>8} {'elements':>9} {'grouping CPU s':>14}  buffer of")
    for key in order:
        e = traffic[key]
        if e["bytes"] >= 1000:
            print(
                f"{e['kind']:<8} {e['bytes'] / 1e6:>8.2f} {e.get('elements', ''):>9} "
                f"{e.get('runner_cpu_s', 0.0):>14.2f}  "
                f"{names.get(key, '?')}"
            )
    return 0


# ------------------------------------------------------------------------------------------
# 3. Amdahl projection


WORKER_IMPORTS = """
from apache_beam.runners.worker import sdk_worker_main
import c4forge.engines.beam
from c4forge.rules import badwords
from c4forge.rules import lines as clean
from c4forge.langid import langdetect_filter as langid
langid.langid_filter("This is a fairly long English sentence for the detector.", lambda *a: None)
"""


def worker_startup_cpu() -> float:
    """CPU seconds a fresh SDK worker spends importing Beam's harness and c4forge's filters
    (numba kernels from cache, Punkt, langdetect tables) before its first element."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", WORKER_IMPORTS], env=env, check=True, capture_output=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def cmd_amdahl(args: argparse.Namespace) -> int:
    """Amdahl with the measured serial part (method in the module docstring, figures in
    benchmarks/RESULTS.md): the controller's CPU (start-up, relaying every element between
    stages, grouping) does not shrink with more workers; each worker's start-up is paid once
    per worker, in parallel; the rest of the workers' CPU divides among min(N, width)."""
    results = json.loads(Path(args.results).read_text())
    med = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    t1 = med([r["cpu_s"] for r in results if r["workers"] == 1])  # one busy core ≈ wall, idle
    two = [r for r in results if r["workers"] == 2]
    controller = med([r["controller_cpu_s"] for r in two])
    workers = med([r["worker_cpu_s"] for r in two])
    w0 = args.worker_startup if args.worker_startup is not None else worker_startup_cpu()
    serial = controller + w0
    parallel = workers - 2 * w0
    print(f"T1 = {t1:.2f} CPU s (--workers 1, in-process; the wall time on one idle core)")
    print(
        f"--workers 2: controller {controller:.2f} CPU s, workers {workers:.2f} CPU s, "
        f"worker start-up {w0:.2f} CPU s each"
    )
    print(
        f"serial = controller + one worker start-up = {serial:.2f} s; "
        f"parallel = workers - 2 start-ups = {parallel:.2f} s"
    )
    print(f"serial fraction s = {serial / (serial + parallel):.1%} of the 2-worker job's work")
    for n in (1, 2, 4, 16, 64):
        t = serial + parallel / min(n, args.width)
        print(
            f"N={n:>2}: T(N) = {serial:.2f} + {parallel:.2f}/{min(n, args.width)} = {t:.2f} s,"
            f" speed-up over --workers 1: {t1 / t:.2f}x"
        )
    print(f"limit (N → ∞): {t1 / serial:.2f}x")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("e2e")
    e.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    e.add_argument("--repeat", type=int, default=3)
    e.add_argument("--json", help="write every run's figures here")
    e.add_argument(
        "--compare",
        nargs="*",
        default=[],
        metavar="TREE",
        help="other source trees (e.g. a checkout of the previous commit), run alternately",
    )
    s = sub.add_parser("shuffle")
    for p in (e, s):
        p.add_argument("--pages", type=int, default=20_000)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("job_args", nargs="*", help="after --: more `c4forge clean` options")
    a = sub.add_parser("amdahl")
    a.add_argument("results", help="the --json file of an e2e run with --workers 1 2")
    a.add_argument("--width", type=int, default=20, help="widest stage (input files)")
    a.add_argument("--worker-startup", type=float, help="CPU s per worker start-up (measured)")
    args = ap.parse_args(argv)
    return {"e2e": cmd_e2e, "shuffle": cmd_shuffle, "amdahl": cmd_amdahl}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
