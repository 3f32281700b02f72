"""Progress of a job's stages on the driver, for the engines that run them step by step (the
local engine's task pool, Spark's jobs): one display per stage, through ``c4forge.progress``
(a bar on a terminal, a plain line every ``C4FORGE_PROGRESS_SECONDS`` in a log).

Why per stage: a clean job's time goes to a few stages (the read with the page rules and
clean, the pass that runs langdetect, the span dedup), each a step or two of many tasks; a
display per stage says which one runs, how many of its tasks are done, its rate and ETA, and
(``pages``) how many pages the job has read so far. A stage's display is closed at 100 % when
the next stage starts or the job ends: the engine reports a stage only once it has finished
every task of it (the local engine counts them; a Spark action returned).

A ticker thread refreshes the open display every half second, so a log gets its periodic line
even while no task ends (a stage of one long task).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from c4forge.engines.base import stage_of

Counters = Callable[[], Mapping[str, Mapping[str, int]]]
# (tasks done, tasks) of the running step, engine-side; a third item, where given, names the
# part of it that runs now (Spark: the step its running stage computes)
Poll = Callable[[], tuple[Any, ...]]
TICK_S = 0.5


class ProgressPlan(NamedTuple):
    """What a job tells its engine about its stages: the job's name (the display's prefix),
    a title per stage (``{"pass1": "langid → badwords → split"}``), a unit per stage (the
    read's tasks are files; others ``task``), and the counter of pages read
    (``("wet", "pages")``), shown beside every stage."""

    job: str
    titles: Mapping[str, str] = {}
    units: Mapping[str, str] = {}
    pages: tuple[str, str] | None = None


class StageBars:
    """``with StageBars(plan, counters) as bars:`` then, per step, ``bars.begin(label, tasks)``
    and ``bars.advance()`` as its tasks end (local), or ``bars.begin(label, poll=f)`` with
    ``f() -> (done, total)`` read on each tick, and ``bars.end()`` once the step returned
    (Spark). Thread-safe: the ticker, the engine's thread and a pool's callbacks call it."""

    def __init__(self, plan: ProgressPlan, counters: Counters | None = None) -> None:
        self.plan = plan
        self.counters = counters
        self.lock = threading.RLock()
        self.stage: str | None = None
        self.title: str | None = None  # the open stage's title, where the engine gave one
        self.now: str | None = None  # what of the open stage runs now (a polled step's third item)
        self.bar: Any = None
        self.done = 0  # tasks of the open stage: finished, and known of (local)
        self.total = 0
        self.base = (0, 0)  # (done, total) of the stage's earlier steps (a polled stage)
        self.poll: Poll | None = None
        self.stages: list[str] = []  # in the order they ran (tests, the summary)
        self._stop = threading.Event()
        self._ticker = threading.Thread(target=self._tick, daemon=True)

    # -- the engine's side -------------------------------------------------------------------
    def begin(
        self, label: str, tasks: int = 0, poll: Poll | None = None, title: str | None = None
    ) -> None:
        """A step of ``label``'s stage starts with ``tasks`` tasks (or ``poll`` to read them);
        ``title``: what the display calls the stage, instead of the plan's title."""
        stage = stage_of(label)
        with self.lock:
            if stage != self.stage:
                self._close_stage()
                self._open_stage(stage, title)
            if self.poll is not None:  # the stage's previous polled step is over
                self.end()
            self.poll = poll
            if poll is None:
                self.total += tasks
            self._show()

    def advance(self, n: int = 1) -> None:
        with self.lock:
            self.done += n
            self._show()

    def end(self) -> None:
        """The running step returned: every task of it is done (a polled step's last figures
        may lag the engine's)."""
        with self.lock:
            if self.poll is not None:
                done, total, *_ = self.poll()
                total = max(total, done, 1)
                self.base = (self.base[0] + total, self.base[1] + total)
                self.poll = None
                self.done = self.total = 0
            else:
                self.done = self.total
            self._show()

    # -- the display -------------------------------------------------------------------------
    def _figures(self) -> tuple[int, int]:
        if self.poll is None:
            return self.base[0] + self.done, self.base[1] + self.total
        try:
            done, total, *now = self.poll()
        except Exception:  # a status call racing the engine's shutdown: keep the last figures
            done, total, now = 0, 0, []
        if now and now[0] and now[0] != self.now:
            self.now = now[0]
            self.bar.set_description(self._desc(self.stage, self.title), refresh=False)
        return self.base[0] + done, self.base[1] + max(total, done)

    def _desc(self, stage: str, title: str | None = None) -> str:
        title = title or self.plan.titles.get(stage)
        if self.now:
            title = f"{title}; running {self.now}" if title else f"running {self.now}"
        return f"{self.plan.job} {stage}" + (f" ({title})" if title else "")

    def _open_stage(self, stage: str, title: str | None = None) -> None:
        from c4forge.progress import progress

        self.stage = stage
        self.title = title
        self.now: str | None = None
        self.stages.append(stage)
        self.done = self.total = 0
        self.base = (0, 0)
        self.poll = None
        unit = self.plan.units.get(stage, "task")
        self.bar = progress(total=None, desc=self._desc(stage, title), unit=unit)

    def _close_stage(self) -> None:
        if self.bar is None:
            return
        if self.poll is not None:
            self.end()
        else:
            self.done = self.total
        self._show()
        self.bar.close()
        self.bar = None
        self.stage = None

    def _pages(self) -> int | None:
        if self.plan.pages is None or self.counters is None:
            return None
        stage, reason = self.plan.pages
        try:
            return int(self.counters().get(stage, {}).get(reason, 0))
        except RuntimeError:  # a dict resized while read (a pool callback merging counters)
            return None

    def _show(self, redraw: bool = False) -> None:
        """The figures into the display; ``redraw`` (the ticker): tqdm redraws elapsed and ETA
        now (on each task it redraws at its own pace)."""
        bar = self.bar
        if bar is None:
            return
        done, total = self._figures()
        if total and bar.total != total:
            bar.total = total
        pages = self._pages()
        if pages is not None:
            bar.set_postfix(pages=f"{pages:,}", refresh=False)
        bar.update(done - bar.n)  # a line in a log when the period has passed, even for 0
        refresh = getattr(bar, "refresh", None)
        if redraw and refresh is not None and getattr(bar, "disable", True) is False:
            refresh()  # tqdm: elapsed and ETA move while no task ends

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self.lock:
                self._show(redraw=True)

    # -- lifetime ----------------------------------------------------------------------------
    def __enter__(self) -> StageBars:
        self._ticker.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: Any) -> None:
        self._stop.set()
        self._ticker.join()
        with self.lock:
            if kind is None:
                self._close_stage()  # the job ended: its last stage is complete
            elif self.bar is not None:
                self.bar.close()  # failed: the figures stay where the work stopped
                self.bar = None
