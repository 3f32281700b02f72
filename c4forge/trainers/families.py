"""What the training loop needs from a model family: columns, device batches, loss parts, metrics.

A loss is a list of *parts*, each ``Σ term / count`` over the **global** batch: the counts of a
step are known before the forward pass (weights and examples), are all-reduced first, and every
rank back-propagates ``world · Σ_i local_sum_i / count_i``; DDP's average then gives exactly the
single-device gradient (model.md §5), for any number of parts.

* t5: one part, ``Σ w·CE / Σ w`` over target tokens (model.md §1.5).
* bert: ``mlm_loss`` = ``Σ w·CE / Σ w`` over the masked positions (``masked_lm_weights``) plus
  ``nsp_loss`` = mean NSP cross-entropy over the real rows (finetune.md §2), with MLM and NSP
  accuracy as metrics. A row whose first token is padding (an eval filler row) counts nowhere.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from c4forge.errors import ConfigError, InputError
from c4forge.objectives.registry import BERT_COLUMNS
from c4forge.trainers.data import T5_COLUMNS, to_device
from c4forge.trainers.loss import weighted_cross_entropy
from c4forge.trainers.models.family import TrainingGlue


def _widen(item: dict[str, Any], name: str, device: Any, non_blocking: bool, dtype: Any) -> Any:
    t = item[name]
    if isinstance(t, np.ndarray):
        t = torch.from_numpy(t)
    if t.dtype in (torch.uint16, torch.uint8) and torch.device(device).type == "xla":
        t = t.to(torch.int32)  # XLA has no narrow unsigned transfers; widen on the host
    return t.to(device, non_blocking=non_blocking).to(dtype)


def no_padding(ids: Any) -> bool:
    """No id is 0 (padding): read on the host copy, before the transfer, so no device sync.
    The model then attends without a padding mask (models/t5.py, models/bert.py)."""
    return not bool((ids == 0).any())


@dataclass
class BertBatch:
    """One bert micro-batch on the device, widened."""

    input_ids: torch.Tensor
    token_type_ids: torch.Tensor
    masked_lm_positions: torch.Tensor
    masked_lm_ids: torch.Tensor
    masked_lm_weights: torch.Tensor  # float32
    next_sentence_label: torch.Tensor
    full_rows: bool = False  # no padding in input_ids (checked on the host copy)


def part_stats(
    stats: tuple[tuple[str, int], ...], sums: Sequence[float], weights: Sequence[float]
) -> dict[str, float]:
    """A log window's metrics: each stat's sum over the weight of the loss part it divides."""
    return {name: value / max(weights[part], 1.0) for (name, part), value in zip(stats, sums)}


class T5Training:
    """The encoder-decoder on inputs/targets rows."""

    name = "t5"
    parts = ("loss",)
    stats: tuple[tuple[str, int], ...] = ()  # (metric name, index of the part count it divides)
    columns = T5_COLUMNS
    checks_rows = False  # span-corruption rows need no check beyond the shard set's own

    def row_tokens(self, inputs_length: int, targets_length: int) -> int:
        return inputs_length + targets_length

    def stats_record(self, sums: Sequence[float], weights: Sequence[float]) -> dict[str, float]:
        return part_stats(self.stats, sums, weights)

    def to_device(self, item: dict[str, Any], device: Any, non_blocking: bool = False) -> Any:
        batch = to_device(item, device, non_blocking)
        full = "targets_segment_ids" not in item and no_padding(item["inputs"])
        return dataclasses.replace(batch, full_inputs=full)

    def counts(self, batch: Any) -> torch.Tensor:
        return batch.weights().sum()[None]

    def nonpad(self, batch: Any) -> torch.Tensor:
        return (batch.input_ids != 0).sum() + (batch.targets != 0).sum()

    def logits(self, model: Any, batch: Any, autocast: Any) -> torch.Tensor:
        with autocast:
            return model(
                batch.input_ids,
                batch.decoder_input_ids,
                batch.encoder_segment_ids,
                batch.decoder_segment_ids,
                full_inputs=batch.full_inputs,
            )

    def forward_sums(
        self, model: Any, batch: Any, z_loss: float, autocast: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        loss_sum, _ = weighted_cross_entropy(
            self.logits(model, batch, autocast), batch.targets, z_loss
        )
        return loss_sum[None], loss_sum.new_zeros(0)

    def check_rows(self, data: dict[str, np.ndarray], where: str, cfg: Any) -> None:
        return None

    def eval_record(self, sums: list[float], counts: list[float], stats: list[float]) -> dict:
        if counts[0] <= 0:
            return {}
        nll = sums[0] / counts[0]
        return {"eval_nll": nll, "eval_ppl": math.exp(min(nll, 700.0))}

    def eval_text(self, record: dict) -> str:
        return f"held-out NLL {record['eval_nll']:.4f} (ppl {record['eval_ppl']:.2f})"

    def flops_per_example(self, cfg: Any, inputs_length: int, targets_length: int) -> float:
        from c4forge.trainers.flops import flops_per_example

        return flops_per_example(cfg, inputs_length, targets_length)


class BertTraining:
    """The encoder with MLM + NSP heads on ``bert_mlm_nsp`` rows (objectives.md §4.1)."""

    name = "bert"
    parts = ("mlm_loss", "nsp_loss")
    stats = (("mlm_acc", 0), ("nsp_acc", 1))
    columns = BERT_COLUMNS
    checks_rows = True

    def row_tokens(self, inputs_length: int, targets_length: int) -> int:
        return inputs_length  # targets_length is max_predictions_per_seq: not extra tokens

    def stats_record(self, sums: Sequence[float], weights: Sequence[float]) -> dict[str, float]:
        return part_stats(self.stats, sums, weights)

    def to_device(self, item: dict[str, Any], device: Any, non_blocking: bool = False) -> BertBatch:
        def move(name: str, dtype: Any = torch.int64) -> torch.Tensor:
            return _widen(item, name, device, non_blocking, dtype)

        return BertBatch(
            move("input_ids"),
            move("token_type_ids"),
            move("masked_lm_positions"),
            move("masked_lm_ids"),
            move("masked_lm_weights", torch.float32),
            move("next_sentence_label"),
            no_padding(item["input_ids"]),
        )

    @staticmethod
    def _rows(batch: BertBatch) -> torch.Tensor:
        return (batch.input_ids[:, 0] != 0).float()  # real rows start with [CLS]

    def counts(self, batch: BertBatch) -> torch.Tensor:
        return torch.stack([batch.masked_lm_weights.sum(), self._rows(batch).sum()])

    def nonpad(self, batch: BertBatch) -> torch.Tensor:
        return (batch.input_ids != 0).sum()

    def forward_sums(
        self, model: Any, batch: BertBatch, z_loss: float, autocast: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast:
            mlm, nsp = model(
                batch.input_ids,
                batch.token_type_ids,
                batch.masked_lm_positions,
                full_rows=batch.full_rows,
            )
        w = batch.masked_lm_weights.reshape(-1)
        labels = batch.masked_lm_ids.reshape(-1)
        flat = mlm.float().reshape(-1, mlm.shape[-1])
        mlm_ce = F.cross_entropy(flat, labels, reduction="none")
        rows = self._rows(batch)
        nsp_ce = F.cross_entropy(nsp.float(), batch.next_sentence_label, reduction="none")
        sums = torch.stack([(mlm_ce * w).sum(), (nsp_ce * rows).sum()])
        with torch.no_grad():
            mlm_hits = ((flat.argmax(-1) == labels).float() * w).sum()
            nsp_hits = ((nsp.argmax(-1) == batch.next_sentence_label).float() * rows).sum()
        return sums, torch.stack([mlm_hits, nsp_hits])

    def check_rows(self, data: dict[str, np.ndarray], where: str, cfg: Any) -> None:
        """Predictions must point inside the sequence (not at [CLS]) and name real ids."""
        seq = data["input_ids"].shape[1]
        real = data["masked_lm_weights"] > 0
        pos = data["masked_lm_positions"].astype(np.int64)
        bad = real & ((pos < 1) | (pos >= seq))
        if bad.any():
            row, slot = (int(v[0]) for v in np.nonzero(bad))
            raise InputError(
                f"{where}: row {row} has a masked-LM prediction at position {pos[row, slot]}, "
                f"outside its {seq}-token sequence (positions 1…{seq - 1})"
            )
        top = max(int(data["masked_lm_ids"].max(initial=0)), int(data["input_ids"].max(initial=0)))
        if top >= cfg.vocab_size:
            raise InputError(
                f"{where}: token id {top} is beyond the model's {cfg.vocab_size} embedding rows"
            )

    def eval_record(self, sums: list[float], counts: list[float], stats: list[float]) -> dict:
        if counts[0] <= 0 or counts[1] <= 0:
            return {}
        mlm, nsp = sums[0] / counts[0], sums[1] / counts[1]
        return {
            "eval_loss": mlm + nsp,
            "eval_mlm_loss": mlm,
            "eval_nsp_loss": nsp,
            "eval_mlm_acc": stats[0] / counts[0],
            "eval_nsp_acc": stats[1] / counts[1],
        }

    def eval_text(self, record: dict) -> str:
        return (
            f"held-out MLM loss {record['eval_mlm_loss']:.4f} (acc {record['eval_mlm_acc']:.3f}), "
            f"NSP loss {record['eval_nsp_loss']:.4f} (acc {record['eval_nsp_acc']:.3f})"
        )

    def flops_per_example(self, cfg: Any, inputs_length: int, targets_length: int) -> float:
        from c4forge.trainers.flops import bert_flops_per_example

        return bert_flops_per_example(cfg, inputs_length, targets_length)


def training_for(family: str) -> TrainingGlue:
    """The glue of a registered family (``Family.training``; one object per family)."""
    from c4forge.trainers.models import FAMILIES

    if family not in FAMILIES:
        raise ConfigError(f"no training glue for model family {family!r}")
    return FAMILIES[family].training_glue()
