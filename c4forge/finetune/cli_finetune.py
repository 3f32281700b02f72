"""``c4forge finetune CHECKPOINT --task TASK --data DIR -o FT`` (argparse only; torch is imported
in ``run`` so ``c4forge --help`` stays instant)."""

from __future__ import annotations

import argparse
import sys

from c4forge.finetune.options import FinetuneOptions


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "finetune",
        help="fine-tune a checkpoint on a GLUE task or your own data (text, cls or hire head)",
        description=(
            "Fine-tune a c4forge checkpoint: --head text (T5 text-to-text), cls (BERT's pooled "
            "[CLS]; mean-pooled on a T5 encoder) or hire (every layer fused; HIRE). Writes "
            "results.json, predictions.jsonl, metrics.jsonl, loss_curve.png and checkpoints."
        ),
    )
    FinetuneOptions.add_flags(p)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.finetune.command import run as run_finetune

    print(run_finetune(FinetuneOptions.from_args(args)).text(), file=sys.stdout)
    return 0
