"""``c4forge glue CHECKPOINT --data DIR -o DIR``: fine-tune every task × head × seed (and, with
``--also-random-init``, the same from a random start), then write glue.json, glue.md, glue.png and
the HIRE contribution-score heat map."""

from __future__ import annotations

import argparse
import sys

from c4forge.finetune.cli_finetune import add_training_args, positive


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "glue",
        help="fine-tune and score every GLUE task; table, plots, pretrained vs random init",
        description=__doc__,
    )
    p.add_argument("checkpoint", help="a c4forge train run or one of its checkpoints/step-N")
    p.add_argument("--data", required=True, help="GLUE folder (CoLA/, SST-2/, …)")
    p.add_argument("--output", "-o", required=True, help="output folder")
    p.add_argument(
        "--tasks", default="cola,sst2,mrpc,stsb,qqp,mnli,qnli,rte,wnli",
        help="comma-separated tasks (default all nine)",
    )  # fmt: skip
    p.add_argument(
        "--head", help="comma-separated heads: text,cls,hire (default text for T5, cls for BERT)"
    )
    p.add_argument("--seeds", type=positive, default=3, help="seeds per task (default 3)")
    p.add_argument("--also-random-init", action="store_true", help="the same from random weights")
    p.add_argument(
        "--exclude",
        metavar="REPORT",
        help="a `c4forge contamination` report: also score every task without its contaminated "
        "dev examples (a second table)",
    )
    add_training_args(p)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.finetune.glue import GlueOptions, run_glue

    fields = GlueOptions.__dataclass_fields__
    values = {k: v for k, v in vars(args).items() if k in fields}
    values["tasks"] = [t for t in args.tasks.split(",") if t]
    values["heads"] = [h for h in args.head.split(",") if h] if args.head else None
    summary = run_glue(GlueOptions(**values))
    print(summary, file=sys.stdout)
    return 0
