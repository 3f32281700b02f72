"""Run an experiment's plan: shared stages once, then every arm × seed, then the results.

```
DIR/experiment.toml            the file this run was started from (a copy)
DIR/plan.json                  every stage (kind, key, config, inputs) and every run's roles
DIR/stages/<kind>-<key>/       one folder per stage; stage.json marks it done (--stages STORE:
                               a store several experiments share, so equal stages run once)
DIR/runs/<arm>/seed-<s>/       links to the stages the arm used (clean, vocab, shards,
                               pretrain, ft-<task>-pretrained, ft-<task>-random) + run.json
DIR/results.json, results.md   the table; loss_curves.png, scores.png
```

Devices: on CPU or one GPU the stages run one after another in this process. With several
GPUs the shared stages (clean, vocab, shards) still run here first; then each run's own stages
(pretraining and its fine-tunings) form a unit, units are spread over the GPUs (longest first,
onto the least loaded GPU), and one worker process per GPU (``CUDA_VISIBLE_DEVICES``) runs its
units in order. A worker is this same command with ``--worker-runs``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from typing import Any

from c4forge.errors import C4ForgeError
from c4forge.experiments import execute
from c4forge.experiments.heartbeat import StageHeartbeat
from c4forge.experiments.schema import Experiment
from c4forge.experiments.stages import Plan, Stage
from c4forge.io import ownership
from c4forge.io.storage import atomic_write_text, write_json
from c4forge.progress import line_every_seconds

SHARED_KINDS = ("clean", "vocab", "shards", "taskshards")


def say(text: str) -> None:
    print(text, file=sys.__stdout__, flush=True)


def write_plan(root: str, store: str, exp: Experiment, plan: Plan) -> None:
    os.makedirs(store, exist_ok=True)
    with open(exp.path, encoding="utf-8") as f:
        atomic_write_text(os.path.join(root, "experiment.toml"), f.read())
    doc = {
        "format": "c4forge.experiment.plan",
        "format_version": 1,
        "name": exp.name,
        "base_arm": exp.base_name,
        "seeds": exp.seeds,
        "stages_dir": os.path.relpath(store, root),
        "stages": [
            {
                "name": s.name,
                "kind": s.kind,
                "key": s.key,
                "config": s.config,
                "inputs": [i.name for i in s.inputs],
                "after": [a.name for a in s.after],
            }
            for s in plan.stages
        ],
        "runs": [
            {
                "arm": r.arm,
                "seed": r.seed,
                "folder": r.folder,
                "stages": {role: s.name for role, s in r.stages.items()},
            }
            for r in plan.runs
        ],
    }
    write_json(os.path.join(root, "plan.json"), doc)


def link_runs(root: str, store: str, exp: Experiment, plan: Plan) -> None:
    """DIR/runs/<arm>/seed-<s>/<role> → ../../../stages/<name> (relative: the folder moves)."""
    for run in plan.runs:
        folder = os.path.join(root, run.folder)
        os.makedirs(folder, exist_ok=True)
        for role, stage in run.stages.items():
            link = os.path.join(folder, role)
            target = os.path.relpath(execute.stage_dir(store, stage), folder)
            if os.path.islink(link) and os.readlink(link) == target:
                continue
            if os.path.lexists(link):
                os.remove(link) if os.path.islink(link) else shutil.rmtree(link)
            os.symlink(target, link)
        for stale in set(os.listdir(folder)) - set(run.stages) - {"run.json"}:
            path = os.path.join(folder, stale)
            if os.path.islink(path):
                os.remove(path)  # a role the arm no longer has (a task removed)
        write_json(
            os.path.join(folder, "run.json"),
            {
                "arm": run.arm,
                "seed": run.seed,
                "recipe": exp.arms[run.arm],
                "overrides": exp.overrides[run.arm],
                "stages": {role: s.name for role, s in run.stages.items()},
            },
        )
    wanted = {r.arm for r in plan.runs}
    runs_dir = os.path.join(root, "runs")
    for arm in sorted(set(os.listdir(runs_dir)) - wanted):
        shutil.rmtree(os.path.join(runs_dir, arm))  # an arm removed from the file: links only


def _label(stage: Stage, plan: Plan) -> str:
    users = [f"{r.arm}/seed-{r.seed}" for r in plan.runs if stage in r.stages.values()]
    c = stage.config
    what = {
        "clean": lambda: f"variant {c['variant']}",
        "vocab": lambda: f"{c['size']} pieces",
        "shards": lambda: f"{c['objective']}",
        "taskshards": lambda: f"task {c['task']}",
        "pretrain": lambda: (
            f"{c['model'].get('ffn', 'default FFN')}, {c['steps']} steps"
            + (f", mix {'+'.join(c['mix']['names'])}" if "mix" in c else "")
        ),
        "finetune": lambda: (
            f"{c['task']} {c['init']}" + (" (no fine-tuning)" if not c["steps"] else "")
        ),
    }[stage.kind]()
    shown = ", ".join(users[:3]) + (f" +{len(users) - 3}" if len(users) > 3 else "")
    return f"{stage.kind:8s} {what:28s} ({shown})"


def run_stages(
    store: str,
    stages: list[Stage],
    plan: Plan,
    device: str,
    workers: int | None,
    tag: str = "",
    threads: int | None = None,
) -> dict[str, float]:
    """Run the stages not yet done, in order; returns wall and CPU seconds spent."""
    total = {"wall": 0.0, "cpu": 0.0, "ran": 0, "skipped": 0}
    for i, stage in enumerate(stages, 1):
        head = f"{tag}[{i}/{len(stages)}] {_label(stage, plan)}"
        with execute.stage_lock(store, stage):
            if execute.is_done(store, stage):
                total["skipped"] += 1
                say(f"{head}: done earlier ({stage.name})")
                continue
            resumed = os.path.isdir(execute.stage_dir(store, stage))
            say(f"{head}: {'resuming' if resumed else 'running'} → {stage.name}")
            beat = StageHeartbeat(
                head,
                execute.stage_dir(store, stage),
                stage.config.get("steps"),
                say,
                line_every_seconds(),
            )
            try:
                with beat:
                    marker = execute.run_stage(store, stage, device, workers, threads)
            except C4ForgeError as err:
                log = os.path.join(execute.stage_dir(store, stage), execute.LOG)
                raise C4ForgeError(f"stage {stage.name} failed: {err} (log: {log})") from None
        total["wall"] += marker["wall_seconds"]
        total["cpu"] += marker["cpu_seconds"]
        total["ran"] += 1
        say(f"{head}: done in {marker['wall_seconds']:.1f} s (CPU {marker['cpu_seconds']:.1f} s)")
    return total


# ------------------------------------------------------------------------------- several GPUs
def units(plan: Plan) -> list[list[Stage]]:
    """Per run, the non-shared stages it is the first to need (its own pretraining, its
    fine-tunings, and the random baselines it first claims): disjoint, self-contained."""
    claimed: set[str] = set()
    out = []
    for run in plan.runs:
        own = []
        for stage in plan.stages:
            if stage.kind in SHARED_KINDS or stage.key in claimed:
                continue
            if stage in run.stages.values():
                own.append(stage)
                claimed.add(stage.key)
        out.append(own)
    return out


def unit_cost(stages: list[Stage]) -> float:
    """Relative cost: pretraining steps × batch plus fine-tuning steps × batch."""
    return float(sum(s.config.get("steps", 0) * s.config.get("batch_size", 1) for s in stages))


def assign(costs: list[float], n_devices: int) -> list[list[int]]:
    """Longest-processing-time first: each unit (by index) onto the least loaded device; ties
    go to the lower device, and a device's units keep plan order (deterministic)."""
    if n_devices < 1:
        raise ValueError("n_devices must be >= 1")
    load = [0.0] * n_devices
    out: list[list[int]] = [[] for _ in range(n_devices)]
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        d = min(range(n_devices), key=lambda d: (load[d], d))
        out[d].append(i)
        load[d] += costs[i]
    return [sorted(x) for x in out]


