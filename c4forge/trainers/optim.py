"""Optimizers (model.md §2): T5's Adafactor (sync-free, adafactor.py), nanoT5's AdamWScale, BERT's AdamW.

The trainer sets every group's ``lr`` to the schedule value before each step (``set_lr``). Both
keep their state as tensors (``step`` included), so ``state_dict()`` round-trips and flattens into
safetensors as ``"<param name>.<state key>"``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch

from c4forge.errors import ConfigError
from c4forge.trainers.adafactor import Adafactor, run_closure

OPTIMIZERS = ("adafactor", "adamwscale", "adamw")
DEFAULT_SCHEDULE = {"adafactor": "isr_decay", "adamwscale": "cosine", "adamw": "linear"}
# adafactor: only used by cosine/constant; adamw: BERT-base's pretraining peak
DEFAULT_LR = {"adafactor": 1e-2, "adamwscale": 2e-2, "adamw": 1e-4}
DEFAULT_GRAD_CLIP = {"adafactor": 0.0, "adamwscale": 1.0, "adamw": 1.0}
BERT_WEIGHT_DECAY = 0.01
# google-research/bert optimization.py: no decay on "LayerNorm", "layer_norm", "bias"
NO_DECAY = ("LayerNorm", "layer_norm", "bias")


def weight_decay_groups(
    named: Iterable[tuple[str, torch.nn.Parameter]], weight_decay: float = BERT_WEIGHT_DECAY
) -> list[dict]:
    """Two parameter groups: decayed weights, and biases / LayerNorm parameters without decay."""
    decay, plain = [], []
    for name, p in named:
        (plain if any(k in name for k in NO_DECAY) else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": plain, "weight_decay": 0.0},
    ]


def build_optimizer(
    name: str,
    params: Iterable[torch.nn.Parameter],
    lr: float | None = None,
    weight_decay: float = 0.0,
    foreach: bool | None = True,
    compile: bool | None = None,
) -> torch.optim.Optimizer:
    """``adafactor``: T5's Adafactor (torch's algorithm without host reads; ``compile`` None =
    compiled on CUDA); ``adamwscale``: nanoT5's default; ``adamw``: BERT's (pass
    ``weight_decay_groups(model.named_parameters())`` as ``params``)."""
    if name not in OPTIMIZERS:
        raise ConfigError(f"unknown optimizer {name!r}; valid: {', '.join(OPTIMIZERS)}")
    lr = DEFAULT_LR[name] if lr is None else float(lr)
    if name == "adafactor":
        # β₂,t = 1 − t^−0.8, no momentum, relative step ρ_t = min(lr, 1/√t), parameter scaling
        # max(1e-3, RMS(θ)), update clipping at d = 1. ε₁ stays torch's default (dtype eps, used
        # as a floor on the factored variance): T5's 1e-30 squared underflows in fp32 and a row
        # that never sees a gradient (an unused embedding row) would then divide 0 by 0.
        return Adafactor(
            params,
            lr=lr,
            beta2_decay=-0.8,
            eps=(None, 1e-3),
            d=1.0,
            weight_decay=weight_decay,
            compile=compile,
        )
    if name == "adamw":
        # BERT's AdamW: β = (0.9, 0.999), eps 1e-6, decoupled decay (weight_decay_groups sets it
        # per group). torch's AdamW has Adam's bias correction, which google-research/bert's
        # AdamWeightDecayOptimizer omits; we follow torch/HF (the spec is silent).
        return torch.optim.AdamW(
            params, lr=lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=weight_decay, foreach=foreach
        )
    return AdamWScale(params, lr=lr, weight_decay=weight_decay)


def model_optimizer(
    name: str, model: torch.nn.Module, lr: float, compile: bool | None
) -> torch.optim.Optimizer:
    """The pretraining optimizer of ``model``: AdamW without decay on biases and norms, the
    others over all parameters; ``compile`` (--compile / --no-compile, None: compiled on CUDA)
    decides for the optimizer's update too."""
    named = model.named_parameters()
    params = weight_decay_groups(named) if name == "adamw" else model.parameters()
    return build_optimizer(name, params, lr=lr, compile=compile)


def set_lr(optimizer: torch.optim.Optimizer, value: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = value


def schedule_note(optimizer: str, schedule: str) -> str | None:
    """A line to log when the schedule cannot act as written (Adafactor caps ρ_t at 1/√n)."""
    if optimizer == "adafactor" and schedule in ("cosine", "constant"):
        return (
            f"note: with adafactor the {schedule} schedule is capped at 1/sqrt(step) "
            "(torch.optim.Adafactor uses rho_t = min(lr, 1/sqrt(t)); nanoT5 used HF's uncapped mode)"
        )
    return None


class AdamWScale(torch.optim.Optimizer):
    """Adam with bias correction whose step is scaled per tensor by ``max(1e-3, RMS(θ))``.

    ``θ ← θ − lr·√(1−β₂ᵗ)/(1−β₁ᵗ) · max(1e-3, RMS(θ_{t−1})) · m/(√v + ε)``, then decoupled decay
    ``θ ← θ − lr·wd·θ`` (nanoT5's order). Written with ``torch._foreach_*`` ops: one kernel per op
    over all tensors; ``step`` lives on the CPU as a tensor, so no device sync.
    """

    def __init__(
        self,
        params,
        lr: float = 2e-2,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
    ):
        if lr < 0 or eps < 0 or not (0 <= betas[0] < 1 and 0 <= betas[1] < 1):
            raise ConfigError(f"AdamWScale: invalid lr {lr}, eps {eps} or betas {betas}")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        loss = run_closure(closure)
        for group in self.param_groups:
            params, grads, exp_avgs, exp_avg_sqs, steps = [], [], [], [], []
            for p in group["params"]:
                if p.grad is None:
                    continue
                if p.grad.is_sparse:
                    raise RuntimeError("AdamWScale does not support sparse gradients")
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                params.append(p)
                grads.append(p.grad)
                exp_avgs.append(state["exp_avg"])
                exp_avg_sqs.append(state["exp_avg_sq"])
                steps.append(state["step"])
            if params:
                self._update(group, params, grads, exp_avgs, exp_avg_sqs, steps)
        return loss

    @staticmethod
    def _update(group, params, grads, exp_avgs, exp_avg_sqs, steps) -> None:
        beta1, beta2 = group["betas"]
        lr, eps, wd = group["lr"], group["eps"], group["weight_decay"]
        torch._foreach_add_(steps, 1.0)
        # per-tensor RMS of θ_{t−1}, floored at 1e-3 (computed before the update, as nanoT5)
        rms = torch._foreach_norm(params)
        torch._foreach_mul_(rms, [1.0 / math.sqrt(p.numel()) for p in params])
        torch._foreach_clamp_min_(rms, 1e-3)
        torch._foreach_lerp_(exp_avgs, grads, 1.0 - beta1)
        torch._foreach_mul_(exp_avg_sqs, beta2)
        torch._foreach_addcmul_(exp_avg_sqs, grads, grads, 1.0 - beta2)
        denom = torch._foreach_sqrt(exp_avg_sqs)
        torch._foreach_add_(denom, eps)
        update = torch._foreach_div(exp_avgs, denom)
        torch._foreach_mul_(update, rms)
        step_sizes = []
        for s in steps:  # CPU scalars: .item() does not touch the accelerator
            t = s.item()
            step_sizes.append(-lr * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t))
        torch._foreach_mul_(update, step_sizes)
        torch._foreach_add_(params, update)
        if wd > 0:
            torch._foreach_mul_(params, 1.0 - lr * wd)
