"""Files of pickled batches: the clean stage's sorted runs and the local engine's spill files.

A file is a sequence of ``pickle`` records, each a list of items, so a reader holds one batch,
never the file. Written and read back by the same c4forge run: an intermediate format, never
an output (pickle is the fastest round trip for the Python tuples and dicts these files hold).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from typing import IO, Any

from c4forge.io import storage


def dump_batches(
    f: IO[bytes], items: Iterable[Any], batch_size: int, protocol: int = pickle.HIGHEST_PROTOCOL
) -> int:
    """``items`` → ``f`` as pickle records of ``batch_size`` items; returns the count."""
    n = 0
    batch: list[Any] = []
    for item in items:
        batch.append(item)
        if len(batch) >= batch_size:
            pickle.dump(batch, f, protocol=protocol)
            n, batch = n + len(batch), []
    if batch:
        pickle.dump(batch, f, protocol=protocol)
        n += len(batch)
    return n


def read_batches(path: str) -> Iterator[Any]:
    """The items of ``path`` (any storage path), in order, a record at a time."""
    with storage.open_read(path) as f:
        while True:
            try:
                batch = pickle.load(f)
            except EOFError:
                return
            yield from batch