def worker_commands(
    config: str, root: str, store: str, groups: list[list[int]], extra: list[str]
) -> list[tuple[dict[str, str], list[str]]]:
    """(environment, argv) of one worker per device that has units."""
    cmds = []
    for device, group in enumerate(groups):
        if not group:
            continue
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(device)}
        argv = [
            sys.executable,
            "-m",
            "c4forge",
            "experiment",
            config,
            "-o",
            root,
            "--stages",
            store,
            "--worker-runs",
            ",".join(map(str, group)),
            *extra,
        ]
        cmds.append((env, argv))
    return cmds


def run_parallel(
    exp: Experiment,
    root: str,
    store: str,
    plan: Plan,
    n_gpus: int,
    workers: int | None,
    worker_device: str = "cuda",
) -> None:
    """Shared stages here, then one worker process per GPU (``worker_device`` "cpu" runs the
    same processes without CUDA: the tests exercise this path on a machine without GPUs)."""
    shared = [s for s in plan.stages if s.kind in SHARED_KINDS]
    run_stages(store, shared, plan, worker_device, workers)
    groups = assign([unit_cost(u) for u in units(plan)], n_gpus)
    procs = []
    for env, argv in worker_commands(exp.path, root, store, groups, ["--device", worker_device]):
        say(
            f"worker on GPU {env['CUDA_VISIBLE_DEVICES']}: runs {argv[argv.index('--worker-runs') + 1]}"
        )
        procs.append(subprocess.Popen(argv, env=env))
    failed = [p.args for p in procs if p.wait() != 0]
    if failed:
        raise C4ForgeError(f"{len(failed)} GPU worker(s) failed; run the command again to resume")


