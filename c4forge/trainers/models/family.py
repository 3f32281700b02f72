"""What a model family is, as one object: the contract the trainer, checkpoints, export and
fine-tuning read instead of comparing family names.

Torch-free, as is the registry (``models/__init__``): a family module, which needs torch, is
imported on the first lookup, so ``--help`` and ``c4forge experiment``'s checks never load it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Protocol


class ModelConfig(Protocol):
    """Every family's config dataclass: it names its family, and round-trips through JSON.
    What the trainer, resume, startup lines and fine-tuning read of any family's config."""

    family: str
    embedding_size: int  # embedding rows (the vocabulary rounded up)
    n_layers: int  # encoder layers
    ffn: str  # the FFN variant (model.md §1.2), as the run's title names it
    dropout_rate: float  # 0: no per-micro-batch dropout seeds
    max_position: int | None  # longest input with learned positions; None: any length

    def to_dict(self) -> dict[str, Any]: ...


class TrainingGlue(Protocol):
    """A family's training glue (``T5Training`` in ``models/t5.py``): loss parts, metrics, batches."""

    name: str
    parts: tuple[str, ...]
    stats: tuple[tuple[str, int], ...]
    columns: Sequence[str]  # the shard columns a batch reads
    checks_rows: bool

    # tensors are ``Any`` here: this module stays torch-free
    def row_tokens(self, inputs_length: int, targets_length: int) -> int: ...
    def stats_record(self, sums: Sequence[float], weights: Sequence[float]) -> dict[str, float]: ...
    def to_device(self, item: dict[str, Any], device: Any, non_blocking: bool = False) -> Any: ...
    def counts(self, batch: Any) -> Any: ...  # [parts] weights of the loss parts
    def nonpad(self, batch: Any) -> Any: ...  # non-pad tokens (throughput)
    def forward_sums(
        self, model: Any, batch: Any, z_loss: float, autocast: Any
    ) -> tuple[Any, Any]: ...  # ([parts] loss sums, [stats] metric sums)
    def check_rows(self, data: Mapping[str, Any], where: str, cfg: ModelConfig) -> None: ...
    def eval_record(self, sums: list[float], counts: list[float], stats: list[float]) -> dict: ...
    def eval_text(self, record: dict) -> str: ...
    def flops_per_example(
        self, cfg: ModelConfig, inputs_length: int, targets_length: int
    ) -> float: ...


class Exporter(Protocol):
    """A family's Hugging Face export (``trainers/export.py``)."""

    architecture: str

    def check(self, cfg: ModelConfig, dropout_rate: float | None) -> None: ...
    def files(
        self,
        cfg: ModelConfig,
        vocab: Any,
        max_len: int,
        dropout_rate: float | None,
        tensors: dict[str, Any],
        embed_token_copies: bool,
    ) -> dict[str, Any]: ...


class ConfigClass(Protocol):
    """A family's config dataclass as a class: it reads a checkpoint's ``config.json`` back."""

    def from_dict(self, data: dict[str, Any]) -> ModelConfig: ...


class MakeConfig(Protocol):
    """``make_config(preset, embedding_size, **overrides)``: a preset with the trainer's
    options on top (an override of ``None`` means "not given")."""

    def __call__(self, preset: str, embedding_size: int, **overrides: Any) -> ModelConfig: ...


# ``f(model, generates) -> model``: the pretrained model made ready for fine-tuning (its
# fine-tuning dropout; without ``generates``, a classifier head's, the parts such a head never
# uses removed, so they are never trained nor saved)
FinetuneBackbone = Callable[[Any, bool], Any]

# ``f(model, batch) -> ([H_0 … H_L], R)``: every layer's encoder states and the final one, as
# the fine-tuning heads read them (``batch``: the encoded task columns, ``finetune/encoding.py``)
HiddenStates = Callable[[Any, dict[str, Any]], tuple[list[Any], Any]]


@cache
def _attr(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


@dataclass(frozen=True)
class Family:
    """One model family, declared as ``FAMILY`` in its own module (``models/t5.py``,
    ``models/bert.py``) and registered with one ``register_family`` line in ``models/__init__``.

    ``presets``: preset name → the config fields it sets. ``config``: the config dataclass
    (``from_dict`` reads ``config.json``). ``make_config``: a preset with overrides. ``model``:
    the ``nn.Module`` class, built as ``model(config)``. ``training``: its training glue
    (:class:`TrainingGlue`; it holds no state). ``exporter_ref``: ``"module:attr"`` of its
    :class:`Exporter` (``c4forge export``), imported on first use since the exporters read
    checkpoints through this registry. ``hidden_states``: :data:`HiddenStates`. ``optimizer``:
    the default ``--optimizer``. ``objectives``: the objectives whose shards it trains
    (``None``: any objective with ``inputs``/``targets`` rows). ``options``: the trainer
    options only it takes (another family refuses them). ``encoder_decoder``: it has a decoder
    that writes text (the text head, zero-shot scoring, mixtures of text-to-text rows).
    ``cls_inputs``: its inputs are ``[CLS] A [SEP] (B [SEP])`` with segment ids, and the model
    offers its pretrained ``pooled(final)``. ``learned_positions``: rows may not exceed the
    config's ``max_position``. ``mixture_training_ref``: ``"module:attr"`` of the glue class
    that trains a mixture of its rows, built as ``cls(source names, columns)`` (``None``: the
    family trains no mixture). ``finetune_backbone``: :data:`FinetuneBackbone` (``None``: the
    model as it is). ``unmarked_configs``: a ``config.json`` without a ``family`` key
    is this family's (the format predates families), and so is a shard set whose
    ``index.json`` cannot be read (its reader reports why)."""

    name: str
    presets: Mapping[str, Mapping[str, Any]]
    config: ConfigClass
    make_config: MakeConfig
    model: Callable[[Any], Any]
    training: TrainingGlue
    exporter_ref: str
    hidden_states: HiddenStates
    optimizer: str
    objectives: tuple[str, ...] | None = None
    options: frozenset[str] = field(default_factory=frozenset)
    encoder_decoder: bool = False
    cls_inputs: bool = False
    learned_positions: bool = False
    mixture_training_ref: str | None = None
    finetune_backbone: FinetuneBackbone | None = None
    unmarked_configs: bool = False

    def preset_names(self) -> list[str]:
        return list(self.presets)

    def exporter(self) -> Exporter:
        return _attr(self.exporter_ref)  # type: ignore[no-any-return]

    def mixture_training(self, names: Sequence[str], columns: Sequence[str]) -> TrainingGlue:
        if self.mixture_training_ref is None:
            raise ValueError(f"the {self.name} family trains no mixture")
        return _attr(self.mixture_training_ref)(names, columns)  # type: ignore[no-any-return]

    def trains(self, objective: str, columns: set[str]) -> bool:
        """Whether shards of ``objective`` with ``columns`` are this family's rows."""
        if self.objectives is not None:
            return objective in self.objectives
        return {"inputs", "targets"} <= columns
