"""Sorted runs of rows on storage, and their merge into one shard's record batches.

Why: a shard is sorted by (key, order) over every row it receives, from every clean shard. A
worker that groups the rows of a shard holds the whole shard (453 MB of rows cost ≈ 3.9 GB of
process tree at 400,000 pages). Instead the worker that builds the rows of one clean shard
writes each block of rows, split by output shard and sorted, as one *segment* of a run file
per output shard; only the run paths cross a shuffle; the shard's writer merges the segments
of its runs, reading each a few rows at a time. A worker holds one block (≤ ``CHUNK_EXAMPLES``
rows) while building, and one ``READ_ROWS`` slice per segment while merging.

A run is an Arrow IPC file (random access to its batches): the shard's columns plus
``_key``, ``_order`` and ``_segment``; batches of at most ``READ_ROWS`` rows, never
spanning two segments. Written atomically, with the same bytes when a retried task writes it
again (no timestamps, rows in sort order).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from c4forge.formats import shards as fmt
from c4forge.io import storage

READ_ROWS = 1024  # rows per batch of a run file: what a merge holds per segment
KEY, ORDER, SEGMENT = "_key", "_order", "_segment"  # _segment: for a reader's checks


def run_schema(spec: Sequence[Mapping[str, Any]]) -> pa.Schema:
    """The shard's columns (no metadata) plus the sort key, tie-breaker and segment number."""
    base = fmt.arrow_schema(spec, {})
    fields = [pa.field(f.name, f.type) for f in base]
    fields += [
        pa.field(KEY, pa.uint64()),
        pa.field(ORDER, pa.uint64()),
        pa.field(SEGMENT, pa.uint32()),
    ]
    return pa.schema(fields)


def sort_block(keys: np.ndarray, order: np.ndarray, columns: Mapping[str, np.ndarray]) -> tuple:
    """``(keys, order, columns)`` sorted by (key, order): one sorted segment."""
    perm = np.lexsort((order, keys))
    return keys[perm], order[perm], {k: v[perm] for k, v in columns.items()}


