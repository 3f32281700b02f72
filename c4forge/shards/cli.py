"""`c4forge shards`: clean documents → tokenized, corrupted, packed Arrow shards, on any engine
(``--engine auto|local|spark|beam``, the same policy as `clean`).

Three forms share one subparser, told apart by the first positional argument:

    c4forge shards DOCS --vocab VOCAB --output DIR [options] [Beam options]
    c4forge shards verify DIR [--vocab VOCAB_DIR]
    c4forge shards task NAME --vocab VOCAB --output DIR [--data …]   (c4forge.shards.tasks)

(a documents folder named ``verify`` or ``task`` is reachable as ``./verify``). The objective
choices and objective-only flags come from the objective registry (pure numpy, no Beam); the
driver is imported lazily in ``run`` so `--help` stays quick. ``job_from_args`` is the one place an
argparse namespace becomes the typed ``ShardsJob`` (``c4forge.cliconfig``). Unrecognised
arguments are engine options (``c4forge.passthrough``: Beam's ``PipelineOptions``, or ``--conf``
with ``--engine spark``).
"""

from __future__ import annotations

import argparse

from c4forge.shards.job import ShardsJob


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "shards",
        help="clean documents → span-corrupted Arrow shards (local, Spark or Beam); "
        "`shards verify DIR`",
        description=(
            "Tokenize clean documents (c4forge clean output or AllenAI C4 files), apply a "
            "pretraining objective (T5 span corruption by default), pack, and write Arrow IPC "
            "stream shards plus index.json (formats.md §3). `c4forge shards verify DIR "
            "[--vocab VOCAB]` checks a finished shard set: manifest, vocabulary, schemas, row "
            "counts and every file's sha256. Unknown options are passed to the engine unchanged "
            "(Beam pipeline options, or --conf spark.KEY=V with --engine spark)."
        ),
    )
    p.add_argument(
        "target",
        nargs="+",
        metavar="DOCS | verify DIR | task NAME",
        help="the clean documents folder, `verify` followed by a shard folder, or `task` and a "
        "GLUE task name (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli) or custom",
    )
    from c4forge.shards.tasks import task_flags

    ShardsJob.add_flags(p, cli_only=("target",), insert_after={"quiet": task_flags()})
    return p


def job_from_args(args: argparse.Namespace, extra: list[str]) -> ShardsJob:
    """The typed job of `c4forge shards DOCS …` (validated here, before any work)."""
    from c4forge.errors import ConfigError

    if len(args.target) != 1:
        raise ConfigError(
            f"expected one documents folder, got {len(args.target)}: {' '.join(args.target)}"
        )
    return ShardsJob.from_args(args, docs=args.target[0], passthrough=tuple(extra))


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.errors import ConfigError

    if args.target[0] == "task":
        from c4forge.shards.tasks import task_command

        return task_command(args, extra)
    if args.target[0] == "verify":
        if len(args.target) != 2:
            raise ConfigError("usage: c4forge shards verify DIR [--vocab VOCAB_DIR]")
        if extra:
            raise ConfigError(f"unrecognized arguments for 'shards verify': {' '.join(extra)}")
        from c4forge.shards.verify import verify_command

        return verify_command(
            args.target[1], args.vocab, quiet=args.quiet, extra_ids=args.extra_ids
        )
    from c4forge.shards.driver import run_job

    run_job(job_from_args(args, extra))
    return 0
