"""A progress display (``c4forge.progress``) of input files read, for Beam jobs whose workers run on this machine.

Beam gives the driver no live metrics on the local FnApiRunner (counters arrive when the
pipeline ends), and the workers are other processes. So the reading DoFn drops an empty marker
file per finished input into a temporary folder, and a driver thread counts them. The job's
later steps follow the read, which the bar says once every file is read (its ``titles``, from
the job's ``ProgressPlan.read_titles``). On remote runners
(Dataflow, Flink, Spark) the runner's own UI shows progress and the bar is off.
"""

from __future__ import annotations

import os
import shutil
import threading
from types import TracebackType

from c4forge.io import tempdirs


class FileProgress:
    """``titles``: what the bar says while the files are read, and once they all are (the job
    names its steps: the engine knows none)."""

    def __init__(
        self,
        total: int,
        *,
        enabled: bool,
        interval: float = 0.5,
        titles: tuple[str, str] = ("reading", "read"),
    ) -> None:
        self.total = total
        self.titles = titles
        self.enabled = enabled
        self.interval = interval
        self.directory: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar = None
        self._done_reading = False

    def __enter__(self) -> FileProgress:
        if not self.enabled:
            return self
        from c4forge.progress import progress

        self.directory = tempdirs.make("c4forge-progress-")
        # A bar on a terminal, periodic plain lines in a log.
        self._bar = progress(total=self.total, unit="file", desc=self.titles[0])
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self._count()

    def _count(self) -> None:
        n = len(os.listdir(self.directory)) if self.directory else 0
        self._bar.update(n - self._bar.n)
        if n >= self.total and not self._done_reading:
            self._done_reading = True
            self._bar.set_description(self.titles[1])

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
        if self._bar is not None:
            if exc_type is None:  # the pipeline ran: count the markers once more (a run
                self._count()  # shorter than one polling period would end below 100 %)
            self._bar.close()
        if self.directory:
            shutil.rmtree(self.directory, ignore_errors=True)