class RunWriter:
    """Appends sorted segments to one run file (atomic: the file appears on ``close``)."""

    def __init__(self, path: str, spec: Sequence[Mapping[str, Any]]) -> None:
        self.path = path
        self.spec = spec
        self.schema = run_schema(spec)
        self._cm = storage.atomic_writer(path)
        raw = self._cm.__enter__()
        self._writer = pa.ipc.new_file(pa.PythonFile(raw, mode="w"), self.schema)
        self.segments: list[int] = []  # batches per segment (what the merge needs to open it)
        self.rows = 0

    def add_segment(self, keys: np.ndarray, order: np.ndarray, columns: Mapping[str, Any]) -> None:
        """One segment: rows already sorted by (key, order)."""
        n = len(keys)
        segment = len(self.segments)
        self.segments.append(-(-n // READ_ROWS))
        for lo in range(0, n, READ_ROWS):
            hi = min(n, lo + READ_ROWS)
            arrays = [
                fmt.arrow_array(columns[e["name"]][lo:hi], e, f.type)
                for e, f in zip(self.spec, self.schema, strict=False)
            ]
            arrays += [
                fmt.plain_array(keys[lo:hi], pa.uint64()),
                fmt.plain_array(order[lo:hi], pa.uint64()),
                fmt.plain_array(np.full(hi - lo, segment, np.uint32), pa.uint32()),
            ]
            self._writer.write_batch(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
        self.rows += n

    def close(self, exc: BaseException | None = None) -> None:
        self._writer.close()
        if exc is None:
            self._cm.__exit__(None, None, None)
        else:
            self._cm.__exit__(type(exc), exc, exc.__traceback__)


class RunSet:
    """Run writers opened on first use, by key; ``with``: all closed (atomically published
    when the block ends normally, abandoned when it raises)."""

    def __init__(self, spec: Sequence[Mapping[str, Any]]) -> None:
        self.spec = spec
        self.writers: dict[Any, RunWriter] = {}

    def get(self, key: Any, path: str) -> RunWriter:
        w = self.writers.get(key)
        if w is None:
            w = self.writers[key] = RunWriter(path, self.spec)
        return w

    @property
    def rows(self) -> int:
        return sum(w.rows for w in self.writers.values())

    def __enter__(self) -> RunSet:
        return self

    def __exit__(self, typ: Any, exc: BaseException | None, tb: Any) -> None:
        for w in self.writers.values():
            w.close(exc)


class _Cursor:
    """One segment of a run being merged: its current batch as numpy, and a read position."""

    def __init__(self, reader: Any, batches: list[int], spec: Sequence[Mapping[str, Any]]) -> None:
        self.reader = reader
        self.batches = batches  # indexes of this segment's batches in the run file
        self.spec = spec
        self.next = 0
        self.keys = self.order = np.zeros(0, np.uint64)
        self.columns: dict[str, np.ndarray] = {}
        self.load()

    def load(self) -> bool:
        """The next batch of the segment; False when the segment is done."""
        while self.next < len(self.batches):
            batch = self.reader.get_batch(self.batches[self.next])
            self.next += 1
            if batch.num_rows:
                self.keys = fmt.numpy_view(batch.column(KEY), np.uint64)
                self.order = fmt.numpy_view(batch.column(ORDER), np.uint64)
                self.columns = {e["name"]: fmt.column_numpy(batch, e) for e in self.spec}
                return True
        self.keys = self.order = np.zeros(0, np.uint64)
        self.columns = {}
        return False

    def take_upto(self, key: np.uint64, order: np.uint64) -> tuple | None:
        """Rows ≤ (key, order) from the front of the batch (removed from it)."""
        n = int(np.searchsorted(self.keys, key, side="left"))
        same = self.keys[n:] == key
        n += int(np.count_nonzero(same & (self.order[n:] <= order)))
        if n == 0:
            return None
        out = (self.keys[:n], self.order[:n], {k: v[:n] for k, v in self.columns.items()})
        self.keys, self.order = self.keys[n:], self.order[n:]
        self.columns = {k: v[n:] for k, v in self.columns.items()}
        if len(self.keys) == 0:
            self.load()
        return out


def _open_run(path: str) -> Any:
    raw = storage.open_read(path)
    return raw, pa.ipc.open_file(pa.PythonFile(raw, mode="r"))


def _segment_batches(segments: Sequence[int]) -> list[list[int]]:
    """Batch indexes of each segment, from the batches per segment (``RunWriter.segments``)."""
    out, start = [], 0
    for n in segments:
        out.append(list(range(start, start + n)))
        start += n
    return out


def segments_of(
    path: str, segments: Sequence[int], spec: Sequence[Mapping[str, Any]]
) -> Iterator[tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]]:
    """Each segment of a run whole, as ``(keys, order, columns)`` (one block at a time)."""
    raw, reader = _open_run(path)
    with raw:
        for batches in _segment_batches(segments):
            parts = [reader.get_batch(i) for i in batches]
            if not parts:
                continue
            keys = np.concatenate([fmt.numpy_view(b.column(KEY), np.uint64) for b in parts])
            order = np.concatenate([fmt.numpy_view(b.column(ORDER), np.uint64) for b in parts])
            columns = {
                e["name"]: np.concatenate([fmt.column_numpy(b, e) for b in parts]) for e in spec
            }
            yield keys, order, columns


def merged_rows(
    runs: Iterable[tuple[str, Sequence[int]]], spec: Sequence[Mapping[str, Any]]
) -> Iterator[dict]:
    """Every row of the runs (``(path, batches per segment)``) in (key, order) order, in
    chunks of columns (any size).

    Each step takes, from every segment, the rows up to the smallest last-row of the
    segments' current batches (the *watermark*: no unread row can sort before it), sorts
    them and yields them; the segment that set the watermark is then exhausted and reads on.
    """
    runs = list(runs)
    opened = [_open_run(path) for path, _ in runs]
    try:
        cursors = [
            _Cursor(reader, batches, spec)
            for (_raw, reader), (_path, segments) in zip(opened, runs, strict=True)
            for batches in _segment_batches(segments)
        ]
        while True:
            live = [c for c in cursors if len(c.keys)]
            if not live:
                return
            mark = min((c.keys[-1], c.order[-1]) for c in live)
            parts = [p for c in live if (p := c.take_upto(*mark)) is not None]
            keys = np.concatenate([p[0] for p in parts])
            order = np.concatenate([p[1] for p in parts])
            perm = np.lexsort((order, keys))
            yield {e["name"]: np.concatenate([p[2][e["name"]] for p in parts])[perm] for e in spec}
    finally:
        for raw, _reader in opened:
            raw.close()


def rebatch(chunks: Iterable[Mapping[str, np.ndarray]], rows: int) -> Iterator[dict]:
    """Chunks of any size → batches of exactly ``rows`` rows (the last one shorter)."""
    pending: list[Mapping[str, np.ndarray]] = []
    have = 0
    for chunk in chunks:
        n = len(next(iter(chunk.values()))) if chunk else 0
        if not n:
            continue
        pending.append(chunk)
        have += n
        while have >= rows:
            joined = {k: np.concatenate([c[k] for c in pending]) for k in pending[0]}
            yield {k: v[:rows] for k, v in joined.items()}
            rest = {k: v[rows:] for k, v in joined.items()}
            have -= rows
            pending = [rest] if have else []
    if have:
        yield {k: np.concatenate([c[k] for c in pending]) for k in pending[0]}
