"""Progress of a Beam job per stage (``c4forge.progress``), for jobs whose workers run on
this machine (the DirectRunner/FnApiRunner).

Why files: Beam gives the driver no live metrics on the local FnApiRunner (counters arrive
when the pipeline ends), and the workers are other processes. So each step's DoFn counts the
elements it processed and, once a second at most and when its bundle finishes, drops a tally
(``write_tally``: its step label, the elements since its last tally, and the pages-read
counter's increase) into a temporary folder; ``StepTallies`` on the driver sums them per
stage (``engines.base.stage_of``, the names the local engine's displays use) and shows one
display per stage, titled from the job's ``ProgressPlan``, with the pages read so far.

What a stage's figures are: the elements processed by its first step (the read: its input
chunks, unit from ``ProgressPlan.units``; a group: its keys; a map: its items). A total, so a
% and an ETA, is known where that step is a ``source`` (the read; the chunk list). Elsewhere
the driver cannot know one before the shuffle in front of the step ends, and the pages read
would be a false one (the clean sample's 1,861 pages give 1,855 URL-dedup keys, 23,088 dedup
keys and 3 chunks per pass), so the display shows count, elapsed and rate. A display opens
when a step of its stage starts (its first bundle's tally), writes its periodic line while one
runs or its figures move, and closes at 100 % once a step behind a shuffle of it (or reading
it as a side input) starts: a batch runner starts such a step only when its input is whole
(``BeamEngine._follows`` records that lineage). At the pipeline's end every display left is
closed at 100 %, after a last read of the tallies. Stages fused by the runner run at once, so
their displays can be open together (tqdm stacks them on a terminal). Bundles alone would
tick too coarsely: the FnApiRunner splits a fused stage's input into one bundle per worker.

On remote runners (Dataflow, Flink, Spark) the runner's own UI shows progress and the
displays are off.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from c4forge.engines.base import stage_of
from c4forge.io import tempdirs

TALLY_EVERY_S = 1.0  # a DoFn's tallies while a bundle runs: at most one per this many seconds
POLL_S = 0.5  # the driver reads the new tallies this often
UNIT = "item"  # a stage's unit where the plan names none (elements, not the local engine's tasks)


def write_tally(
    directory: str,
    label: str,
    items: int,
    pages: int,
    started: bool = False,
    finished: bool = False,
) -> None:
    """One tally into ``directory``: a uniquely named small JSON file, renamed into place so
    the driver never reads half of one (it skips the dot-names being written); ``started`` /
    ``finished``: a bundle of the step starts (its first element) or ends here."""
    name = uuid.uuid4().hex
    tmp = os.path.join(directory, f".{name}")
    tally = {"label": label, "items": items, "pages": pages}
    tally.update(started=int(started), finished=int(finished))
    try:
        with open(tmp, "w") as f:
            json.dump(tally, f)
        os.replace(tmp, os.path.join(directory, name))
    except OSError:  # a full temp disk: the display lags (and ends at 100 %); the job goes on
        pass


def stage_of_step(label: str) -> str:
    """The stage of a Beam step label (``dedup/resolve#2``: a second job's step of ``dedup``)."""
    return stage_of(re.sub(r"#\d+$", "", label))


class StepTallies:
    """``with StepTallies(plan, steps, totals, enabled=…) as t:`` then the DoFns write into
    ``t.directory``; ``steps`` (the engine's DoFn step labels, in the order built) and
    ``totals`` (``{step label: elements}`` where known) are read live, as the engine builds
    the pipeline inside the ``with``."""

    def __init__(
        self,
        plan: Any,
        steps: Sequence[str],
        totals: Mapping[str, int],
        finished_before: Mapping[str, frozenset[str]] | None = None,
        *,
        enabled: bool,
        interval: float = POLL_S,
    ) -> None:
        self.plan = plan
        self.steps = steps
        self.totals = totals
        self.finished_before = finished_before if finished_before is not None else {}
        self.enabled = enabled
        self.interval = interval
        self.directory: str | None = None
        self.items: dict[str, int] = {}  # step label → elements tallied
        self.running: dict[str, int] = {}  # step label → its bundles started, not finished
        self.pages = 0
        self.bars: dict[str, Any] = {}  # stage → its display, in the order the stages showed
        self.closed: set[str] = set()
        self.now: dict[str, str | None] = {}  # stage → the step of it named as running
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the tallies ------------------------------------------------------------------------
    def _read(self) -> None:
        """Add the tallies written since the last read."""
        assert self.directory is not None
        for name in sorted(os.listdir(self.directory)):
            if name.startswith(".") or name in self._seen:
                continue
            try:
                with open(os.path.join(self.directory, name)) as f:
                    tally = json.load(f)
            except (OSError, ValueError):
                continue  # not a tally of ours: read none of it
            self._seen.add(name)
            label = str(tally["label"])
            self.items[label] = self.items.get(label, 0) + int(tally["items"])
            self.pages += int(tally["pages"])
            open_now = int(tally["started"]) - int(tally["finished"])
            self.running[label] = self.running.get(label, 0) + open_now

    def _stages(self) -> dict[str, list[str]]:
        """``{stage: its steps}`` in the order built; a display counts the first one's
        elements (the same step all along: a stage's later steps count other things)."""
        steps: dict[str, list[str]] = {}
        for label in list(self.steps):
            steps.setdefault(stage_of_step(label), []).append(label)
        return steps

    # -- the displays -----------------------------------------------------------------------
    def _desc(self, stage: str, now: str | None) -> str:
        title = self.plan.titles.get(stage)
        if now:
            title = f"{title}; running {now}" if title else f"running {now}"
        return f"{self.plan.job} {stage}" + (f" ({title})" if title else "")

    def _show(self, final: bool = False) -> None:
        """The figures into the displays; ``final`` (the pipeline completed): each at 100 %.
        A display opens when a step of its stage starts; it writes its periodic line (and
        tqdm redraws elapsed and rate) while a step of it runs or its figures move, so a
        stage waiting on another is not repeated in a log."""
        from c4forge.progress import progress

        finished: set[str] = set()  # the steps a started step says are done
        for label in list(self.running):
            finished.update(self.finished_before.get(label, ()))
        for stage, labels in self._stages().items():
            if stage in self.closed or not any(lbl in self.running for lbl in labels):
                continue  # done, or not started
            complete = final or all(lbl in finished for lbl in labels)
            label = labels[0]
            done = self.items.get(label, 0)
            total = self.totals.get(label)
            running = [lbl for lbl in labels if self.running.get(lbl, 0) > 0]
            now = running[-1] if running and running[-1] != label else None
            bar = self.bars.get(stage)
            if bar is None:
                unit = self.plan.units.get(stage, UNIT)
                desc = self._desc(stage, now)
                # what it did before this display opened (a stage begun and done between
                # two reads) is no part of its rate: a rate of what it saw, or none
                bar = progress(total=total, desc=desc, unit=unit, initial=done)
                self.bars[stage] = bar
                self.now[stage] = now
            elif now != self.now.get(stage) and not complete:
                self.now[stage] = now
                bar.set_description(self._desc(stage, now), refresh=False)
            if complete:  # every element of every step of it was processed
                done = max(done, total or 0)
                total = done
            if total is not None and bar.total != total:
                bar.total = total
            if self.plan.pages is not None:
                bar.set_postfix(pages=f"{self.pages:,}", refresh=False)
            if running or done != bar.n or complete:
                bar.update(done - bar.n)  # a line in a log when the period has passed
                if not complete and getattr(bar, "disable", True) is False:
                    bar.refresh()  # tqdm: elapsed and rate move while no tally arrives
            if complete or (total is not None and done >= total):
                bar.close()  # at 100 %: a source's every item, or the stage, is done
                self.closed.add(stage)

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            with self._lock:
                self._read()
                self._show()

    # -- lifetime ---------------------------------------------------------------------------
    def __enter__(self) -> StepTallies:
        if not self.enabled:
            return self
        self.directory = tempdirs.make("c4forge-progress-")
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if not self.enabled:
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            self._read()  # the pipeline ran: the tallies of its last second
            self._show(final=exc_type is None)
            for bar in self.bars.values():
                bar.close()  # failed: the figures stay where the work stopped
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
