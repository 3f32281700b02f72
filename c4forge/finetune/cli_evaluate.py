"""`c4forge evaluate FT --task TASK --data DIR [--split dev]`: score a fine-tuned model on a split
and write its results.json and predictions.jsonl (into `FT/eval-TASK-SPLIT` unless `-o`)."""

from __future__ import annotations

import argparse
import sys

from c4forge.finetune.options import EvaluateOptions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score a fine-tuned model (metrics + predictions.jsonl)",
        description=__doc__,
    )
    EvaluateOptions.add_flags(p)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.finetune.command import run as run_evaluate

    print(run_evaluate(EvaluateOptions.from_args(args)).text(), file=sys.stdout)
    return 0
