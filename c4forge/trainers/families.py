"""What every family's training glue shares (the glue itself, ``Family.training``, lives in the
family's module: ``T5Training`` in ``models/t5.py``, ``BertTraining`` in ``models/bert.py``).

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

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from c4forge.errors import ConfigError
from c4forge.trainers.models.family import TrainingGlue


def widen(item: dict[str, Any], name: str, device: Any, non_blocking: bool, dtype: Any) -> Any:
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


def part_stats(
    stats: tuple[tuple[str, int], ...], sums: Sequence[float], weights: Sequence[float]
) -> dict[str, float]:
    """A log window's metrics: each stat's sum over the weight of the loss part it divides."""
    return {name: value / max(weights[part], 1.0) for (name, part), value in zip(stats, sums)}


def training_for(family: str) -> TrainingGlue:
    """The glue of a registered family (``Family.training``; one object per family)."""
    from c4forge.trainers.models import families

    known = families()
    if family not in known:
        raise ConfigError(f"no training glue for model family {family!r}")
    return known[family].training
