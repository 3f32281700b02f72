"""The t5 family's training glue for a mixture: the same loss, plus loss and tokens per source.

The optimised loss is exactly the single-set one (``weighted_cross_entropy`` over the whole
batch, model.md §1.5): mixing changes which rows come, not how they count. Beside it, under
``no_grad``, each row's cross-entropy sum, weight and non-pad tokens are added up per source
(a one-hot matrix product: no host sync, static shapes) and travel in the family's ``stats``
slot, so the loop's window sums, all-reduce and eval accumulation carry them with no change.
The per-source loss is the plain cross-entropy (without any z-loss term).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from c4forge.trainers.data import to_device
from c4forge.trainers.loss import weighted_cross_entropy
from c4forge.trainers.models.t5 import T5Training


class MixtureT5Training(T5Training):
    """``T5Training`` whose stats are ``[loss sums (K), target weights (K), non-pad (K)]``."""

    def __init__(self, names: Sequence[str], columns: Sequence[str]) -> None:
        self.names = list(names)
        self.columns = tuple(columns)
        k = len(self.names)
        # sizes only: ``stats_record`` reads them (the families' division by a part does not apply)
        self.stats = tuple((f"_{i}", 0) for i in range(3 * k))

    def to_device(self, item: dict[str, Any], device: Any, non_blocking: bool = False) -> Any:
        batch = to_device(item, device, non_blocking)
        source = item["source"]
        if not isinstance(source, torch.Tensor):
            source = torch.as_tensor(source)
        batch.source = source.to(device, non_blocking=non_blocking).to(torch.int64)
        return batch

    def forward_sums(
        self, model: Any, batch: Any, z_loss: float, autocast: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.logits(model, batch, autocast)
        loss_sum, _ = weighted_cross_entropy(logits, batch.targets, z_loss)
        return loss_sum[None], self.source_sums(logits, batch)

    @torch.no_grad()
    def source_sums(self, logits: torch.Tensor, batch: Any) -> torch.Tensor:
        """Per source: Σ w·CE, Σ w over target tokens, and non-pad tokens (3K values)."""
        targets = batch.targets
        rows, length = targets.shape
        ce = F.cross_entropy(
            logits.float().reshape(rows * length, -1), targets.reshape(-1), reduction="none"
        ).reshape(rows, length)
        w = (targets != 0).float()
        per_row = torch.stack(
            [(ce * w).sum(1), w.sum(1), w.sum(1) + (batch.input_ids != 0).sum(1).float()]
        )  # 3 × rows
        onehot = F.one_hot(batch.source, len(self.names)).float()  # rows × K
        return (per_row @ onehot).reshape(-1)

    def _split(self, stats: Sequence[float]) -> tuple[list, list, list]:
        k = len(self.names)
        return list(stats[:k]), list(stats[k : 2 * k]), list(stats[2 * k : 3 * k])

    def stats_record(self, stats: Sequence[float], weights: Sequence[float]) -> dict[str, float]:
        """A log window's per-source keys: ``loss_<name>`` (sources that had rows) and
        ``tokens_<name>`` (non-pad tokens trained in the window); the parts' ``weights`` do not
        apply (each source's weight is among its own stats)."""
        sums, weights, tokens = self._split(stats)
        out: dict[str, float] = {}
        for name, s, w, t in zip(self.names, sums, weights, tokens):
            if w > 0:
                out[f"loss_{name}"] = s / w
            out[f"tokens_{name}"] = int(t)
        return out

    def eval_record(self, sums: list[float], counts: list[float], stats: list[float]) -> dict:
        """The pooled held-out NLL (every source's rows, token-weighted) and one per source."""
        record = super().eval_record(sums, counts, stats)
        if not record:
            return record
        s, w, _ = self._split(stats)
        for name, a, b in zip(self.names, s, w):
            if b > 0:
                record[f"eval_nll_{name}"] = a / b
        return record

    def eval_text(self, record: dict) -> str:
        per = ", ".join(
            f"{n} {record[f'eval_nll_{n}']:.4f}" for n in self.names if f"eval_nll_{n}" in record
        )
        return super().eval_text(record) + (f"; per source: {per}" if per else "")
