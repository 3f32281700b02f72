"""How many torch threads a CPU run uses: the CPUs this process may use.

torch's default is every CPU it sees, which in a container is wrong: the CPUs may not all be
this process's (its affinity mask, a cgroup CPU quota). So the default is

    usable  = affinity CPUs, capped by the cgroup quota (rounded up)
    threads = min(usable, torch's own default), divided among the ranks of this machine
              (torchrun's LOCAL_WORLD_SIZE)

torch's own default (its count of physical cores where it can tell) stays the cap, so where no
affinity or quota limits the process a run keeps the thread count, and so the bytes, it had.

``--threads`` overrides it, and so does ``OMP_NUM_THREADS`` when set (torch already read it).

The load is not part of the choice: the thread count changes how reductions are split (1 and
2 threads give different checkpoint bytes), so a default that followed the load would make a
run's bytes depend on what else the machine was doing. Busy CPUs hurt only with spinning
OpenMP waits, so ``c4forge``'s entry point sets ``OMP_WAIT_POLICY=PASSIVE``
(``cli.passive_openmp_waits``) and warns only a user who forces ``ACTIVE`` (measurements:
benchmarks/RESULTS.md, "Torch threads on a loaded machine").
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


def default_threads(usable: int, local_ranks: int = 1) -> int:
    """The usable CPUs, shared among this machine's ranks."""
    return max(1, usable // max(1, local_ranks))


def load_average() -> float | None:
    """The 1-minute load average (runnable processes, machine-wide); None where unknown."""
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):
        return None


def wait_policy() -> str:
    """libgomp's wait policy as this process was started with (the CLI sets PASSIVE)."""
    return (os.environ.get("OMP_WAIT_POLICY") or "default (spinning)").upper()


def load_warning(
    threads: int, machine_cpus: int, load: float | None, policy: str = "DEFAULT"
) -> str | None:
    """A warning when the load leaves fewer free CPUs than the run has threads and its
    OpenMP threads spin while they wait (None else)."""
    if load is None or threads < 2 or policy == "PASSIVE":
        return None
    free = max(1, round(machine_cpus - load))
    if free >= threads:
        return None
    return (
        f"warning: load {load:.1f} on {machine_cpus} CPUs leaves about {free} free for "
        f"{threads} torch threads whose OpenMP waits spin (OMP_WAIT_POLICY={policy}): each step "
        f"waits for the busiest (on a loaded 2-core machine 2 threads ran 6× slower than 1); "
        f"OMP_WAIT_POLICY=PASSIVE or --threads {free} may be faster (the thread count changes "
        "the weights' last bits, so it is not chosen from the load)"
    )


_TORCH_DEFAULT: list[int] = []  # torch's thread count before this module first changed it


def torch_default_threads() -> int:
    """torch's own default thread count (read once, before ``set_threads`` changes it)."""
    import torch

    if not _TORCH_DEFAULT:
        _TORCH_DEFAULT.append(torch.get_num_threads())
    return _TORCH_DEFAULT[0]


def choose_threads(requested: int | None) -> ThreadChoice:
    """``--threads``, else ``OMP_NUM_THREADS``'s (torch read it at import), else the default."""
    import torch

    if requested is not None:
        return ThreadChoice(requested, "--threads")
    if os.environ.get("OMP_NUM_THREADS"):
        return ThreadChoice(torch.get_num_threads(), "OMP_NUM_THREADS")
    quota = cgroup_quota()
    usable = usable_cpus(quota=quota)
    why = f"{usable} usable CPU{'s' if usable > 1 else ''}"
    if quota is not None:
        why += f", cgroup quota {quota:g}"
    if torch_default_threads() < usable:
        usable = torch_default_threads()
        why += f", torch's default {usable}"
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    if ranks > 1:
        why += f", shared by {ranks} ranks"
    return ThreadChoice(default_threads(usable, ranks), why)


def set_threads(requested: int | None) -> ThreadChoice:
    """Choose and apply the intra-op thread count (call before the first torch op)."""
    import torch

    torch_default_threads()  # remember torch's own before the first change
    choice = choose_threads(requested)
    if torch.get_num_threads() != choice.threads:
        torch.set_num_threads(choice.threads)
    return choice
