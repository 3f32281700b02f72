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
    from c4forge.finetune.clean_subset import summary_lines
    from c4forge.finetune.evaluate_run import evaluate_run
    from c4forge.finetune.outputs import summary_text

    res, out = evaluate_run(EvaluateOptions.from_args(args))
    text = summary_text(res, out, command="evaluate")
    if "clean_subset" in res:
        text += "\n" + "\n".join(summary_lines(res["clean_subset"]))
    print(text, file=sys.stdout)
    return 0
