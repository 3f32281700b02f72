"""The process tree of a running command, read from /proc: what a benchmark (and ``clean
--estimate``) samples while it runs.

Peak memory in this project means the PSS of the whole process tree (``smaps_rollup``: threads
share their process's mappings, so they are counted once; pages shared between forked workers
are split between them, not counted twice), and CPU the sum of each process's utime + stime.
Linux only (``available()``): elsewhere a caller falls back to ``ru_maxrss``.
"""

from __future__ import annotations

import os
import threading
from types import TracebackType


def available() -> bool:
    return os.path.exists(f"/proc/{os.getpid()}/smaps_rollup")


def available_memory() -> int | None:
    """MemAvailable of this machine in bytes (None where /proc/meminfo is absent): what a job
    may use before the kernel must reclaim or kill."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def tree(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def pss(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return 0
    return 0


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float | None:
    """utime + stime of one process (its threads included), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK


class PeakSampler:
    """``with PeakSampler(pid) as s: …`` → ``s.peak``: the largest PSS sum of the tree under
    ``pid`` over samples every ``interval`` seconds (a sampler can miss a spike shorter than
    that)."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid, self.interval, self.peak = pid, interval, 0
        self.root_at_peak = 0  # the PSS of ``pid`` itself (a driver's share) at the peak sample
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            by_pid = {p: pss(p) for p in tree(self.pid)}
            total = sum(by_pid.values())
            if total > self.peak:
                self.peak, self.root_at_peak = total, by_pid.get(self.pid, 0)
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        self._thread.join()
