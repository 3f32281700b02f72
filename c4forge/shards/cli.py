"""`c4forge shards`: clean documents → tokenized, corrupted, packed Arrow shards, on any engine
(``--engine auto|local|spark|beam``, the same policy as `clean`).

Three forms, told apart by the word after `shards`:

    c4forge shards DOCS --vocab VOCAB --output DIR [options] [Beam options]
    c4forge shards verify DIR [--vocab VOCAB_DIR]
    c4forge shards task NAME --vocab VOCAB --output DIR [--data …]   (c4forge.shards.tasks)

``verify`` and ``task`` have parsers of their own (``nested_parsers``: their own ``--help``),
chosen by ``c4forge.cli`` when the form's word follows ``shards``; a documents folder named
``verify`` or ``task`` is reachable as ``./verify``. The objective
choices and objective-only flags come from the objective registry (pure numpy, no Beam); the
driver is imported lazily in ``run`` so `--help` stays quick. ``job_from_args`` is the one place an
argparse namespace becomes the typed ``ShardsJob`` (``c4forge.cliconfig``). Unrecognised
arguments are engine options (``c4forge.engines.passthrough``: Beam's ``PipelineOptions``, or ``--conf``
with ``--engine spark``).
"""

from __future__ import annotations

import argparse
from typing import Any

from c4forge.shards.job import ShardsJob

USAGE = """c4forge shards DOCS --vocab VOCAB --output DIR [options] [engine options]
       c4forge shards verify DIR [--vocab VOCAB]        (`c4forge shards verify --help`)
       c4forge shards task NAME --vocab VOCAB --output DIR [options]   (`shards task --help`)"""
NESTED = ("verify", "task")  # the forms with a parser of their own


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "shards",
        usage=USAGE,
        help="clean documents → span-corrupted Arrow shards (local, Spark or Beam); "
        "`shards verify DIR`; `shards task NAME` (a GLUE or custom task as shards)",
        description=(
            "Tokenize clean documents (c4forge clean output or AllenAI C4 files), apply a "
            "pretraining objective (T5 span corruption by default), pack, and write Arrow IPC "
            "stream shards plus index.json (formats.md §3). `c4forge shards verify DIR "
            "[--vocab VOCAB]` checks a finished shard set: manifest, vocabulary, schemas, row "
            "counts and every file's sha256. `c4forge shards task NAME` writes a GLUE or custom "
            "task as text-to-text shards. Unknown options are passed to the engine unchanged "
            "(Beam pipeline options, or --conf spark.KEY=V with --engine spark)."
        ),
    )
    p.add_argument(
        "target",
        nargs="+",
        metavar="DOCS",
        help="the clean documents folder (a folder named `verify` or `task`: write ./verify)",
    )
    from c4forge.shards.tasks import task_flags

    ShardsJob.add_flags(p, cli_only=("target",), insert_after={"quiet": task_flags()})
    return p


def nested_parsers(parent: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """`shards verify` and `shards task`, each with its own usage, help and options: a subset
    of `shards`' (same flags, same dests and defaults), so ``run`` reads either namespace."""
    from c4forge.cliconfig import Flag, field_flags
    from c4forge.shards.tasks import task_flags

    def parser(form: str, description: str, positional: Flag, flags: list[Flag]) -> Any:
        q = argparse.ArgumentParser(
            prog=f"{parent.prog} {form}",
            description=description,
            formatter_class=parent.formatter_class,
        )
        for fl in (positional, *flags):
            q.add_argument(*fl.names, **fl.kwargs)
        return q

    def own(*names: str, **helps: str) -> list[Flag]:
        return [
            fl
            for n in names
            for fl in field_flags(ShardsJob, n, **({"help": helps[n]} if n in helps else {}))
        ]

    verify = parser(
        "verify",
        "Check a finished shard set: its manifest (index.json), vocabulary, schemas, row counts "
        "and every file's sha256; then print its summary.",
        Flag(("target",), {"nargs": 1, "metavar": "DIR", "help": "the shard folder"}),
        own(
            "vocab",
            "extra_ids",
            "quiet",
            vocab="compare the set's vocabulary with this one "
            "(a `c4forge vocab` folder or a .model); not given: not compared",
            quiet="no progress bar, no summary",
        ),
    )
    task = parser(
        "task",
        "Write a supervised task as text-to-text training shards (T5 §3.5): each example is "
        "an input with the task's prefix and a target label word, short pairs packed several "
        "to a row with segment ids. GLUE tasks read a GLUE-layout folder; `custom` reads your "
        ".tsv/.csv/.jsonl. The set mixes with C4 shards in `c4forge train --mix`.",
        Flag(
            ("target",),
            {
                "nargs": 1,
                "metavar": "NAME",
                "help": "GLUE task (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli) or custom",
            },
        ),
        own(
            "vocab",
            "extra_ids",
            "output",
            "inputs_length",
            "targets_length",
            "pack_window",
            "num_shards",
            "seed",
            "batch_rows",
            "token_dtype",
            "overwrite",
            "quiet",
            inputs_length="encoder row length; a longer input loses its tail, counted and "
            "warned about (default 512)",
            targets_length="decoder row length (default 114)",
            pack_window="examples per first-fit packing window",
            num_shards="N (train), or train=N,validation=M; default auto = 1 per split",
        )
        + task_flags(),
    )
    return {"verify": verify, "task": task}


def parse_nested(parent: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | None:
    """The namespace of `shards verify …` / `shards task …` (None for `shards DOCS …`): parsed
    by the form's own parser over `shards`' defaults, ``target`` = [form, DIR or NAME]."""
    if not argv or argv[0] not in NESTED:
        return None
    base = argparse.Namespace(
        **{a.dest: a.default for a in parent._actions if a.dest not in ("help", argparse.SUPPRESS)}  # noqa: SLF001
    )
    args = nested_parsers(parent)[argv[0]].parse_args(argv[1:], namespace=base)
    args.target = [argv[0], *args.target]
    return args


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
    from c4forge.shards.command import run as run_shards

    run_shards(job_from_args(args, extra))
    return 0
