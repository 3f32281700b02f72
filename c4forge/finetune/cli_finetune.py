"""``c4forge finetune CHECKPOINT --task TASK --data DIR -o FT`` (argparse only; torch is imported
in ``run`` so ``c4forge --help`` stays instant)."""

from __future__ import annotations

import argparse
import sys

from c4forge.finetune import recipe as recipes  # no torch at import
from c4forge.trainers.cli_train import _positive as positive  # argparse only, no torch

TASK_HELP = "cola sst2 mrpc stsb qqp mnli qnli rte wnli, or custom"




def add_training_args(p: argparse.ArgumentParser) -> None:
    """Options shared by `finetune` and `glue` (the fine-tuning budget and recipe)."""
    t = p.add_argument_group("fine-tuning")
    t.add_argument("--epochs", type=float, help="passes over the training rows (default 3)")
    t.add_argument("--steps", type=positive, help="optimizer steps (instead of --epochs)")
    t.add_argument(
        "--lr", type=float, help=f"learning rate (text: 1e-3 constant; {recipes.LR_HELP})"
    )
    t.add_argument("--batch-size", type=positive, default=32, help="rows per step (default 32)")
    t.add_argument(
        "--max-length", type=positive, default=128, help="input tokens (default 128; capped "
        "at the model's positions, longer inputs are cut and counted)",
    )  # fmt: skip
    t.add_argument(
        "--max-train-examples", type=positive,
        help="train on a fixed random subset of this many rows (the same for every seed)",
    )  # fmt: skip
    t.add_argument("--vocab", help="vocabulary folder, when the checkpoint does not record one")
    r = p.add_argument_group("run")
    r.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "xla"))
    r.add_argument("--no-compile", dest="compile", action="store_false", default=None)
    r.add_argument("--compile", dest="compile", action="store_true", help="torch.compile off CUDA")
    r.add_argument("--log-every", type=positive, default=10)
    r.add_argument("--no-progress", dest="progress", action="store_false")


def add_custom_args(p: argparse.ArgumentParser) -> None:
    c = p.add_argument_group("--task custom (your own .tsv/.csv/.jsonl)")
    c.add_argument("--text-field", help="column/field with the text")
    c.add_argument("--text-pair-field", help="column/field with the second text of a pair")
    c.add_argument("--label-field", help="column/field with the label")
    c.add_argument("--regression", action="store_true", help="the label is a number")
    c.add_argument("--eval-data", help="evaluation file (default: dev.EXT beside --data)")


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
    p.add_argument("checkpoint", help="a c4forge train run or one of its checkpoints/step-N")
    p.add_argument("--task", required=True, help=TASK_HELP)
    p.add_argument("--data", required=True, help="GLUE folder (SST-2/train.tsv …) or custom file")
    p.add_argument("--output", "-o", required=True, help="fine-tuning output folder")
    p.add_argument("--head", choices=("text", "cls", "hire"), help="default: text (T5), cls (BERT)")
    p.add_argument("--seed", type=int, default=0, help="head init, dropout and data order")
    p.add_argument("--random-init", action="store_true", help="same shape, random weights")
    p.add_argument("--resume", action="store_true", help="continue from FT/checkpoints/latest")
    p.add_argument("--overwrite", action="store_true", help="replace a finished run in -o")
    p.add_argument("--save-every", type=int, default=0, help="checkpoint period (and at the end)")
    p.add_argument("--eval-every", type=int, default=0, help="dev evaluation period")
    p.add_argument("--stop-after-step", type=positive, help=argparse.SUPPRESS)
    add_training_args(p)
    add_custom_args(p)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.finetune.loop import FinetuneOptions, finetune
    from c4forge.finetune.outputs import summary_text

    fields = FinetuneOptions.__dataclass_fields__
    opts = FinetuneOptions(**{k: v for k, v in vars(args).items() if k in fields})
    res = finetune(opts)
    if "stopped_at" in res:
        print(f"c4forge finetune: stopped after step {res['stopped_at']} (resume with --resume)")
        return 0
    print(summary_text(res, opts.output), file=sys.stdout)
    return 0
