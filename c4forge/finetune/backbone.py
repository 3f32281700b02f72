"""The pretrained model a fine-tuning run starts from: a c4forge checkpoint (or a randomly
initialised model of the same shape) together with its vocabulary and fingerprint.

``load_backbone`` is the one place that knows how checkpoints are read: through
``c4forge.trainers.models.load_pretrained`` (T5 and BERT).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch

from c4forge.errors import InputError


@dataclass
class Backbone:
    model: torch.nn.Module
    family: str  # a registered model family's name (trainers/models)
    config: Any  # the trainers' model config (ModelConfig for T5)
    vocab: Any  # c4forge.vocab.vocab.Vocabulary
    vocab_dir: str | None
    fingerprint: str  # sha256 of the checkpoint's model.safetensors ("random-init" for none)
    step: int | None
    path: str | None  # the checkpoint directory

    @property
    def d_model(self) -> int:
        return int(self.config.d_model)

    @property
    def num_layers(self) -> int:
        """Encoder layers (every family's config names them ``n_layers``)."""
        return int(self.config.n_layers)

    @property
    def max_positions(self) -> int | None:
        """Longest input the encoder can take (None: T5's relative positions have no limit)."""
        return self.config.max_position

    def config_dict(self) -> dict[str, Any]:
        return self.config.to_dict()


def _vocab_from_dir(directory: str | None, where: str):
    from c4forge.vocab.vocab import Vocabulary

    if not directory or not os.path.exists(directory):
        raise InputError(
            f"{where}: checkpoint has no vocabulary (recorded vocab_dir {directory!r} is missing); "
            "pass --vocab VOCAB_DIR"
        )
    return Vocabulary.load(directory)


def load_backbone(path: str, vocab: str | None = None) -> Backbone:
    """Model (CPU, train mode), family, config and vocabulary of a run or checkpoint folder,
    read by the trainers' own loader (T5 and BERT)."""
    from c4forge.trainers.models import load_pretrained

    pre = load_pretrained(path, device="cpu")
    voc = _vocab_from_dir(vocab or pre.vocab_dir, path)
    return Backbone(
        pre.model.train(),
        pre.family,
        pre.config,
        voc,
        vocab or pre.vocab_dir,
        pre.fingerprint,
        pre.step,
        path,
    )


def random_init(backbone: Backbone, seed: int) -> Backbone:
    """The same shape and vocabulary, weights drawn anew with ``seed`` (the random-start baseline)."""
    from c4forge.trainers.models import build_model

    torch.manual_seed(seed)
    model = build_model(backbone.family, backbone.config).train()
    return Backbone(
        model,
        backbone.family,
        backbone.config,
        backbone.vocab,
        backbone.vocab_dir,
        "random-init",
        None,
        None,
    )
