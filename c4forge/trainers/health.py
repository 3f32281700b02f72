"""Training health: a non-finite loss or gradient norm stops the run, and options that cannot
train finite weights are refused before any work.

Why the check sits where it does: the step never reads a value back to the host (model.md §4,
"no ``.item()`` inside the step"), and a per-step check would add exactly that sync. So each
step only folds "was this step's loss and gradient norm finite" into a small device tensor
(the first bad step of each kind; no sync), and the host reads it where the loop already waits
for the device: a log window's read-back, an evaluation, a checkpoint. A checkpoint is written
only after that read says every step so far was finite, so ``checkpoints/latest`` keeps naming
the last finite checkpoint and metrics.jsonl never receives a non-finite loss.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from c4forge.errors import C4ForgeError, ConfigError

_FINE = 2**62  # "no bad step yet": larger than any step, so a MIN over ranks keeps real ones
_KINDS = ("loss", "gradient norm")


class TrainingDiverged(C4ForgeError):
    """A step produced a non-finite loss or gradient norm; the run stopped before saving it."""


def check_finite_options(lr: float | None, grad_clip: float | None, z_loss: float | None) -> None:
    """``--lr``, ``--grad-clip`` and ``--z-loss`` finite and >= 0 (None: the default), for every
    optimizer; checked before the device, the data or the model is touched."""
    for flag, value in (("--lr", lr), ("--grad-clip", grad_clip), ("--z-loss", z_loss)):
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise ConfigError(f"{flag} must be a finite number >= 0, got {value}")


def gradient_norm(params: list[torch.nn.Parameter], max_norm: float) -> torch.Tensor:
    """The global gradient norm of ``params`` (a device scalar, no sync), clipping to
    ``max_norm`` when it is > 0 (clipping computes the norm anyway)."""
    if max_norm > 0:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros((), device=params[0].device if params else None)
    if hasattr(torch.nn.utils, "get_total_norm"):  # torch >= 2.6 (foreach where it can)
        return torch.nn.utils.get_total_norm(grads)
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


class Health:
    """The first non-finite step of each kind since the run (re)started, on the device."""

    def __init__(self, device: Any) -> None:
        self.first_bad = torch.full((len(_KINDS),), _FINE, dtype=torch.int64, device=device)

    def note(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> None:
        """Record step ``step`` (0-based): device ops only."""
        finite = torch.stack([torch.isfinite(loss).all(), torch.isfinite(grad_norm).all()])
        self.first_bad = torch.where(finite, self.first_bad, self.first_bad.clamp(max=step))

    def check(self, info: Any, latest: str | None, lr: float) -> None:
        """Read the record (one sync, the MIN over ranks) and stop the run if a step was bad.
        ``latest``: the checkpoint that stays the run's newest; ``lr``: the peak learning rate."""
        first = self.first_bad.clone()
        if info.enabled:
            import torch.distributed as tdist

            tdist.all_reduce(first, op=tdist.ReduceOp.MIN)
        steps = first.tolist()
        bad = [(s, k) for k, s in enumerate(steps) if s < _FINE]
        if not bad:
            return
        step, kind = min(bad)[0], _KINDS[min(bad)[1]]  # the loss first when both at one step
        kept = f"checkpoints/latest stays {latest}" if latest else "no checkpoint was written"
        raise TrainingDiverged(
            f"non-finite {kind} at step {step + 1}: training stopped ({kept}); "
            f"lower --lr (peak {lr:g}) or set --grad-clip"
        )
