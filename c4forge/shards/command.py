"""``run(request) -> result``: `c4forge shards` and `c4forge shards task` for a program
(``c4forge.commands``). ``shards verify`` checks a set and writes nothing: it has no request.

A shard build prints its own summary as it goes (unless ``--quiet``), so its result's
``text()`` is empty; a task's set is summarised by its result (the command line prints it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, overload

from c4forge.shards.job import ShardsJob
from c4forge.shards.tasks import TaskShardsRequest

REQUESTS = (ShardsJob, TaskShardsRequest)


@dataclass(frozen=True)
class ShardsResult:
    """A finished shard set: its folder and index.json's content."""

    output: str
    index: dict[str, Any]

    @property
    def rows(self) -> dict[str, int]:
        """Rows written per split."""
        return {split: block["rows"] for split, block in self.index["splits"].items()}

    def text(self) -> str:
        return ""

    def fingerprint(self) -> str:
        """index.json's ``dataset_fingerprint``: the inputs, vocabulary and options built."""
        return str(self.index["dataset_fingerprint"])


@dataclass(frozen=True)
class TaskShardsResult(ShardsResult):
    """A task's shard set, with what the summary says: the build's seconds and the inputs or
    targets cut to the row lengths (``truncated``: one line per side, said even when quiet)."""

    seconds: float = 0.0
    truncated: tuple[str, ...] = field(default=())

    def text(self) -> str:
        from c4forge.shards.report import summary_lines

        lines = summary_lines(self.index, self.output, self.seconds, "local")
        return "\n".join([*lines, *(f"  {line}" for line in self.truncated)])


@overload
def run(request: ShardsJob) -> ShardsResult: ...
@overload
def run(request: TaskShardsRequest) -> TaskShardsResult: ...
def run(request: ShardsJob | TaskShardsRequest) -> ShardsResult:
    """Build (or finish) the shard set ``request`` asks for; raises on failure."""
    if isinstance(request, TaskShardsRequest):
        return _task(request)
    from c4forge.shards.driver import run_job

    return ShardsResult(request.output, run_job(request))


def _task(req: TaskShardsRequest) -> TaskShardsResult:
    """A task's set, built while holding its folder."""
    from c4forge.io import ownership
    from c4forge.shards.tasks import build_task_shards, truncation_lines

    start = time.perf_counter()
    longest: dict[str, dict[str, int]] = {}
    with ownership.owned_output(req.output, "shards task"):
        index = build_task_shards(req, longest)
    seconds = time.perf_counter() - start
    return TaskShardsResult(
        req.output, index, seconds=seconds, truncated=tuple(truncation_lines(index, longest))
    )
