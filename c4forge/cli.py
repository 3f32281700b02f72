"""The `c4forge` command: one entry point, one subcommand per stage.

Each subcommand lives in its own module, which exposes ``register(subparsers)`` (argparse only,
no heavy imports, so `--help` is instant) and ``run(args, extra) -> int``. ``extra`` holds the
arguments argparse did not recognise; for the commands that run Beam/Spark jobs they are engine
options, checked here against the engine's own option set (``c4forge.engines.passthrough``: Beam's
``PipelineOptions`` for the runner, ``--conf spark.*`` for ``--engine spark``) before any work,
then passed on unchanged; every other command rejects them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Iterator

from c4forge import __version__
from c4forge.errors import C4ForgeError

# subcommand -> module; order is the order of `c4forge --help`.
COMMANDS: dict[str, str] = {
    "demo": "c4forge.demo",
    "clean": "c4forge.clean.cli",
    "vocab": "c4forge.vocab.cli",
    "shards": "c4forge.shards.cli",
    "train": "c4forge.trainers.cli_train",
    "export": "c4forge.trainers.cli_export",
    "finetune": "c4forge.finetune.cli_finetune",
    "evaluate": "c4forge.finetune.cli_evaluate",
    "glue": "c4forge.finetune.cli_glue",
    "contamination": "c4forge.contamination.cli",
    "report": "c4forge.report.cli",
    "experiment": "c4forge.experiments.cli",
}

# Commands whose unknown arguments are Beam/Spark pipeline options.
PASSTHROUGH = {"clean", "shards"}


def build_parser() -> argparse.ArgumentParser:
    from c4forge.cliconfig import HelpFormatter, with_shown_defaults

    parser = argparse.ArgumentParser(
        prog="c4forge",
        description="Common Crawl WET → C4 documents → SentencePiece → Arrow shards → GLU-Transformer.",
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"c4forge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS.values():
        importlib.import_module(module).register(sub)
    for command in COMMANDS:
        with_shown_defaults(_subparser(parser, command))
    return parser


def _subparser(parser: argparse.ArgumentParser, command: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # noqa: SLF001
    return action.choices[command]


def parser_tree(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """Every parser of the command line: the top one, each command's, and the forms a command
    parses itself (``nested_parsers``: `shards verify`, `shards task`)."""
    yield parser
    for command, module in COMMANDS.items():
        sub = _subparser(parser, command)
        yield sub
        nested = getattr(importlib.import_module(module), "nested_parsers", None)
        if nested is not None:
            yield from nested(sub).values()


def _parse(
    parser: argparse.ArgumentParser, argv: list[str]
) -> tuple[argparse.Namespace, list[str]]:
    """argparse's parse, or a command's own for a nested form (``parse_nested``: `shards task
    NAME …`, with its own --help and usage errors; unknown options are errors there)."""
    if argv and argv[0] in COMMANDS:
        nested = getattr(importlib.import_module(COMMANDS[argv[0]]), "parse_nested", None)
        args = None if nested is None else nested(_subparser(parser, argv[0]), argv[1:])
        if args is not None:
            args.command = argv[0]
            return args, []
    return parser.parse_known_args(argv)


def passive_openmp_waits() -> None:
    """Let torch's OpenMP threads sleep, not spin, between parallel regions (unless the user
    set ``OMP_WAIT_POLICY``).

    With libgomp's default (spin ~300k iterations before sleeping) a thread that waits for a
    core someone else holds burns that core's time, so on a loaded machine every step waits for
    the busiest thread: a 20-step ``tiny`` run on the shared 2-core machine at load ~10 trained
    945 tokens/s with 2 threads and 7,634 with 1; with passive waits 9,889 and 9,481
    (benchmarks/RESULTS.md). The wait policy changes no arithmetic, so the bytes a run writes
    are the same. libgomp reads it once, when torch loads it: this runs before any import of
    torch, and torchrun's ranks, DataLoader and Spark/Beam workers inherit it.
    """
    import os

    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def main(argv: list[str] | None = None) -> int:
    passive_openmp_waits()
    from c4forge.engines.beam_options import quiet_beam_logging

    # Any subcommand may import Beam (storage, clean, shards, export of a remote run): its
    # import-time "apitools not found" line is noise, not the user's problem.
    quiet_beam_logging()
    parser = build_parser()
    args, extra = _parse(parser, list(sys.argv[1:] if argv is None else argv))
    if extra and args.command not in PASSTHROUGH:
        parser.error(f"unrecognized arguments for '{args.command}': {' '.join(extra)}")
    module = importlib.import_module(COMMANDS[args.command])
    try:
        from c4forge.progress import line_every_seconds

        line_every_seconds()  # a bad C4FORGE_PROGRESS_SECONDS stops any command before work
        from c4forge import optional

        optional.check(args)  # an extra the command needs, before any work
        if extra:
            from c4forge.engines import passthrough

            own = passthrough.own_options(_subparser(parser, args.command))
            engine = getattr(args, "engine", "beam")
            passthrough.check(engine, getattr(args, "runner", None), extra, own)
        return int(module.run(args, extra) or 0)
    except C4ForgeError as err:
        print(f"c4forge {args.command}: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"c4forge {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - only the machine's ordinary faults are caught
        from c4forge.errors import environment_fault

        message = environment_fault(err, getattr(args, "output", None))
        if message is None:
            raise
        print(f"c4forge {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
