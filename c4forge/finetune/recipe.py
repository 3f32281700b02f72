"""Optimiser recipes of the three heads (finetune.md §4–§5), their defaults, and the schedule.

* ``text``: T5 §3.1.3 — Adafactor (the trainers' ``build_optimizer``) at a constant 1e-3, no
  warm-up, no clipping.
* ``cls``: BERT Appendix A — AdamW β = (0.9, 0.999), ε 1e-6, weight decay 0.01 (not on biases and
  norms), 10 % linear warm-up then linear decay to 0, gradient clipping 1.0. DECISION: learning
  rate 1e-4, the compact-model rate of Turc et al. (BERT-base used 2e-5…5e-5).
* ``hire``: HIRE §4 — Adam(W) β = (0.9, 0.98), ε 1e-6, weight decay 0.1, clipping 1.0 (the GRUs need
  it), 10 % warm-up (within the paper's 6–25 %), same learning rate as ``cls``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from c4forge.trainers.optim import build_optimizer

RECIPES: dict[str, dict[str, Any]] = {
    "text": {"optimizer": "adafactor", "lr": 1e-3, "schedule": "constant", "warmup": 0.0,
             "weight_decay": 0.0, "grad_clip": 0.0},
    "cls": {"optimizer": "adamw", "lr": 1e-4, "schedule": "linear", "warmup": 0.1,
            "weight_decay": 0.01, "grad_clip": 1.0, "betas": (0.9, 0.999), "eps": 1e-6},
    "hire": {"optimizer": "adamw", "lr": 1e-4, "schedule": "linear", "warmup": 0.1,
             "weight_decay": 0.1, "grad_clip": 1.0, "betas": (0.9, 0.98), "eps": 1e-6},
}  # fmt: skip


def resolve_recipe(head: str, **overrides: Any) -> dict[str, Any]:
    """The head's recipe with the user's values (``None`` = not given) on top."""
    recipe = dict(RECIPES[head])
    recipe.update({k: v for k, v in overrides.items() if v is not None})
    if "betas" in recipe:
        recipe["betas"] = list(recipe["betas"])
    return recipe


def build(recipe: dict[str, Any], model: torch.nn.Module) -> torch.optim.Optimizer:
    if recipe["optimizer"] == "adafactor":
        return build_optimizer("adafactor", model.parameters(), lr=recipe["lr"])
    decay, no_decay = [], []
    for _, p in model.named_parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)  # biases and norm weights: no decay
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": recipe["weight_decay"]},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=recipe["lr"],
        betas=tuple(recipe["betas"]),
        eps=recipe["eps"],
    )


def schedule(recipe: dict[str, Any], total_steps: int) -> Callable[[int], float]:
    """Learning rate at 1-based step ``n``: constant, or linear warm-up then linear decay to 0."""
    peak = float(recipe["lr"])
    if recipe["schedule"] == "constant":
        return lambda n: peak
    warm = int(round(recipe["warmup"] * total_steps))

    def linear(n: int) -> float:
        if warm and n <= warm:
            return peak * n / warm
        return peak * max(total_steps - n, 0) / max(total_steps - warm, 1)

    return linear
