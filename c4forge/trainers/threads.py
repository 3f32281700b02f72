"""How many torch threads a CPU run uses: the CPUs this process may use, less the busy ones.

torch's default is every core it sees, which on a shared or containerised machine is wrong twice:
the cores may not all be this process's (CPU affinity, a cgroup CPU quota), and the ones that are
may be busy. Intra-op threads that wait on a core someone else holds spin, and the whole step
waits for the slowest: on a 2-core machine at load 11–13, a 30-step ``tiny`` run (batch 32 ×
128/32 tokens) trained 5,210–7,594 tokens/s with one thread and 638–1,058 with two, using 7×
the CPU time. So the default is

    usable = affinity CPUs, capped by the cgroup quota (rounded up)
    free   = CPUs of the machine − the 1-minute load average (the runnable processes)
    threads = min(usable, max(1, round(free))), divided among the ranks of this machine

``--threads`` overrides it, and so does ``OMP_NUM_THREADS`` when set (torch already read it).
The thread count changes speed only: the tiny runs' losses are bitwise the same either way.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

CGROUP_V2 = "/sys/fs/cgroup/cpu.max"
CGROUP_V1 = ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    why: str  # how the number was chosen, for the start-up summary


def affinity_cpus() -> int:
    """CPUs this process may run on (its affinity mask; all CPUs where there is none)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cgroup_quota(v2: str = CGROUP_V2, v1: tuple[str, str] = CGROUP_V1) -> float | None:
    """The cgroup's CPU quota in CPUs (``cpu.max`` "200000 100000" → 2.0); None when
    unlimited or unreadable."""
    try:
        with open(v2, encoding="ascii") as f:
            quota, period = f.read().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        with open(v1[0], encoding="ascii") as f:
            quota_us = int(f.read().strip())
        with open(v1[1], encoding="ascii") as f:
            period_us = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return quota_us / period_us if quota_us > 0 and period_us > 0 else None


def usable_cpus(affinity: int | None = None, quota: float | None = None) -> int:
    """The affinity CPUs, capped by the quota (a 1.5-CPU quota still lets 2 threads run)."""
    cpus = affinity_cpus() if affinity is None else affinity
    if quota is not None:
        cpus = min(cpus, max(1, math.ceil(quota)))
    return max(1, cpus)


def load_average() -> float | None:
    """The 1-minute load average (runnable processes, machine-wide); None where unknown."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def default_threads(
    usable: int, machine_cpus: int, load: float | None, local_ranks: int = 1
) -> tuple[int, str]:
    """The default thread count and how it came about (see the module docstring)."""
    n, why = usable, f"{usable} usable CPU(s)"
    if load is not None:
        free = max(1, round(machine_cpus - load))
        if free < n:
            n, why = free, f"{why}, load {load:.1f} of {machine_cpus} leaves {free} free"
    if local_ranks > 1:
        n, why = max(1, n // local_ranks), f"{why}, shared by {local_ranks} ranks"
    return n, why


def choose_threads(requested: int | None) -> ThreadChoice:
    """``--threads``, else ``OMP_NUM_THREADS``'s (torch read it at import), else the default."""
    import torch

    if requested is not None:
        return ThreadChoice(requested, "--threads")
    if os.environ.get("OMP_NUM_THREADS"):
        return ThreadChoice(torch.get_num_threads(), "OMP_NUM_THREADS")
    quota = cgroup_quota()
    usable = usable_cpus(quota=quota)
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    n, why = default_threads(usable, os.cpu_count() or usable, load_average(), ranks)
    return ThreadChoice(n, why + (f", cgroup quota {quota:g}" if quota is not None else ""))


def set_threads(requested: int | None) -> ThreadChoice:
    """Choose and apply the intra-op thread count (call before the first torch op)."""
    import torch

    choice = choose_threads(requested)
    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)
    return choice
