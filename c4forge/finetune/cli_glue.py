"""`c4forge glue CHECKPOINT --data DIR -o DIR`: fine-tune every task × head × seed (and, with
`--also-random-init`, the same from a random start), then write glue.json, glue.md, glue.png and
the HIRE contribution-score heat map."""

from __future__ import annotations

import argparse
import sys

from c4forge.finetune.options import GlueOptions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "glue",
        help="fine-tune and score every GLUE task; table, plots, pretrained vs random init",
        description=__doc__,
    )
    GlueOptions.add_flags(p)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.finetune.command import run as run_glue

    print(run_glue(GlueOptions.from_args(args)).text(), file=sys.stdout)
    return 0
