"""A finished (or checkpointed) fine-tuning run back in memory: ``c4forge evaluate``'s model.

The model is rebuilt from the shapes recorded in ``finetune.json`` and the weights of
``FT/checkpoints/latest`` are loaded with the trainers' checkpoint reader (sha256-verified
safetensors), so evaluation needs neither the pretraining run nor its vocabulary folder.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from c4forge.errors import InputError
from c4forge.finetune.model import build_finetune_model
from c4forge.finetune.outputs import VOCAB_DIR, read_run_config, spec_of
from c4forge.trainers import checkpoint as ckpt
from c4forge.trainers.models import build_model, config_from_dict


def load_finetuned(ft_dir: str) -> tuple[torch.nn.Module, dict[str, Any], Any]:
    """(model in eval mode on the CPU, finetune.json, vocabulary)."""
    from c4forge.vocab.vocab import Vocabulary

    run_cfg = read_run_config(ft_dir)
    path = ckpt.latest_checkpoint(ft_dir)
    if path is None:
        raise InputError(f"{ft_dir}: no checkpoint (the fine-tuning run did not save one)")
    vocab_dir = os.path.join(ft_dir, VOCAB_DIR)
    if os.path.isfile(os.path.join(vocab_dir, "vocab.json")):
        vocab = Vocabulary.load(vocab_dir)
    else:
        models = (
            [n for n in os.listdir(vocab_dir) if n.endswith(".model")]
            if os.path.isdir(vocab_dir)
            else []
        )
        if not models:
            raise InputError(f"{ft_dir}: no vocabulary in {vocab_dir}")
        vocab = Vocabulary.load(os.path.join(vocab_dir, models[0]), extra_ids=100)
    family = run_cfg["family"]
    backbone = build_model(family, config_from_dict(family, run_cfg["backbone_config"]))
    spec = spec_of(run_cfg)
    model = build_finetune_model(
        family,
        backbone,
        run_cfg["head"],
        int(run_cfg["backbone_config"]["d_model"]),
        spec.num_labels,
    )
    ckpt.load_checkpoint(path, model, None)
    return model.eval(), run_cfg, vocab
