"""Token-weighted cross-entropy (model.md §1.5); the decoder inputs it is computed on are
``trainers.data.decoder_input_tokens``.

The loss returns a *sum* and a weight count, not a mean: the trainer divides by the weight count of
the global batch (all micro-batches, all ranks), so accumulation and DDP give the same update as one
big batch.
"""

from __future__ import annotations

import torch


def weighted_cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    z_loss: float = 0.0,
    chunk_size: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(Σ w·CE [+ z_loss·Σ w·logsumexp²], Σ w)`` in fp32 with ``w = targets != 0``.

    EOS (1) counts, padding (0) does not. ``z_loss`` is t5x's auxiliary term (1e-4 there; off by
    default for comparability with nanoT5 and HF). ``chunk_size`` bounds the fp32 temporaries to
    ``chunk_size`` tokens at a time (same result up to summation order).
    """
    e = logits.shape[-1]
    flat_logits = logits.reshape(-1, e)
    flat_targets = targets.reshape(-1).long()
    weights = (flat_targets != 0).float()
    n = flat_targets.shape[0]
    step = n if not chunk_size else int(chunk_size)
    total = torch.zeros((), dtype=torch.float32, device=logits.device)
    for start in range(0, n, step):
        lg = flat_logits[start : start + step].float()
        tg = flat_targets[start : start + step]
        w = weights[start : start + step]
        lse = torch.logsumexp(lg, dim=-1)
        # CE = logsumexp − logit[target]; written out so z-loss reuses the same logsumexp
        ce = lse - lg.gather(-1, tg[:, None]).squeeze(-1)
        term = ce * w
        if z_loss:
            term = term + z_loss * lse.square() * w
        total = total + term.sum()
    return total, weights.sum()
