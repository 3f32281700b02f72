"""Learning-rate schedules (model.md §2.3); ``n`` is the 1-based optimizer step, ``N`` the total.

For AdamWScale the value is the learning rate; for Adafactor it is the relative step ρ_t, which
torch caps at 1/√n (optim.py). ``isr``/``isr_decay`` are absolute (T5's formula): ``lr`` does not
scale them.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from c4forge.errors import ConfigError

SCHEDULES = ("isr", "isr_decay", "cosine", "constant", "linear")
COSINE_MIN_LR = 1e-5  # nanoT5's eta_min


ISR_WARMUP = 10_000  # T5's: the relative step holds at 1/√10⁴ = 0.01 (Adafactor's cap) until then
MAX_WARMUP = 10_000  # nanoT5's warm-up, the most a default gives


def default_warmup(schedule: str, total_steps: int) -> int:
    """The warm-up a run gets when ``--warmup`` is not given, following ``--steps``.

    * ``linear`` (BERT): 10 % of the steps (BERT: 10k of 1M).
    * ``cosine`` (nanoT5): 10 % of the steps, at most nanoT5's 10,000: a short run reaches its
      peak and decays instead of spending every step in warm-up.
    * ``isr``/``isr_decay``: 10,000 whatever the length. There ``W`` is not a ramp but the
      plateau ``1/√max(n, W)``: it fixes the largest relative step at T5's 0.01; a smaller
      ``W`` would start higher (W = 100 gives 0.1), so it does not shrink with the run.
    * ``constant`` has no warm-up (the value is recorded, never used).
    """
    if schedule == "linear":
        return int(0.1 * total_steps)
    if schedule == "cosine":
        return min(MAX_WARMUP, int(0.1 * total_steps))
    return ISR_WARMUP


def warmup_note(schedule: str, total_steps: int, warmup: int, lr_at) -> str | None:
    """A line for a run that never leaves its warm-up (``lr_at``: the schedule), else None."""
    if schedule == "constant" or warmup < total_steps:
        return None
    first, last = lr_at(1), lr_at(total_steps)
    if schedule in ("isr", "isr_decay"):
        return (
            f"the {warmup:,}-step ISR plateau is longer than the run ({total_steps:,} steps): "
            f"the relative step stays at {first:.4g} (T5's constant phase)"
            + (", then decays over the last 10 %" if schedule == "isr_decay" else "")
        )
    return (
        f"warning: the warm-up ({warmup:,} steps) is longer than the run ({total_steps:,} "
        f"steps): the learning rate only goes {first:.6g} → {last:.6g} and never reaches its "
        "peak; pass a smaller --warmup"
    )


def isr(n: int, warmup: int = ISR_WARMUP) -> float:
    """T5's inverse square root: 1/√max(n, warmup) (constant 0.01 for the first 10⁴ steps)."""
    return 1.0 / math.sqrt(max(n, warmup))


def schedule_fn(
    name: str, total_steps: int, warmup: int = 10_000, lr: float | None = None
) -> Callable[[int], float]:
    """The schedule ``r(n)`` as a function of the 1-based step."""
    if name not in SCHEDULES:
        raise ConfigError(f"unknown schedule {name!r}; valid: {', '.join(SCHEDULES)}")
    if total_steps < 1:
        raise ConfigError(f"total steps must be >= 1, got {total_steps}")
    if warmup < 0:
        raise ConfigError(f"warm-up steps must be >= 0, got {warmup}")
    big_n = int(total_steps)

    if name == "isr":
        return lambda n: isr(n, warmup)

    if name == "isr_decay":
        # GLU paper: ISR, then linear to 0 over the final 10 % (n0 = floor(0.9 N)).
        n0 = int(math.floor(0.9 * big_n))

        def isr_decay(n: int) -> float:
            if n <= n0:
                return isr(n, warmup)
            return isr(n0, warmup) * max(big_n - n, 0) / (big_n - n0)

        return isr_decay

    if lr is None:
        raise ConfigError(f"schedule {name!r} needs a learning rate")
    peak = float(lr)
    if name == "constant":
        return lambda n: peak

    if name == "linear":
        # BERT: linear warm-up from 0 to lr over W steps, then linear decay to 0 at N. As HF's
        # get_linear_schedule_with_warmup (peak at W); google-research/bert decays lr·(1 − n/N)
        # from step 0 and lets the warm-up override it, which jumps down at W.
        def linear(n: int) -> float:
            if n <= warmup:
                return peak * n / warmup
            return peak * max(big_n - n, 0) / max(big_n - warmup, 1)

        return linear

    def cosine(n: int) -> float:
        # nanoT5: LinearLR(0.5 → 1) over W steps, then cosine to eta_min at N.
        if n <= warmup:
            return peak * (0.5 + 0.5 * n / warmup) if warmup else peak
        if big_n <= warmup:  # stepped past a run that never left warm-up
            return COSINE_MIN_LR
        progress = min(n - warmup, big_n - warmup) / (big_n - warmup)
        return COSINE_MIN_LR + (peak - COSINE_MIN_LR) * (1 + math.cos(math.pi * progress)) / 2

    return cosine
