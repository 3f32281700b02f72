"""Scoring a pretraining checkpoint's own text-to-text head, with no fine-tuning.

A T5 model trained on a mixture that includes supervised tasks (``c4forge shards task``) already
answers them: ``sst2 sentence: …`` decodes to ``positive`` or ``negative``. T5 reports exactly
this for its multi-task models before fine-tuning (§3.5.3, Table 13's "multi-task training"
row). ``c4forge evaluate RUN --task sst2 --data GLUE`` with a training run (or one of its
checkpoints) instead of a fine-tuning folder builds the model as it was trained and scores it
like a fine-tuned text head (greedy decoding, the same label mapping, results.json and
predictions.jsonl); ``init`` says ``pretrained (no fine-tuning)``.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from c4forge.errors import ConfigError
from c4forge.finetune.head_registry import default_head, get_head
from c4forge.finetune.outputs import RUN_CONFIG
from c4forge.finetune.tasks import TaskSpec
from c4forge.trainers.models import get_family


def is_training_run(path: str) -> bool:
    """A `c4forge train` run or checkpoint (not a fine-tuning output)."""
    if os.path.isfile(os.path.join(path, RUN_CONFIG)):
        return False
    return os.path.isfile(os.path.join(path, "trainer_state.json")) or os.path.isdir(
        os.path.join(path, "checkpoints")
    )


def load_pretrained_text_head(
    path: str, spec: TaskSpec, head: str | None, max_length: int
) -> tuple[torch.nn.Module, dict[str, Any], Any]:
    """(the T5 model in eval mode, a run config for ``write_results``, the vocabulary)."""
    from c4forge.finetune.backbone import load_backbone

    if head is not None and not get_head(head).generates:
        raise ConfigError(
            f"--head {head}: {path} is a training run; only its own text-to-text head can be "
            "scored without fine-tuning (fine-tune it for a classifier head)"
        )
    backbone = load_backbone(path)
    if not get_family(backbone.family).encoder_decoder:
        raise ConfigError(
            f"{path} is a {backbone.family}-family checkpoint: it has no text-to-text head; "
            "fine-tune it with --head cls or hire"
        )
    run_cfg = {
        "task": spec.name,
        "head": head or default_head(backbone.family),  # the family's generating head
        "family": backbone.family,
        "init": "pretrained (no fine-tuning)",
        "seed": None,
        "steps": 0,
        "batch_size": None,
        "max_length": max_length,
        "max_train_examples": None,
        "recipe": None,
        "train_examples": 0,
        "checkpoint": os.path.abspath(path),
        "checkpoint_fingerprint": backbone.fingerprint,
        "checkpoint_step": backbone.step,
        "labels": list(spec.labels) if spec.labels else None,
        "regression": spec.regression,
        "custom": None,
    }
    return backbone.model.eval(), run_cfg, backbone.vocab
