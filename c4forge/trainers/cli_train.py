"""``c4forge train SHARDS --preset NAME --steps N --output RUN …`` (argparse only; torch is
imported in ``run``, so ``c4forge --help`` stays instant).

Multi-GPU: ``torchrun --standalone --nproc_per_node=8 -m c4forge train …`` (model.md §5).
"""

from __future__ import annotations

import argparse
import sys

from c4forge.cliconfig import non_negative, positive
from c4forge.trainers.options import TrainOptions

# argparse types (kept under their old names: `finetune` imports them from here)
_positive = positive
_non_negative = non_negative


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train the GLU-Transformer or a BERT encoder on Arrow shards (CPU, CUDA, DDP, TPU)",
        description=(
            "Train a T5.1.1-style encoder-decoder (span-corruption and other T5 objectives) or a "
            "BERT encoder (bert_mlm_nsp shards) with any GLU-paper FFN on c4forge shards; the "
            "shards' objective picks the family. Options left out when resuming are taken from "
            "the checkpoint."
        ),
    )
    TrainOptions.add_flags(p)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    import os

    from c4forge.trainers.command import run as run_train

    result = run_train(TrainOptions.from_args(args))
    if int(os.environ.get("RANK", "0")) == 0:
        print(result.text(), file=sys.stdout)
    return 0
