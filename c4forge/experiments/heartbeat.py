"""A running stage's periodic line in `c4forge experiment`'s stage list.

Why: a stage writes its own output into its log (``stages/<name>/log.txt``), so between
``[4/13] pretrain …: running`` and ``done in 55.0 s`` the terminal said nothing. While a stage
runs, this prints one line every ``C4FORGE_PROGRESS_SECONDS`` (default 15 s): the elapsed time
and, for the training stages, the last step the stage logged (its ``metrics.jsonl``) out of its
steps.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from typing import Any

# 0 means "every update" for a progress bar; a heartbeat has no updates, so it ticks each second.
_LEAST_PERIOD_S = 1.0


def last_step(folder: str) -> int | None:
    """The step of the last line of ``folder/metrics.jsonl`` (None: no such line yet)."""
    path = os.path.join(folder, "metrics.jsonl")
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = f.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            step = json.loads(line).get("step")
        except (ValueError, AttributeError):
            continue  # a line being written, or the cut first line of the tail
        if isinstance(step, int):
            return step
    return None


def heartbeat_line(head: str, elapsed: float, folder: str, steps: Any) -> str:
    """``[4/13] pretrain …: still running, 45 s elapsed, step 120/500`` (not ``: running``, the
    stage-start line that tools count)."""
    text = f"{head}: still running, {elapsed:,.0f} s elapsed"
    step = last_step(folder)
    if step is not None:
        text += f", step {step:,}" + (f"/{steps:,}" if isinstance(steps, int) and steps else "")
    return text


class StageHeartbeat:
    """A thread that ``say``s ``heartbeat_line`` every ``period`` seconds until the stage ends."""

    def __init__(
        self, head: str, folder: str, steps: Any, say: Callable[[str], None], period: float
    ) -> None:
        self.head, self.folder, self.steps, self.say = head, folder, steps, say
        self.period = max(_LEAST_PERIOD_S, period)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.perf_counter()
        while not self.stop.wait(self.period):
            elapsed = time.perf_counter() - start
            self.say(heartbeat_line(self.head, elapsed, self.folder, self.steps))

    def __enter__(self) -> StageHeartbeat:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join()
