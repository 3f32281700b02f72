"""Write-behind: bytes produced on one thread, consumed (compressed, hashed, written) on another.

Why: writing a clean shard is a serial step — one process merges its runs, makes JSON lines,
then hashes, deflates and writes them. Deflate, CRC-32 and sha256 release the GIL on large
buffers, so handing the lines over in 1 MiB blocks lets a second core do that half while the
first merges: on a corpus with one train shard this step is the run's serial tail. The
consumer sees the same bytes in the same order (gzip's output does not depend on how its
input is split into writes), so the files are byte-identical.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

BLOCK = 1 << 20  # bytes per hand-over
DEPTH = 4  # blocks in flight: bounds the memory to a few MiB


class WriteBehind:
    """``write(b)`` collects bytes; ``consume`` gets them in blocks of ≥ ``block`` bytes, in
    order, on a background thread. ``close()`` (or leaving the ``with`` block) hands over the
    rest and waits; an error raised by ``consume`` is raised again in the writing thread."""

    def __init__(self, consume: Callable[[bytes], Any], block: int = BLOCK) -> None:
        self._consume = consume
        self._block = block
        self._parts: list[bytes] = []
        self._size = 0
        self._queue: queue.Queue[bytes | None] = queue.Queue(DEPTH)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="write-behind", daemon=True)
        self._thread.start()

    def write(self, b: bytes) -> None:
        self._parts.append(b)
        self._size += len(b)
        if self._size >= self._block:
            self._hand_over()

    def _hand_over(self) -> None:
        if self._parts:
            block = b"".join(self._parts)
            self._parts, self._size = [], 0
            self._put(block)

    def _put(self, item: bytes | None) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(item)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if self._error is None:
                try:
                    self._consume(item)
                except BaseException as err:  # noqa: BLE001 - raised again in the writer
                    self._error = err  # then keep draining, so the writer never blocks

    def close(self) -> None:
        """Hand over the rest, wait for the consumer; raise its error if it had one."""
        try:
            self._hand_over()
        finally:
            self._queue.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error

    def abandon(self) -> None:
        """Stop without handing over the rest (the writer failed)."""
        self._parts = []
        self._queue.put(None)
        self._thread.join()

    def __enter__(self) -> WriteBehind:
        return self

    def __exit__(self, typ: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            self.close()
        else:
            self.abandon()
