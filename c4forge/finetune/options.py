"""The typed requests of ``c4forge finetune``, ``glue`` and ``evaluate``, with their flags.

Torch-free (``c4forge --help`` imports it). Each dataclass lists its fields in its ``--help``
order (``c4forge.cliconfig``); the fine-tuning budget and the custom-data columns are shared
field factories, so ``finetune``/``glue`` and ``finetune``/``evaluate`` declare them once.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from c4forge.cliconfig import CliConfig, flag, option, positive
from c4forge.finetune.head_registry import HEADS
from c4forge.finetune.recipe import LR_HELP  # torch-free at import
from c4forge.trainers.options import DEVICES

DEFAULT_EPOCHS = 3  # BERT's recipe
DEFAULT_BATCH = 32
DEFAULT_MAX_LENGTH = 128
TASK_HELP = "cola sst2 mrpc stsb qqp mnli qnli rte wnli, or custom"
GLUE_TASKS = ("cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli")
_FT, _RUN = "fine-tuning", "run"
_CUSTOM = "--task custom (your own .tsv/.csv/.jsonl)"


def _comma_list(value: Any) -> list[str]:
    """``"a,b"`` → ``["a", "b"]`` (a list passes through)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    return [v for v in items if v]


# -- the fine-tuning budget and recipe (finetune, glue) ---------------------------------------
def _epochs() -> Any:
    return option(
        "--epochs",
        default=None,
        group=_FT,
        type=float,
        help="passes over the training rows (default 3)",
    )


def _steps() -> Any:
    return option(
        "--steps",
        default=None,
        group=_FT,
        type=positive,
        help="optimizer steps (instead of --epochs)",
    )


def _lr() -> Any:
    return option(
        "--lr",
        default=None,
        group=_FT,
        type=float,
        help=f"learning rate (text: 1e-3 constant; {LR_HELP})",
    )


def _batch_size() -> Any:
    return option(
        "--batch-size",
        default=DEFAULT_BATCH,
        group=_FT,
        type=positive,
        help="rows per step (default 32)",
    )


def _max_length() -> Any:
    return option(
        "--max-length",
        default=DEFAULT_MAX_LENGTH,
        group=_FT,
        type=positive,
        help="input tokens (default 128; capped at the model's positions, longer inputs are cut "
        "and counted)",
    )


def _max_train_examples() -> Any:
    return option(
        "--max-train-examples",
        default=None,
        group=_FT,
        type=positive,
        help="train on a fixed random subset of this many rows (the same for every seed)",
    )


def _vocab() -> Any:
    return option(
        "--vocab",
        default=None,
        group=_FT,
        help="vocabulary folder, when the checkpoint does not record one",
    )


def _device(group: str | None = _RUN) -> Any:
    return option(
        "--device",
        default="auto",
        group=group,
        choices=DEVICES,
        help="auto: a CUDA GPU, else a TPU (torch_xla), else the CPU",
    )


def _compile() -> Any:
    return option(
        default=None,  # None: on for CUDA
        group=_RUN,
        flags=(
            flag("--no-compile", action="store_false", help="no torch.compile (on CUDA too)"),
            flag("--compile", action="store_true", help="torch.compile off CUDA"),
        ),
    )


def _threads() -> Any:
    return option(
        "--threads",
        default=None,
        group=_RUN,
        type=positive,
        help="torch CPU threads (default: the CPUs this process may use, from its affinity and "
        "cgroup quota, shared by the ranks; OMP_NUM_THREADS if set)",
    )


def _log_every() -> Any:
    return option(
        "--log-every",
        default=10,
        group=_RUN,
        type=positive,
        help="steps per metrics.jsonl line and progress update",
    )


def _progress(group: str | None = _RUN) -> Any:
    return option(
        "--no-progress",
        default=True,
        group=group,
        action="store_false",
        help="no progress bar or periodic progress lines",
    )


# -- the columns of --task custom (finetune, evaluate) ----------------------------------------
def _text_field() -> Any:
    return option("--text-field", default=None, group=_CUSTOM, help="column/field with the text")


def _text_pair_field() -> Any:
    return option(
        "--text-pair-field",
        default=None,
        group=_CUSTOM,
        help="column/field with the second text of a pair",
    )


def _label_field() -> Any:
    return option("--label-field", default=None, group=_CUSTOM, help="column/field with the label")


def _regression() -> Any:
    return option(
        "--regression",
        default=False,
        group=_CUSTOM,
        action="store_true",
        help="the label is a number",
    )


def _eval_data() -> Any:
    return option(
        "--eval-data",
        default=None,
        group=_CUSTOM,
        help="evaluation file (default: dev.EXT beside --data)",
    )