def run_worker(store: str, plan: Plan, run_indices: list[int], device: str) -> None:
    all_units = units(plan)
    for i in run_indices:
        if not 0 <= i < len(all_units):
            raise C4ForgeError(f"--worker-runs: no run {i} (the plan has {len(all_units)})")
        run = plan.runs[i]
        run_stages(store, all_units[i], plan, device, None, tag=f"{run.arm}/seed-{run.seed} ")


# ------------------------------------------------------------------------------- the whole job
@ownership.owns_output("experiment", lambda exp, root, *_, **__: root)
def run_experiment(
    exp: Experiment,
    root: str,
    device: str,
    workers: int | None = None,
    n_gpus: int | None = None,
    threads: int | None = None,
    store: str | None = None,
) -> dict[str, Any]:
    from c4forge.experiments.results import write_results
    from c4forge.experiments.stages import experiment_plan

    start, cpu0 = time.perf_counter(), execute._cpu_seconds()  # noqa: SLF001
    store = store or os.path.join(root, "stages")
    plan = experiment_plan(exp)
    write_plan(root, store, exp, plan)
    link_runs(root, store, exp, plan)
    done = sum(execute.is_done(store, s) for s in plan.stages)
    say(
        f"c4forge experiment {exp.name}: {len(exp.arms)} arms × {len(exp.seeds)} seeds, "
        f"{len(plan.stages)} stages ({done} done earlier) → {root}"
    )
    if n_gpus is not None and n_gpus > 1:
        run_parallel(exp, root, store, plan, n_gpus, workers)
    else:
        run_stages(store, plan.stages, plan, device, workers, threads=threads)
    results = write_results(root, exp)
    wall, cpu = time.perf_counter() - start, execute._cpu_seconds() - cpu0  # noqa: SLF001
    say(
        f"\n{results['markdown_summary']}\n\nthis invocation: {wall:.0f} s wall, {cpu:.0f} s CPU; "
        f"stage CPU total (all invocations): {results['budget']['cpu_seconds']:.0f} s\n"
        f"results: {os.path.join(root, 'results.md')} (+ results.json, loss_curves.png, scores.png)"
    )
    return results
