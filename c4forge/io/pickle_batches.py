"""Files of pickled batches: the clean stage's sorted runs and the local engine's spill files.

A file is a sequence of ``pickle`` records, each a list of items, so a reader holds one batch,
never the file. Written and read back by the same c4forge run: an intermediate format, never
an output (pickle is the fastest round trip for the Python tuples and dicts these files hold).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterable, Iterator
from typing import IO, Any

from c4forge.errors import VerificationError
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
    """The items of ``path`` (any storage path), in order, a record at a time.

    The file ends only where a record ends: a file cut inside a record, or bytes that do not
    unpickle, is a ``VerificationError`` naming it, never a shorter list read as complete."""
    for batch in read_records(path):
        yield from batch


def read_records(path: str) -> Iterator[list[Any]]:
    """The records (lists of items) of ``path``, in order: what ``read_batches`` yields item
    by item, for a reader that loops over a whole batch itself (the local engine's tasks)."""
    with storage.open_read(path) as raw:
        f = raw if hasattr(raw, "peek") else io.BufferedReader(raw)
        while f.peek(1):
            try:
                batch = pickle.load(f)
            except OSError:
                raise
            except Exception as err:  # noqa: BLE001 - anything pickle raises on damaged bytes
                raise VerificationError(
                    f"{path} is damaged ({type(err).__name__}: {err}); if this run was "
                    "resumed, run again without --resume"
                ) from None
            yield batch
