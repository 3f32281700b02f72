"""``c4forge evaluate FT --task TASK --data DIR [--split dev]``: score a fine-tuned model on a split
and write its results.json and predictions.jsonl (into ``FT/eval-TASK-SPLIT`` unless ``-o``)."""

from __future__ import annotations

import argparse
import sys

from c4forge.finetune.cli_finetune import TASK_HELP, add_custom_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="score a fine-tuned model (metrics + predictions.jsonl)",
        description=__doc__,
    )
    p.add_argument("ft", help="a `c4forge finetune` output folder")
    p.add_argument("--task", required=True, help=TASK_HELP)
    p.add_argument("--data", required=True, help="GLUE folder, or the custom file to score")
    p.add_argument("--split", help="split file name (default: the task's dev split(s))")
    p.add_argument("--head", choices=("text", "cls", "hire"), help="must match the run's head")
    p.add_argument("--output", "-o", help="where results go (default FT/eval-TASK-SPLIT)")
    p.add_argument(
        "--exclude",
        metavar="REPORT",
        help="a `c4forge contamination` report: also score the subset without its contaminated "
        "examples",
    )
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "xla"))
    p.add_argument("--no-progress", dest="progress", action="store_false")
    add_custom_args(p)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.finetune.clean_subset import summary_lines
    from c4forge.finetune.evaluate_run import evaluate_run
    from c4forge.finetune.outputs import summary_text

    res, out = evaluate_run(args)
    text = summary_text(res, out, command="evaluate")
    if "clean_subset" in res:
        text += "\n" + "\n".join(summary_lines(res["clean_subset"]))
    print(text, file=sys.stdout)
    return 0
