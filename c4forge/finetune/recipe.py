"""Optimiser recipes of the heads (finetune.md §4–§5), their defaults, and the schedule.

The recipes themselves are the heads' (``head_registry.HEADS``); this module resolves them.

* ``text``: T5 §3.1.3 — Adafactor (the trainers' ``build_optimizer``) at a constant 1e-3, no
  warm-up, no clipping.
* ``cls``: BERT Appendix A — AdamW β = (0.9, 0.999), ε 1e-6, weight decay 0.01 (not on biases and
  norms), 10 % linear warm-up then linear decay to 0, gradient clipping 1.0.
* ``hire``: HIRE §4 — Adam(W) β = (0.9, 0.98), ε 1e-6, weight decay 0.1, clipping 1.0 (the GRUs need
  it), 10 % warm-up (within the paper's 6–25 %), same learning rate as ``cls``.

The ``cls``/``hire`` learning rate follows the model's width (``LR_BY_WIDTH``; ``--lr`` overrides
it; the rule that chose it is recorded in the recipe as ``lr_rule``): one rate for every size
left small models far from their accuracy. On SST-2, 600 steps × 32 from a random-init
``bert-tiny`` (d_model 128) reached 69.2 % dev accuracy at 1e-3 against 58–62 % at 1e-4
(measured here); wide encoders take BERT's own 2e-5…5e-5 (3e-5 here), and the 512-wide ones Turc et al.'s
compact-model 1e-4.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from c4forge.finetune.head_registry import get_head

if TYPE_CHECKING:  # torch is imported where an optimiser is built: the CLI's --help stays instant
    import torch


# (largest d_model, learning rate) for the cls and hire heads, first match wins.
LR_BY_WIDTH: tuple[tuple[float, float], ...] = (
    (256, 1e-3),  # bert-tiny (128), bert-mini (256), t5 tiny: compact encoders
    (512, 1e-4),  # bert-small, bert-medium, t5 small (Turc et al.'s compact-model rate)
    (float("inf"), 3e-5),  # bert-base, t5 base and wider (BERT's 2e-5…5e-5)
)
LR_HELP = "cls/hire by model width: d_model <= 256: 1e-3, <= 512: 1e-4, wider: 3e-5"


def default_lr(head: str, d_model: int) -> tuple[float, str]:
    """The head's default learning rate for a backbone ``d_model`` wide, and why."""
    h = get_head(head)
    if h.lr_rule is not None:
        return float(h.recipe["lr"]), h.lr_rule
    for width, lr in LR_BY_WIDTH:
        if d_model <= width:
            bound = "any width" if width == float("inf") else f"d_model <= {int(width)}"
            return lr, f"default for d_model {d_model} ({bound}): {lr:g}"
    raise AssertionError("LR_BY_WIDTH ends with an unbounded row")


def resolve_recipe(head: str, d_model: int | None = None, **overrides: Any) -> dict[str, Any]:
    """The head's recipe with the user's values (``None`` = not given) on top; without an
    ``lr`` override the rate follows ``d_model`` (``default_lr``)."""
    recipe = dict(get_head(head).recipe)
    if d_model is not None:
        recipe["lr"], recipe["lr_rule"] = default_lr(head, d_model)
    if overrides.get("lr") is not None:
        recipe["lr_rule"] = "--lr"
    recipe.update({k: v for k, v in overrides.items() if v is not None})
    if "betas" in recipe:
        recipe["betas"] = list(recipe["betas"])
    return recipe


def build(recipe: dict[str, Any], model: torch.nn.Module) -> torch.optim.Optimizer:
    import torch

    from c4forge.trainers.optim import build_optimizer

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
