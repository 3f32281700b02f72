"""``c4forge experiment CONFIG.toml -o DIR``: every arm × seed from corpus to a GLUE table.

argparse only here (``--help`` stays instant); the work is in ``c4forge.experiments.runner``.
A shipped config can be named without its path: ``c4forge experiment glu_table1``.
"""

from __future__ import annotations

import argparse
import os
from importlib import resources

CONFIGS = os.path.join(os.path.dirname(__file__), "configs")


def shipped_configs() -> list[str]:
    """Names of the shipped configs, read through importlib.resources, not the filesystem:
    the parser is built wherever c4forge is imported from, a zip included (spark-submit
    --py-files ships the package as one), where ``os.listdir(CONFIGS)`` fails."""
    folder = resources.files(__package__).joinpath("configs")
    return sorted(e.name[: -len(".toml")] for e in folder.iterdir() if e.name.endswith(".toml"))


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "experiment",
        help="run a comparison (corpus, objective, FFN, head …) from one TOML file to a table",
        description=(
            "Run a base recipe and its named arms (each overriding part of the recipe) over "
            "several seeds: clean → vocab → shards → pretrain → fine-tune each task from the "
            "checkpoint and from a random start. Stages shared by arms run once; a killed run "
            "resumes; changing one arm re-runs only what it changed. Writes DIR/results.md, "
            "results.json, loss_curves.png and scores.png. Shipped configs: "
            + ", ".join(shipped_configs())
        ),
    )
    p.add_argument("config", help="experiment TOML file, or the name of a shipped config")
    p.add_argument("--output", "-o", required=True, help="experiment folder")
    p.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="auto: every GPU (arms spread over them when there are several), else the CPU",
    )
    p.add_argument(
        "--stages",
        default=None,
        metavar="STORE",
        help="stage folder (default DIR/stages); experiments sharing one run equal stages once",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes of the clean and shards stages (default: the file's "
        "[experiment] workers, else all cores)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads of pretraining and fine-tuning (default 1 on CPU, torch's on GPU)",
    )
    p.add_argument("--check", action="store_true", help="check the file and print the plan only")
    p.add_argument(
        "--results-only",
        action="store_true",
        help="recompute the table and plots from the run folders (finished runs only)",
    )
    p.add_argument("--worker-runs", default=None, help=argparse.SUPPRESS)
    return p


def resolve_config(name: str) -> str:
    if os.path.exists(name) or os.sep in name or name.endswith(".toml"):
        return name
    return os.path.join(CONFIGS, f"{name}.toml")


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.experiments import runner
    from c4forge.experiments.schema import load
    from c4forge.experiments.stages import experiment_plan

    exp = load(resolve_config(args.config))  # every check, before any work
    root = os.path.abspath(args.output)
    if args.check:
        plan = experiment_plan(exp)
        kinds: dict[str, int] = {}
        for s in plan.stages:
            kinds[s.kind] = kinds.get(s.kind, 0) + 1
        print(
            f"{exp.name}: {len(exp.arms)} arms × {len(exp.seeds)} seeds; stages: "
            + ", ".join(f"{k} {v}" for k, v in kinds.items())
        )
        return 0
    if args.results_only:
        from c4forge.experiments.results import write_results

        print(write_results(root, exp)["markdown_summary"])
        return 0
    device, n_gpus = _devices(args.device)
    store = os.path.abspath(args.stages) if args.stages else os.path.join(root, "stages")
    if args.worker_runs is not None:
        plan = experiment_plan(exp)
        runner.run_worker(store, plan, [int(x) for x in args.worker_runs.split(",")], device)
        return 0
    workers = args.workers or exp.workers
    threads = args.threads if args.threads is not None else (1 if device == "cpu" else None)
    if threads is not None and threads < 1:
        from c4forge.errors import ConfigError

        raise ConfigError(f"--threads must be >= 1, got {threads}")
    runner.run_experiment(exp, root, device, workers, n_gpus, threads, store)
    return 0


def _devices(choice: str) -> tuple[str, int]:
    """(device for the stages, number of GPUs to spread arms over)."""
    import torch

    n = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if choice == "cpu" or (choice == "auto" and n == 0):
        return "cpu", 0
    if n == 0:
        from c4forge.errors import ConfigError

        raise ConfigError("--device cuda: no GPU is visible")
    return "cuda", n
