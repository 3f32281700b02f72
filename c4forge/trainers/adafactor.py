"""Adafactor without host reads (model.md §2.1): torch's algorithm, run as a few ops per shape.

``torch.optim.Adafactor`` computes the step size, the parameter RMS and the clipping denominator
as Python floats, so every tensor costs several ``.item()`` reads (each a device sync on a GPU)
and ten-odd kernel launches, and it builds the factored second moment as an outer-product GEMM
(TF32 on a GPU). This is the same algorithm with every scalar kept on the device:

* ``step`` is a tensor on the parameter's device (``capturable``), the learning rate a 0-d tensor
  filled from the group's ``lr`` each step, so ρ_t = min(lr, 1/√t), β₂,t = 1 − t^−0.8,
  α_t = max(ε₂, RMS(θ)) · ρ_t and the clipping ``max(1, RMS(U)/d)`` are tensor ops.
* Parameters of one (shape, dtype, device) are stacked, so a row or column statistic, an RMS or
  a clip is one reduction over the stack, not one per tensor; ``V̂ = R·C / mean(R)`` is a
  broadcast product (exact in fp32), not a GEMM.
* The whole update is one function of tensors; on CUDA it runs under ``torch.compile`` (set
  ``compile`` to force either way), which fuses it into a handful of kernels.

The state keeps torch's keys and shapes (``step``, ``row_var`` ``[..., R, 1]``, ``col_var``
``[..., 1, C]``, ``variance``), so checkpoints of either implementation resume with the other.
Numerics: the statistics are the same reductions in the same order per tensor; the products and
divisions are reordered slightly, so updates agree with torch's to fp32 rounding (the tests bound
the drift over many steps).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor

Bucket = tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor], list[Tensor], list[Tensor]]


def run_closure(closure: Callable[[], Tensor] | None) -> Tensor | None:
    """The optimizer ``step(closure)`` protocol: re-evaluate the loss with gradients on."""
    if closure is None:
        return None
    with torch.enable_grad():
        return closure()


def update_bucket(
    params: list[Tensor],
    grads: list[Tensor],
    steps: list[Tensor],
    row_vars: list[Tensor],
    col_vars: list[Tensor],
    variances: list[Tensor],
    lr: Tensor,
    beta2_decay: float,
    eps1: float,
    eps2: float,
    d: float,
    weight_decay: float,
) -> None:
    """One Adafactor step for tensors of one shape (factored when they have ≥ 2 dims)."""
    n_dims = grads[0].dim()
    per_tensor = (-1,) + (1,) * n_dims  # broadcasts a [n] vector over the stacked [n, ...]
    reduce_dims = tuple(range(1, n_dims + 1))
    numel = grads[0].numel()
    torch._foreach_add_(steps, 1.0)
    t = torch.stack(steps)
    one_minus_beta2 = t.pow(beta2_decay).view(per_tensor)
    rho = torch.minimum(t.rsqrt(), lr)
    rms = torch.stack(torch._foreach_norm(params)).div_(math.sqrt(numel))
    alpha = rms.clamp_min_(eps2).mul_(rho)  # from θ_{t−1}, before any decay
    if weight_decay != 0:
        torch._foreach_mul_(params, (1.0 - lr * weight_decay).to(params[0].dtype))
    g = torch.stack(grads)
    if n_dims > 1:
        # mean over a row of G², as torch: ‖g‖² / n without materialising G²
        row = torch.linalg.vector_norm(g, dim=-1, keepdim=True).square_().div_(g.shape[-1])
        col = torch.linalg.vector_norm(g, dim=-2, keepdim=True).square_().div_(g.shape[-2])
        row = torch.stack(row_vars).lerp_(row, one_minus_beta2)
        col = torch.stack(col_vars).lerp_(col, one_minus_beta2)
        torch._foreach_copy_(row_vars, row.unbind(0))
        torch._foreach_copy_(col_vars, col.unbind(0))
        v = row * col  # broadcast outer product [n, ..., R, C]
        v.div_(row.mean(dim=-2, keepdim=True).clamp_min_(eps1))
    else:
        v = torch.stack(variances).lerp_(g.square(), one_minus_beta2)
        torch._foreach_copy_(variances, v.unbind(0))
    u = v.clamp_min_(eps1 * eps1).rsqrt_().mul_(g)
    clip = torch.linalg.vector_norm(u, dim=reduce_dims).div_(math.sqrt(numel) * d).clamp_min_(1.0)
    u.mul_(alpha.div_(clip).neg_().view(per_tensor))
    torch._foreach_add_(params, u.unbind(0))


def update_all(
    buckets: list[Bucket], lrs: list[Tensor], hyper: list[tuple[float, float, float, float, float]]
) -> None:
    """Every bucket of a step: the function ``torch.compile`` sees as one graph."""
    for bucket, lr, h in zip(buckets, lrs, hyper):
        update_bucket(*bucket, lr, *h)


class Adafactor(torch.optim.Optimizer):
    """``torch.optim.Adafactor(lr, beta2_decay, eps, d, weight_decay)`` without host syncs.

    ``compile``: run the update under ``torch.compile`` (default: when the parameters are on
    CUDA; never on XLA). The trainer sets ``group["lr"]`` before each step, as for any torch optimizer.
    """

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        beta2_decay: float = -0.8,
        eps: tuple[float | None, float] = (None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        compile: bool | None = None,
    ):
        if not 0.0 <= float(lr):
            raise ValueError(f"Adafactor: learning rate must be >= 0, got {lr}")
        if not beta2_decay <= 0.0:
            raise ValueError(f"Adafactor: beta2_decay must be <= 0, got {beta2_decay}")
        if eps[0] is not None and eps[0] < 0.0 or eps[1] < 0.0:
            raise ValueError(f"Adafactor: epsilons must be >= 0, got {eps}")
        if d < 1.0:
            raise ValueError(f"Adafactor: clipping threshold d must be >= 1, got {d}")
        defaults = dict(
            lr=lr,
            beta2_decay=beta2_decay,
            eps=eps,
            d=d,
            weight_decay=weight_decay,
            # torch's load_state_dict moves "step" to the parameter's device only when capturable
            capturable=True,
        )
        super().__init__(params, defaults)
        self.compile = compile
        self._update: Callable[..., None] | None = None

    def _state_of(self, p: Tensor) -> dict:
        state = self.state[p]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
            if p.dim() > 1:
                state["row_var"] = p.new_zeros((*p.shape[:-1], 1))
                state["col_var"] = p.new_zeros((*p.shape[:-2], 1, p.shape[-1]))
            else:
                state["variance"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        elif state["step"].device != p.device:  # a state loaded without the group's flag
            state["step"] = state["step"].to(p.device, torch.float32)
        return state

    def _buckets(self, group: dict) -> dict[tuple, Bucket]:
        buckets: dict[tuple, Bucket] = {}
        for p in group["params"]:
            if p.grad is None:
                continue
            if torch.is_complex(p):
                raise RuntimeError("Adafactor does not support complex parameters")
            if p.grad.is_sparse:
                raise RuntimeError("Adafactor does not support sparse gradients")
            state = self._state_of(p)
            key = (p.device, p.dtype, tuple(p.shape))
            b = buckets.setdefault(key, ([], [], [], [], [], []))
            b[0].append(p)
            b[1].append(p.grad)
            b[2].append(state["step"])
            if p.dim() > 1:
                b[3].append(state["row_var"])
                b[4].append(state["col_var"])
            else:
                b[5].append(state["variance"])
        return buckets

    def _update_fn(self, device: torch.device) -> Callable[..., None]:
        if self._update is None:
            use = self.compile if self.compile is not None else device.type == "cuda"
            use = use and device.type != "xla"  # torch_xla traces the eager ops itself
            self._update = torch.compile(update_all, dynamic=False) if use else update_all
        return self._update

    @torch.no_grad()
    def step(self, closure=None):
        loss = run_closure(closure)
        buckets: list[Bucket] = []
        lrs: list[Tensor] = []
        hyper: list[tuple[float, float, float, float, float]] = []
        for group in self.param_groups:
            lr_by_device: dict[torch.device, Tensor] = {}
            for (device, dtype, _), bucket in self._buckets(group).items():
                if device not in lr_by_device:  # a fill kernel, never a host read
                    lr_by_device[device] = torch.full((), group["lr"], device=device)
                eps1, eps2 = group["eps"]
                eps1 = torch.finfo(dtype).eps if eps1 is None else eps1
                buckets.append(bucket)
                lrs.append(lr_by_device[device])
                hyper.append((group["beta2_decay"], eps1, eps2, group["d"], group["weight_decay"]))
        if buckets:
            self._update_fn(buckets[0][0][0].device)(buckets, lrs, hyper)
        return loss