@dataclass(frozen=True, kw_only=True)
class FinetuneOptions(CliConfig):
    """One fine-tuning run (``c4forge finetune``); None = the head's / the recipe's default."""

    checkpoint: str = option(
        "checkpoint", help="a c4forge train run or one of its checkpoints/step-N"
    )
    task: str = option("--task", required=True, help=TASK_HELP)
    data: str = option(
        "--data", required=True, help="GLUE folder (SST-2/train.tsv …) or custom file"
    )
    output: str = option("--output", "-o", required=True, help="fine-tuning output folder")
    head: str | None = option(
        "--head",
        default=None,
        choices=tuple(HEADS),
        help="default: text (T5), cls (BERT)",
    )
    seed: int = option("--seed", default=0, type=int, help="head init, dropout and data order")
    random_init: bool = option(
        "--random-init", default=False, action="store_true", help="same shape, random weights"
    )
    resume: bool = option(
        "--resume", default=False, action="store_true", help="continue from FT/checkpoints/latest"
    )
    overwrite: bool = option(
        "--overwrite", default=False, action="store_true", help="replace a finished run in -o"
    )
    save_every: int = option(
        "--save-every", default=0, type=int, help="checkpoint period (and at the end)"
    )
    eval_every: int = option("--eval-every", default=0, type=int, help="dev evaluation period")
    # stop early with a checkpoint (resume later); a test switch, hidden from --help
    stop_after_step: int | None = option(
        "--stop-after-step", default=None, type=positive, help=argparse.SUPPRESS
    )
    epochs: float | None = _epochs()
    steps: int | None = _steps()
    lr: float | None = _lr()
    batch_size: int = _batch_size()
    max_length: int = _max_length()
    max_train_examples: int | None = _max_train_examples()
    vocab: str | None = _vocab()
    device: str = _device()
    compile: bool | None = _compile()
    threads: int | None = _threads()
    log_every: int = _log_every()
    progress: bool = _progress()
    text_field: str | None = _text_field()
    text_pair_field: str | None = _text_pair_field()
    label_field: str | None = _label_field()
    regression: bool = _regression()
    eval_data: str | None = _eval_data()
    keep_checkpoints: int = 1  # not a flag
    extra: dict[str, Any] = field(default_factory=dict)  # not a flag

    def custom(self) -> Any:
        """The custom task's columns (``tasks.CustomFields``), None for a GLUE task."""
        if self.task != "custom":
            return None
        from c4forge.glue.tasks import CustomFields

        return CustomFields(
            self.text_field or "", self.label_field or "", self.text_pair_field, self.regression
        )


@dataclass(frozen=True, kw_only=True)
class GlueOptions(CliConfig):
    """Every task × head × seed (``c4forge glue``)."""

    checkpoint: str = option(
        "checkpoint", help="a c4forge train run or one of its checkpoints/step-N"
    )
    data: str = option("--data", required=True, help="GLUE folder (CoLA/, SST-2/, …)")
    output: str = option("--output", "-o", required=True, help="output folder")
    tasks: list[str] = option(
        "--tasks",
        default_factory=lambda: list(GLUE_TASKS),
        convert=_comma_list,
        help="comma-separated tasks (default all nine)",
    )
    heads: list[str] | None = option(
        "--head",
        default=None,
        metavar="HEAD",
        convert=_comma_list,
        help=f"comma-separated heads: {','.join(HEADS)} (default text for T5, cls for BERT)",
    )
    seeds: int = option("--seeds", default=3, type=positive, help="seeds per task (default 3)")
    also_random_init: bool = option(
        "--also-random-init",
        default=False,
        action="store_true",
        help="the same from random weights",
    )
    epochs: float | None = _epochs()
    steps: int | None = _steps()
    lr: float | None = _lr()
    batch_size: int = _batch_size()
    max_length: int = _max_length()
    max_train_examples: int | None = _max_train_examples()
    vocab: str | None = _vocab()
    device: str = _device()
    compile: bool | None = _compile()
    log_every: int = _log_every()
    progress: bool = _progress()
    exclude: str | None = option(
        "--exclude",
        default=None,
        metavar="REPORT",
        help="a `c4forge contamination` report: also score every task without its contaminated "
        "dev examples (a second table)",
    )


@dataclass(frozen=True, kw_only=True)
class EvaluateOptions(CliConfig):
    """Score a fine-tuned model on a split (``c4forge evaluate``)."""

    ft: str = option(
        "ft",
        help="a `c4forge finetune` output folder, or a t5 training run or checkpoint (its own "
        "text-to-text head, no fine-tuning: a multi-task model)",
    )
    task: str = option("--task", required=True, help=TASK_HELP)
    data: str = option("--data", required=True, help="GLUE folder, or the custom file to score")
    split: str | None = option(
        "--split", default=None, help="split file name (default: the task's dev split(s))"
    )
    head: str | None = option(
        "--head", default=None, choices=tuple(HEADS), help="must match the run's head"
    )
    output: str | None = option(
        "--output", "-o", default=None, help="where results go (default FT/eval-TASK-SPLIT)"
    )
    exclude: str | None = option(
        "--exclude",
        default=None,
        metavar="REPORT",
        help="a `c4forge contamination` report: also score the subset without its contaminated "
        "examples",
    )
    batch_size: int = option(
        "--batch-size", default=64, type=int, help="examples scored per forward pass"
    )
    device: str = _device(group=None)
    progress: bool = _progress(group=None)
    text_field: str | None = _text_field()
    text_pair_field: str | None = _text_pair_field()
    label_field: str | None = _label_field()
    regression: bool = _regression()  # the run's own setting is used; accepted for symmetry
    eval_data: str | None = _eval_data()
