"""The fine-tuning heads, by name: what each builds, trains with, and how its data is encoded.

Torch-free (``--help`` and ``c4forge experiment`` read it). A head is one :class:`Head` entry;
the code that builds the model, encodes examples, computes the loss, evaluates, picks the
optimiser recipe and validates ``--head`` reads these attributes instead of comparing names, so
a new head is a module with its ``nn.Module`` and one :func:`register_head` call.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Head:
    """One head.

    ``recipe``: its optimiser recipe (``finetune/recipe.py`` documents the keys). ``lr_rule``:
    why its default rate is fixed (``None``: the rate follows the backbone's width).
    ``generates``: the model itself writes the answer as text (T5's text-to-text head): targets
    are encoded, the loss is the decoder's, evaluation decodes, and only an encoder-decoder
    family (``Family.encoder_decoder``) can run it; otherwise the head maps the encoder's states
    to logits and runs on any family.
    ``builder``: ``"module:callable"``, imported when a model is built, called as
    ``builder(family, d_model, num_labels)`` for an ``nn.Module`` whose
    ``forward(backbone, states, final, mask)`` returns ``{"logits": …}``; ``None`` for a
    generating head (the backbone is the model)."""

    name: str
    recipe: Mapping[str, Any]
    builder: str | None = None
    generates: bool = False
    lr_rule: str | None = None

    @property
    def needs(self) -> str:
        """What the head needs of a checkpoint, for errors."""
        return "an encoder-decoder (T5) checkpoint" if self.generates else "a checkpoint"

    def runs_on(self, family: str) -> bool:
        from c4forge.trainers.models import get_family

        return not self.generates or get_family(family).encoder_decoder

    def build(self, family: str, d_model: int, num_labels: int) -> Any:
        """The head's module (torch is imported here, not at registration)."""
        if self.builder is None:
            raise ValueError(f"head {self.name!r} has no module: the backbone is the model")
        module, _, attr = self.builder.partition(":")
        make: Callable[..., Any] = getattr(importlib.import_module(module), attr)
        return make(family, d_model, num_labels)


HEADS: dict[str, Head] = {}


def register_head(head: Head) -> Head:
    """Add a head (its name becomes a valid ``--head`` value for the code that reads
    ``HEADS``); returns it."""
    if head.name in HEADS:
        raise ValueError(f"head {head.name!r} is already registered")
    if (head.builder is None) != head.generates:
        raise ValueError(f"head {head.name!r}: a builder for a classifier head, none otherwise")
    HEADS[head.name] = head
    return head


def get_head(name: str) -> Head:
    return HEADS[name]


def default_head(family: str) -> str:
    """The first registered head that runs on ``family`` (T5: text, BERT: cls)."""
    return next(name for name, h in HEADS.items() if h.runs_on(family))


def heads_for(family: str) -> list[str]:
    return [name for name, h in HEADS.items() if h.runs_on(family)]


register_head(
    Head(
        "text",
        {
            "optimizer": "adafactor",
            "lr": 1e-3,
            "schedule": "constant",
            "warmup": 0.0,
            "weight_decay": 0.0,
            "grad_clip": 0.0,
        },
        generates=True,
        lr_rule="text head: Adafactor's constant 1e-3 (T5)",
    )
)
register_head(
    Head(
        "cls",
        {
            "optimizer": "adamw",
            "lr": 1e-4,
            "schedule": "linear",
            "warmup": 0.1,
            "weight_decay": 0.01,
            "grad_clip": 1.0,
            "betas": (0.9, 0.999),
            "eps": 1e-6,
        },
        builder="c4forge.finetune.heads:ClsHead",
    )
)
register_head(
    Head(
        "hire",
        {
            "optimizer": "adamw",
            "lr": 1e-4,
            "schedule": "linear",
            "warmup": 0.1,
            "weight_decay": 0.1,
            "grad_clip": 1.0,
            "betas": (0.9, 0.98),
            "eps": 1e-6,
        },
        builder="c4forge.finetune.heads:build_hire",
    )
)
