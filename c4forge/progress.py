"""Progress for long work: a tqdm bar on a terminal, plain periodic lines everywhere else.

Why: off a terminal (CI, ``nohup``, a worker's log, the demo piped to a file) a tqdm bar writes
its carriage-return frames into the log, hundreds per stage. There, ``progress`` writes one
plain line every ``C4FORGE_PROGRESS_SECONDS`` seconds (default 15; ``0`` = every update) and a
last one when the work ends, with the bar's figures: done/total, percentage, elapsed<ETA, rate
and the postfix (e.g. the loss). Every progress display of c4forge goes through here.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

from c4forge.errors import ConfigError

EVERY_ENV = "C4FORGE_PROGRESS_SECONDS"
DEFAULT_EVERY_S = 15.0
# The bar's figures without the bar: "train: 40/100 step (40%) [00:10<00:15, 3.88step/s, loss=3.2]".
LINE_FORMAT = "{desc}: {n_fmt}/{total_fmt} {unit} ({percentage:.0f}%) [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
LINE_FORMAT_NO_TOTAL = "{desc}: {n_fmt} {unit} [{elapsed}, {rate_fmt}{postfix}]"


def line_every_seconds() -> float:
    """The interval of the plain lines (``C4FORGE_PROGRESS_SECONDS``; a bad value is an error)."""
    raw = os.environ.get(EVERY_ENV, "").strip()
    if not raw:
        return DEFAULT_EVERY_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also rejects nan
        raise ConfigError(f"{EVERY_ENV}={raw!r}: give a number of seconds >= 0 (default 15)")
    return value


def is_terminal(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


class LineProgress:
    """tqdm's interface as c4forge uses it (``update``, ``set_postfix``, ``set_description``,
    ``n``, iteration, ``close``, a context manager), printed as plain periodic lines."""

    def __init__(
        self,
        iterable: Iterable[Any] | None = None,
        *,
        total: float | None = None,
        desc: str = "",
        unit: str = "it",
        initial: float = 0,
        leave: bool = True,
        file: IO[str] | None = None,
        every: float | None = None,
    ) -> None:
        if total is None and iterable is not None and hasattr(iterable, "__len__"):
            total = len(iterable)  # type: ignore[arg-type]
        self.iterable = iterable
        self.total = total
        self.desc = desc
        self.unit = unit.strip() or "it"
        self.n = initial
        self.initial = initial
        self.leave = leave
        self.file = file if file is not None else sys.stderr
        self.every = line_every_seconds() if every is None else every
        self.postfix = ""
        self.start = time.monotonic()
        self.last_line = self.start
        self.lines = 0
        self.written_n: float | None = None
        self.written_total: float | None = None
        self.closed = False

    # -- tqdm's interface -------------------------------------------------------------------
    def update(self, n: float = 1) -> None:
        self.n += n
        now = time.monotonic()
        if now - self.last_line >= self.every:
            self._write(now)

    def set_postfix(
        self, ordered_dict: dict | None = None, refresh: bool = True, **kw: Any
    ) -> None:
        items = {**(ordered_dict or {}), **kw}
        self.postfix = ", ".join(f"{k}={v}" for k, v in items.items())

    def set_description(self, desc: str | None = None, refresh: bool = True) -> None:
        self.desc = desc or ""

    def write(self, text: str) -> None:
        """A message between the progress lines (tqdm's ``bar.write``)."""
        print(text, file=self.file, flush=True)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        # the last line: unless the last one written already shows these figures (a total
        # learnt at the end, as a Beam stage's, is a change of figures too)
        changed = self.written_n != self.n or self.written_total != self.total
        if (self.leave or self.lines) and changed:
            self._write(time.monotonic())

    def __iter__(self) -> Iterator[Any]:
        for item in self.iterable or ():
            yield item
            self.update(1)
        self.close()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- the line ---------------------------------------------------------------------------
    def format_line(self, now: float) -> str:
        from tqdm import tqdm

        elapsed = now - self.start
        done = self.n - self.initial
        rate = done / elapsed if elapsed > 0 and done > 0 else None
        return tqdm.format_meter(
            self.n,
            self.total,
            elapsed,
            prefix=self.desc,
            unit=self.unit,
            rate=rate,
            initial=self.initial,
            postfix=self.postfix or None,
            bar_format=LINE_FORMAT if self.total else LINE_FORMAT_NO_TOTAL,
        )

    def _write(self, now: float) -> None:
        self.last_line = now
        self.lines += 1
        self.written_n = self.n
        self.written_total = self.total
        print(self.format_line(now), file=self.file, flush=True)


def progress(
    iterable: Iterable[Any] | None = None,
    *,
    total: float | None = None,
    desc: str = "",
    unit: str = "it",
    initial: float = 0,
    disable: bool = False,
    leave: bool = True,
    file: IO[str] | None = None,
) -> Any:
    """A progress display on ``file`` (default stderr): a tqdm bar on a terminal, a
    ``LineProgress`` elsewhere, a silent one when ``disable``. Use it as tqdm."""
    stream = file if file is not None else sys.stderr
    if not disable and is_terminal(stream):
        from tqdm import tqdm

        return tqdm(
            iterable,
            total=total,
            desc=desc,
            unit=unit,
            initial=initial,
            leave=leave,
            file=stream,
            dynamic_ncols=True,
        )
    if disable:
        from tqdm import tqdm

        return tqdm(iterable, total=total, initial=initial, disable=True)
    return LineProgress(
        iterable, total=total, desc=desc, unit=unit, initial=initial, leave=leave, file=stream
    )
