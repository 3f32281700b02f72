"""`c4forge clean`: WET (or WARC) files → C4 documents, on Beam or natively on Spark.

Argparse only; the job itself is imported lazily in ``run`` so `--help` stays instant.
Unrecognised arguments are engine options (Beam ``PipelineOptions`` such as ``--runner
DataflowRunner --project P``, or ``--conf spark.KEY=V`` with ``--engine spark``); ``c4forge.cli``
checks them against the engine's own option set first (``c4forge.engines.passthrough``), so a typo is an
error, not a silently different corpus.
"""

from __future__ import annotations

import argparse

from c4forge.clean.config import CleanJob


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "clean",
        help="WET files → C4 documents (local, Spark or Beam: --engine)",
        description=(
            "Read Common Crawl WET files, apply the C4 rules (line/page heuristics, "
            "three-sentence-span dedup, langdetect >= 0.99, bad words) and write C4-release "
            "shards plus stats.json. Unknown options are passed to the engine unchanged: Beam "
            "pipeline options (e.g. --runner DataflowRunner --project P --region R "
            "--temp_location gs://B/tmp --setup_file ./setup.py), or --conf spark.KEY=V with "
            "--engine spark"
        ),
    )
    CleanJob.add_flags(p)
    p.add_argument(
        "--estimate",
        action="store_true",
        help="do not clean: run the plan on a sample of the inputs and write only "
        "OUTPUT/estimate.json (CPU per stage, shuffle bytes, memory, CPU-hours, cost)",
    )
    p.add_argument(
        "--estimate-mb", type=float, default=16.0, help="--estimate: compressed MB sampled"
    )
    p.add_argument(
        "--price-per-vcpu-hour", type=float, default=0.04, help="--estimate: USD per vCPU-hour"
    )
    return p


def job_from_args(args: argparse.Namespace, extra: list[str]) -> CleanJob:
    """The typed job (validated: a bad value is a ConfigError here, before any work)."""
    return CleanJob.from_args(args, passthrough=tuple(extra))


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.clean.command import run as run_clean

    job = job_from_args(args, extra)
    if getattr(args, "estimate", False):
        from c4forge.clean.estimate import run_estimate

        return run_estimate(job, args.estimate_mb, args.price_per_vcpu_hour)
    run_clean(job)
    return 0
