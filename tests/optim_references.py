"""References for the optimizer tests and benchmarks (not part of the package).

``torch_adafactor`` is torch's own Adafactor with c4forge's settings: the numerics reference of
``c4forge.trainers.adafactor`` and the "before" of the benchmarks. ``count_ops`` counts what one
call dispatches with torch's profiler, a proxy for launches and host syncs: on a GPU every
top-level op is at least one kernel launch, and every ``aten::item`` /
``aten::_local_scalar_dense`` is a device-to-host read that waits for the queue to drain. Both
counts are properties of the code, not of the machine, so the CPU can check them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from c4forge.trainers.optim import DEFAULT_LR

HOST_READS = ("aten::item", "aten::_local_scalar_dense")


@dataclass
class OpCount:
    top_level: int  # aten ops not called from inside another aten op
    host_reads: int  # aten::item + aten::_local_scalar_dense, nested ones included
    by_name: Counter  # top-level ops by name

    def line(self) -> str:
        common = ", ".join(f"{n} {c}" for n, c in self.by_name.most_common(4))
        return f"{self.top_level} top-level ops, {self.host_reads} host reads ({common})"


def count_ops(fn: Callable[[], object]) -> OpCount:
    """Run ``fn`` once under the profiler and count its aten ops."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    by_name: Counter = Counter()
    reads = 0
    for ev in prof.events():
        if not ev.name.startswith("aten::"):
            continue
        if ev.name in HOST_READS:
            reads += 1
        parent = ev.cpu_parent
        while parent is not None and not parent.name.startswith("aten::"):
            parent = parent.cpu_parent
        if parent is None:
            by_name[ev.name] += 1
    return OpCount(sum(by_name.values()), reads, by_name)


def optimizer_step_ops(optimizer: torch.optim.Optimizer, params: list[torch.Tensor]) -> OpCount:
    """Ops of one ``optimizer.step()`` after a warm-up step (state already allocated), with
    fixed unit gradients so the count does not depend on a model's forward pass."""
    for p in params:
        p.grad = torch.full_like(p, 1e-3)
    optimizer.step()
    return count_ops(optimizer.step)


def torch_adafactor(
    params: Iterable[torch.nn.Parameter], lr: float | None = None, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """``torch.optim.Adafactor`` with the same settings: the numerics reference (and the
    "before" of benchmarks); it reads ~10 scalars per tensor back to the host each step."""
    return torch.optim.Adafactor(
        params,
        lr=DEFAULT_LR["adafactor"] if lr is None else float(lr),
        beta2_decay=-0.8,
        eps=(None, 1e-3),
        d=1.0,
        weight_decay=weight_decay,
        foreach=True,
    )
