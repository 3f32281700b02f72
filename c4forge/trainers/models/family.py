"""What a model family is, as one object: the contract the trainer, checkpoints, export and
fine-tuning read instead of comparing family names.

Torch-free: ``--help``, option resolution and ``c4forge experiment`` read families without
building a model. The torch-side parts (the model module, the training glue) are named as
``"module"`` / ``"module:attr"`` and imported on first use.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from types import ModuleType
from typing import Any, Protocol


class ModelConfig(Protocol):
    """Every family's config dataclass: it names its family, and round-trips through JSON."""

    family: str
    embedding_size: int
    n_layers: int

    def to_dict(self) -> dict[str, Any]: ...


class TrainingGlue(Protocol):
    """A family's training glue (``trainers/families.py``): loss parts, metrics, batches."""

    name: str
    parts: tuple[str, ...]
    stats: tuple[tuple[str, int], ...]
    columns: Any
    checks_rows: bool

    def row_tokens(self, inputs_length: int, targets_length: int) -> int: ...
    def stats_record(self, sums: Sequence[float], weights: Sequence[float]) -> dict[str, float]: ...
    def to_device(self, item: dict[str, Any], device: Any, non_blocking: bool = False) -> Any: ...
    def counts(self, batch: Any) -> Any: ...
    def nonpad(self, batch: Any) -> Any: ...
    def forward_sums(self, *args: Any, **kwargs: Any) -> Any: ...
    def check_rows(self, data: Mapping[str, Any], where: str, cfg: Any) -> None: ...
    def eval_record(self, sums: list[float], counts: list[float], stats: list[float]) -> dict: ...
    def eval_text(self, record: dict) -> str: ...
    def flops_per_example(self, cfg: Any, inputs_length: int, targets_length: int) -> float: ...


class Exporter(Protocol):
    """A family's Hugging Face export (``trainers/export.py``)."""

    architecture: str

    def check(self, cfg: Any, dropout_rate: float | None) -> None: ...
    def files(
        self, cfg: Any, vocab: Any, max_len: int, dropout_rate: float | None,
        tensors: dict[str, Any], embed_token_copies: bool,
    ) -> dict[str, Any]: ...  # fmt: skip


@cache
def _attr(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Family:
    """One model family.

    ``module``: the module with ``Config``, ``make_config(preset, embedding_size, **overrides)``
    and ``Model``. ``presets``: ``"module:attr"`` of its preset table. ``training``:
    ``"module:attr"`` of its training-glue class (:class:`TrainingGlue`). ``exporter_ref``:
    ``"module:attr"`` of its :class:`Exporter` (``c4forge export``). ``hidden_states_ref``:
    ``"module:attr"`` of ``f(model, batch) -> ([H_0 … H_L], R)``, the encoder states the
    fine-tuning heads read. ``optimizer``: the
    default ``--optimizer``. ``objectives``: the objectives whose shards it trains (``None``:
    any objective with ``inputs``/``targets`` rows). ``options``: the trainer options only it
    takes (another family refuses them). ``encoder_decoder``: it has a decoder that writes text
    (the text head, zero-shot scoring, mixtures of text-to-text rows). ``cls_inputs``: its
    inputs are ``[CLS] A [SEP] (B [SEP])`` with segment ids, and the model offers
    ``hidden_states(ids, segments, mask)`` and its pretrained ``pooled(final)``.
    ``learned_positions``: rows may not exceed the config's ``max_position``."""

    name: str
    module: str
    presets: str
    training: str
    exporter_ref: str
    hidden_states_ref: str
    optimizer: str
    objectives: tuple[str, ...] | None = None
    options: frozenset[str] = field(default_factory=frozenset)
    encoder_decoder: bool = False
    cls_inputs: bool = False
    learned_positions: bool = False

    def model_module(self) -> ModuleType:
        return importlib.import_module(self.module)

    def preset_names(self) -> list[str]:
        return list(_attr(self.presets))

    def training_glue(self) -> TrainingGlue:
        """The family's glue object (one per family and process: it holds no state)."""
        return _glue(self.training)  # type: ignore[no-any-return]

    def exporter(self) -> Exporter:
        return _attr(self.exporter_ref)  # type: ignore[no-any-return]

    def hidden_states(self) -> Callable[[Any, dict[str, Any]], tuple[list[Any], Any]]:
        return _attr(self.hidden_states_ref)  # type: ignore[no-any-return]

    def trains(self, objective: str, columns: set[str]) -> bool:
        """Whether shards of ``objective`` with ``columns`` are this family's rows."""
        if self.objectives is not None:
            return objective in self.objectives
        return {"inputs", "targets"} <= columns


@cache
def _glue(ref: str) -> Any:
    return _attr(ref)()
