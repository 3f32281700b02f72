"""``c4forge train SHARDS --preset NAME --steps N --output RUN …`` (argparse only; torch is
imported in ``run``, so ``c4forge --help`` stays instant).

Multi-GPU: ``torchrun --standalone --nproc_per_node=8 -m c4forge train …`` (model.md §5).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


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
    p.add_argument("shards", help="shard directory (with index.json)")
    p.add_argument(
        "--output", "-o", required=True, help="run directory (checkpoints, metrics, curve)"
    )
    p.add_argument("--steps", type=_positive, required=True, help="total optimizer steps")
    m = p.add_argument_group("model")
    m.add_argument(
        "--preset",
        help="t5: tiny, small, base; bert: bert-tiny, bert-mini, bert-small, bert-medium, "
        "bert-base (required for a new run)",
    )
    m.add_argument(
        "--ffn",
        help="relu gelu swish glu bilinear reglu geglu swiglu (default t5 geglu, bert gelu)",
    )
    m.add_argument("--d-ff", type=_positive, help="FFN width, used as given (no 2/3 rule)")
    m.add_argument("--tie-embeddings", action="store_true", default=None, help="T5 1.0 tied head")
    m.add_argument(
        "--attn", choices=("sdpa", "eager", "flex"), help="attention path (default sdpa)"
    )
    m.add_argument("--dropout", type=float, help="dropout rate (default t5 0.0, bert 0.1 as BERT)")
    m.add_argument(
        "--vocab",
        help="vocabulary directory the shards must match (default SHARDS/vocab); the run keeps "
        "a copy in RUN/vocab",
    )
    o = p.add_argument_group("optimisation")
    o.add_argument("--batch-size", type=_positive, help="global rows per step (default 128)")
    o.add_argument("--grad-accum", type=_positive, help="micro-steps per step (default 1)")
    o.add_argument(
        "--optimizer",
        choices=("adafactor", "adamwscale", "adamw"),
        help="default adafactor (t5), adamw (bert: wd 0.01 off biases/LayerNorm, eps 1e-6)",
    )
    o.add_argument(
        "--schedule",
        choices=("isr", "isr_decay", "cosine", "constant", "linear"),
        help="default isr_decay (adafactor) / cosine (adamwscale) / linear (adamw)",
    )
    o.add_argument(
        "--lr", type=float, help="peak LR (adamwscale 2e-2, adamw 1e-4) or Adafactor's cap (1e-2)"
    )
    o.add_argument(
        "--warmup",
        type=_non_negative,
        help="warm-up steps (default 10000; linear schedule: 10 %% of --steps)",
    )
    o.add_argument("--grad-clip", type=float, help="global norm clip (0 = off; adamwscale 1.0)")
    o.add_argument("--z-loss", type=float, help="t5x z-loss coefficient (default 0; t5x 1e-4)")
    o.add_argument("--seed", type=_non_negative, help="model init and data order seed (default 0)")
    o.add_argument(
        "--shuffle-batches",
        dest="shuffle_window",
        type=_non_negative,
        help="shuffle rows within windows of K global batches (default 0: shard order)",
    )
    r = p.add_argument_group("run")
    r.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda", "xla"))
    r.add_argument(
        "--resume",
        nargs="?",
        const="auto",
        default=None,
        metavar="CKPT",
        help="continue from RUN/checkpoints/latest (or the checkpoint directory given)",
    )
    r.add_argument(
        "--eval-every", type=_non_negative, default=0, help="held-out eval period (and at the end)"
    )
    r.add_argument(
        "--eval-rows", type=_non_negative, help="validation rows to evaluate (default all)"
    )
    r.add_argument(
        "--save-every", type=_non_negative, default=0, help="checkpoint period (and at the end)"
    )
    r.add_argument("--keep-checkpoints", type=_positive, default=3)
    r.add_argument("--log-every", type=_positive, default=10)
    r.add_argument("--no-compile", dest="compile", action="store_false", default=None)
    r.add_argument(
        "--compile", dest="compile", action="store_true", help="torch.compile off CUDA too"
    )
    r.add_argument("--verify-shards", choices=("quick", "full"), default="quick")
    r.add_argument(
        "--num-workers",
        type=_non_negative,
        help="DataLoader workers (default 2 on GPU/TPU, 0 on CPU)",
    )
    r.add_argument(
        "--deterministic", action="store_true", help="torch.use_deterministic_algorithms"
    )
    r.add_argument("--no-progress", dest="progress", action="store_false")
    r.add_argument(
        "--stop-after-step",
        type=_positive,
        help="stop after this step with a checkpoint, keeping the --steps schedule (resume later)",
    )


# Entries of the parsed namespace that are not TrainOptions fields, each consumed explicitly:
# "command" is cli.main's dispatch key. Every other flag must be a field.
CONSUMED: frozenset[str] = frozenset({"command"})


def options_from_args(args: argparse.Namespace) -> Any:
    """The ``TrainOptions`` of the parsed flags. A flag with no field (and not in ``CONSUMED``)
    is an error at start-up, never silently dropped."""
    from c4forge.trainers.train import TrainOptions

    values = vars(args)
    fields = {f.name for f in dataclasses.fields(TrainOptions)}
    stray = sorted(set(values) - fields - CONSUMED)
    if stray:
        raise TypeError(
            f"c4forge train: flag(s) {', '.join(stray)} have no TrainOptions field; add the "
            "field or consume the flag in cli_train.py"
        )
    return TrainOptions(**{k: v for k, v in values.items() if k in fields})


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.trainers.train import train

    opts = options_from_args(args)
    summary = train(opts)
    if summary is not None:
        import os

        if int(os.environ.get("RANK", "0")) == 0:
            print(summary.text(), file=sys.stdout)
    return 0
