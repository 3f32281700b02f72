"""The in-process engine (``--engine local``): the plan's primitives over collections spilled
to disk, a pool of worker processes for the per-partition work.

Why: Beam's DirectRunner keeps every collection that crosses a stage boundary in memory, so a
local run's memory grows with the corpus. Here, as in datatrove's local executor, a
collection is a list of partition files (pickle batches); a shuffle (``group``, ``combine``,
``cogroup``, ``distinct``) has each map task write one spill file, its items grouped by bucket
(a stable hash of the key) into one region per bucket, with an index of one offset per bucket
(Spark's sort-shuffle layout: runs of ``SPILL_BYTES`` merged, ``_Runs``), then reduces one
bucket at a time from its region of every spill file. A worker holds one partition, one
run's pending items or one bucket, never the corpus; the bucket count follows the bytes being
shuffled (``BUCKET_BYTES`` each), and a task has a few files open whatever the bucket count;
the driver holds one offset per bucket per map task. Measured (``benchmarks/scale.py``,
RESULTS §11): the peak of the process tree is the same at 250,000 and 1,000,000 pages. The plan runs keys-only
(``clean.passes``), so what is shuffled is keys and small ids, and the documents once, packed.

Workers: ``--workers`` processes (default: every core); each task returns its counters and CPU
seconds, merged here. A task whose worker dies (the OOM killer) is run again, up to four
attempts (``local_pool``). ``seconds`` (CPU time per stage, keyed by the first part of the step
label: ``wet``, ``pass0``, ``dedup`` …) is the stage profile ``benchmarks/clean.py`` prints.
Spill files live in a temporary folder (``TMPDIR``), removed by ``close`` (or when the engine is
garbage-collected).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pickle
import shutil
import time
import weakref
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from c4forge.corpus.counting import CounterBag
from c4forge.engines.base import Engine, Fn
from c4forge.io import tempdirs
from c4forge.io.pickle_batches import dump_batches, read_batches, read_records

SPILL_PREFIX = "c4forge-local-"  # the spill folder: tempdirs.make names it with the pid

BATCH = 2048  # items per pickle record
SPILL_BYTES = 4 << 20  # pickled bytes of the items a map task holds before writing a run
SPILL_ITEMS = 16_384  # items of a map task's first run (before their size is known)
MIN_SPILL_ITEMS, MAX_SPILL_ITEMS = 256, 1 << 20  # the bounds of a later run's item count
RUN_FANOUT = 32  # runs of a spill file merged at a time (``_Runs``)
MERGE_BUFFER = 1 << 16  # bytes buffered per run read (and for the merged run written) by a merge
BUCKET_BYTES = 4 << 20  # pickled bytes per shuffle bucket (a worker holds ~5× in memory)
MIN_BUCKETS = 16
MAX_BUCKETS = 1 << 20  # no practical cap: buckets are segments of the spill files, not files


class Coll:
    """A spilled collection: its partition files. Iterating reads them all (tests, ``loop``)."""

    def __init__(self, files: list[str], owner: Any = None) -> None:
        self.files = files
        self.owner = owner  # the engine whose folder holds the files: kept alive with them

    def __iter__(self) -> Iterator[Any]:
        for path in self.files:
            yield from read_batches(path)

    def nbytes(self) -> int:
        return sum(os.path.getsize(p) for p in self.files)


def write_items(path: str, items: Iterable[Any], batch_size: int = BATCH) -> int:
    """Items → the local file ``path`` as pickle batches of ``batch_size``; returns the count."""
    with open(path, "wb") as f:
        return dump_batches(f, items, batch_size)


def bucket_of(key: Any, buckets: int) -> int:
    """A stable hash (Python's ``hash`` of a str differs per process); an int key (a chunk
    index) goes round-robin, so the chunk passes spread evenly over the workers."""
    if isinstance(key, int):
        return key % buckets
    if isinstance(key, tuple) and all(isinstance(k, (str, int)) for k in key):
        # a numbered key, e.g. an output shard (split, index, count): its ints offset the hash
        # of its names, so the shards of a split take consecutive buckets and their writers
        # spread over the workers (a hash of the whole tuple put both train shards of a
        # two-shard split in one bucket: one worker wrote them one after the other)
        names = tuple(k for k in key if not isinstance(k, int))
        offset = sum(k for k in key if isinstance(k, int))
        return (zlib.crc32(repr(names).encode("utf-8")) + offset) % buckets
    raw = key if isinstance(key, bytes) else repr(key).encode("utf-8")
    return zlib.crc32(raw) % buckets


def bucket_list(keys: list[Any], buckets: int) -> list[int]:
    """``bucket_of`` of each key, a batch at a time: a batch of plain ints or bytes (the
    shuffles' usual keys) in one comprehension, without the per-key type tests."""
    kinds = set(map(type, keys))
    if kinds == {int}:
        return [k % buckets for k in keys]
    if kinds == {bytes}:
        crc32 = zlib.crc32
        return [crc32(k) % buckets for k in keys]
    return [bucket_of(k, buckets) for k in keys]


# --- tasks (module level: run in the worker processes) -------------------------------------------


def _timed_task(work: Callable[[CounterBag], None], keep: int = 0) -> tuple[dict, float, dict]:
    bag = CounterBag(keep)
    start = time.process_time()
    work(bag)
    return bag.counts, time.process_time() - start, bag.samples


def _map_task(fn: Fn, inputs: list[str], out: str, keep: int = 0) -> tuple:
    def work(bag: CounterBag) -> None:
        write_items(
            out, (o for path in inputs for item in read_batches(path) for o in fn(item, bag))
        )

    return _timed_task(work, keep)


def _source_task(fn: Fn, items: list[Any], out: str, keep: int = 0) -> tuple:
    def work(bag: CounterBag) -> None:
        write_items(out, (o for item in items for o in fn(item, bag)))

    return _timed_task(work, keep)


class _Runs:
    """A map task's spill: each flush of its pending items is one *run* (its buckets in order,
    one segment per bucket), and runs are merged, ``RUN_FANOUT`` at a time, until one is left:
    the spill file then holds one region per bucket, in bucket order, and its index is one
    offset per bucket.

    Why merge (Spark's sort-shuffle does the same): with one segment per bucket per flush, the
    index held ``flushes × buckets`` entries, and both grow with the corpus. At 1M pages the
    window shuffle's map tasks wrote about 9 million segments, whose index the driver held
    (1.4 GiB) and whose tiny reads and unpickles the reducers paid for. Merging costs a copy
    of the bytes per level (``RUN_FANOUT`` runs per merge: two levels up to a few thousand
    runs) and no unpickling; the items of a bucket keep their order (runs are merged oldest
    first), so the reducers see what they saw before, byte for byte."""

    def __init__(self, out: str) -> None:
        self.out = out
        self._parts = 0
        # (level, path, buckets, offsets, lengths) per run, oldest first
        self.runs: list[tuple[int, str, np.ndarray, np.ndarray, np.ndarray]] = []
        self._file: Any = None
        self._path = ""
        self._pos = 0

    def _part(self) -> str:
        self._parts += 1
        return f"{self.out}.part{self._parts}"

    def write(self, pending: dict[int, list[Any]]) -> int:
        """One run from the pending items (bucket → items); returns its pickled bytes."""
        if self._file is None:
            self._path = self._part()
            self._file = open(self._path, "wb")
            self._pos = 0
        buckets = sorted(pending)
        offsets, lengths = [], []
        for b in buckets:
            data = pickle.dumps(pending[b], protocol=pickle.HIGHEST_PROTOCOL)
            offsets.append(self._pos)
            lengths.append(len(data))
            self._file.write(data)
            self._pos += len(data)
        self.runs.append(
            (
                0,
                self._path,
                np.array(buckets, dtype=np.int64),
                np.array(offsets, dtype=np.int64),
                np.array(lengths, dtype=np.int64),
            )
        )
        self._cascade()
        return sum(lengths)

    def _cascade(self) -> None:
        """Merge the newest ``RUN_FANOUT`` runs while they share a level (a run of level L holds
        ``RUN_FANOUT ** L`` flushes), so each byte is copied once per level."""
        while len(self.runs) >= RUN_FANOUT:
            tail = self.runs[-RUN_FANOUT:]
            level = tail[0][0]
            if any(r[0] != level for r in tail):
                return
            merged = self._merge(tail, self._part(), level + 1)
            del self.runs[-RUN_FANOUT:]
            self.runs.append(merged)

    def _merge(self, runs: list[tuple], dest: str, level: int) -> tuple:
        """``runs`` (oldest first) → one run in ``dest``: per bucket, its segments in run order
        (bytes copied, never unpickled); their files are removed (a merge always takes whole
        files: the newest ``RUN_FANOUT`` level-0 runs are all the current flush file's)."""
        if self._file is not None and any(r[1] == self._path for r in runs):
            self._file.close()
            self._file = None
        buckets = np.concatenate([r[2] for r in runs])
        lengths = np.concatenate([r[4] for r in runs])
        which = np.repeat(np.arange(len(runs)), [len(r[2]) for r in runs])
        order = np.lexsort((which, buckets))  # by bucket, then oldest run first
        # A run's segments lie back to back in bucket order, so in this order each run is read
        # front to back: one buffered reader per run, no system call per segment (there are
        # runs × buckets segments, and both grow with the bytes shuffled).
        out_buckets: list[int] = []
        out_offsets: list[int] = []
        out_lengths: list[int] = []
        pos = 0
        with contextlib.ExitStack() as files:
            reads = []
            for _level, path, _buckets, offsets, _lengths in runs:
                f = files.enter_context(open(path, "rb", buffering=MERGE_BUFFER))
                if len(offsets):
                    f.seek(int(offsets[0]))
                reads.append(f.read)
            out = files.enter_context(open(dest, "wb", buffering=MERGE_BUFFER))
            for b, i, length in zip(
                buckets[order].tolist(), which[order].tolist(), lengths[order].tolist()
            ):
                out.write(reads[i](length))
                if out_buckets and out_buckets[-1] == b:
                    out_lengths[-1] += length
                else:
                    out_buckets.append(b)
                    out_offsets.append(pos)
                    out_lengths.append(length)
                pos += length
        for path in dict.fromkeys(r[1] for r in runs):  # every run of a file is merged (``finish``)
            os.remove(path)
        return (
            level,
            dest,
            np.array(out_buckets, dtype=np.int64),
            np.array(out_offsets, dtype=np.int64),
            np.array(out_lengths, dtype=np.int64),
        )

    def finish(self, buckets: int) -> None:
        """Every run merged into ``out`` (one region per bucket, in bucket order); its index
        ``out.idx``: ``buckets + 1`` offsets (little-endian int64), bucket ``b`` being bytes
        ``[idx[b], idx[b + 1])``."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if not self.runs:
            open(self.out, "wb").close()
            run_buckets = np.zeros(0, dtype=np.int64)
            lengths = np.zeros(0, dtype=np.int64)
        else:
            # A flush file holds the level-0 runs since the last merge, a merged file one run:
            # a single run left is alone in its file, which becomes the spill as it is.
            if len(self.runs) == 1:
                run = self.runs[0]
                os.replace(run[1], self.out)
            else:
                run = self._merge(list(self.runs), self.out, 0)
            run_buckets, lengths = run[2], run[4]
            self.runs = []
        sizes = np.zeros(buckets, dtype=np.int64)
        sizes[run_buckets] = lengths
        index = np.zeros(buckets + 1, dtype="<i8")
        np.cumsum(sizes, out=index[1:])
        index.tofile(self.out + ".idx")


def _scatter_task(
    inputs: list[str], out: str, buckets: int, whole: bool, combine: Fn | None, keep: int = 0
) -> tuple:
    """One map task's partitions → one spill file ``out``, its items grouped by bucket (by the
    key, or by the whole item for ``distinct``), with an index ``out.idx`` of each bucket's
    region (``_Runs``); ``combine``: values pre-combined per key first, as Beam's combiner
    lifting.

    Why one file per task (Spark's sort-based shuffle layout, not one file per bucket): the
    pending items are bounded (``SPILL_BYTES`` pickled, ``SPILL_ITEMS`` until the item size is
    known) whatever the bucket count, and a task holds a few open files, not ``buckets`` of
    them (a laptop's open-file limit is 256 to 1,024, while the bucket count grows with the
    bytes shuffled)."""

    def work(bag: CounterBag) -> None:
        pending: dict[int, list[Any]] = {}
        runs = _Runs(out)
        size = 0
        limit = SPILL_ITEMS

        def put_all(batch: list[Any], keys: list[Any]) -> None:
            nonlocal size, limit
            for b, item in zip(bucket_list(keys, buckets), batch, strict=True):
                got = pending.get(b)
                if got is None:
                    pending[b] = [item]
                else:
                    got.append(item)
            size += len(batch)
            if size >= limit:
                written = runs.write(pending)
                # the next runs hold about SPILL_BYTES pickled, whatever the item size
                limit = max(
                    MIN_SPILL_ITEMS, min(MAX_SPILL_ITEMS, SPILL_BYTES * size // max(1, written))
                )
                pending.clear()
                size = 0

        batches = (batch for path in inputs for batch in read_records(path))
        if combine is not None:
            acc: dict[Any, list[Any]] = {}
            for batch in batches:
                for k, v in batch:
                    vs = acc.setdefault(k, [])
                    vs.append(v)
                    if len(vs) >= 64:
                        acc[k] = [combine(vs)]
            combined = [(k, combine(vs)) for k, vs in acc.items()]
            for lo in range(0, len(combined), BATCH):
                part = combined[lo : lo + BATCH]
                put_all(part, [k for k, _ in part])
        else:
            for batch in batches:
                put_all(batch, batch if whole else [item[0] for item in batch])
        if pending:
            runs.write(pending)
        runs.finish(buckets)

    return _timed_task(work, keep)


Segments = list[tuple[str, int, int]]  # (spill file, offset, length): a bucket's region in each


def spill_index(path: str) -> np.ndarray:
    """A spill file's index (``_Runs.finish``): bucket ``b`` is bytes ``[idx[b], idx[b+1])``."""
    return np.fromfile(path + ".idx", dtype="<i8")


def read_bucket(segments: Segments) -> Iterator[Any]:
    """One bucket's items, from its region of each map task's spill file, in file order
    (streamed: a region holds the bucket's pickled lists one after the other)."""
    return itertools.chain.from_iterable(bucket_lists(segments))


def bucket_lists(segments: Segments) -> Iterator[list[Any]]:
    """``read_bucket``'s items as the pickled lists that hold them."""
    for path, offset, length in segments:
        with open(path, "rb") as f:
            f.seek(offset)
            end = offset + length
            while f.tell() < end:
                yield pickle.load(f)


def _grouped(lists: Iterable[list[tuple[Any, Any]]]) -> dict[Any, list[Any]]:
    """Key → its values in arrival order, from lists of ``(key, value)`` pairs."""
    out: dict[Any, list[Any]] = {}
    get = out.get
    for pairs in lists:
        for k, v in pairs:
            vs = get(k)
            if vs is None:
                out[k] = [v]
            else:
                vs.append(v)
    return out


def _reduce_task(kind: str, fn: Fn | None, sides: list[Segments], out: str, keep: int = 0) -> tuple:
    """One bucket (its segments of every map task's spill file, per side) → its output
    partition."""

    def work(bag: CounterBag) -> None:
        if kind == "group":
            groups = _grouped(bucket_lists(sides[0]))
            write_items(out, (o for k, vs in groups.items() for o in fn(k, vs, bag)))
        elif kind == "combine":
            groups = _grouped(bucket_lists(sides[0]))
            write_items(out, ((k, fn(vs)) for k, vs in groups.items()))
        elif kind == "cogroup":
            lefts = _grouped(bucket_lists(sides[0]))
            rights = _grouped(bucket_lists(sides[1]))
            keys = list(dict.fromkeys([*lefts, *rights]))
            write_items(
                out,
                (o for k in keys for o in fn(k, lefts.get(k, []), rights.get(k, []), bag)),
            )
        else:  # distinct
            seen = dict.fromkeys(read_bucket(sides[0]))
            write_items(out, seen)

    return _timed_task(work, keep)


# --- the engine ----------------------------------------------------------------------------------


class LocalEngine(Engine):
    name = "local"
    counter_source = "exact"

    def __init__(self, job: Any = None, workers: int | None = None) -> None:
        self.workers = workers or (job.workers if job is not None else None) or os.cpu_count() or 1
        self.description = f"local ({self.workers} worker processes, shuffles spilled to disk)"
        self.bag = CounterBag()
        self.seconds: dict[str, float] = defaultdict(float)
        self.shuffle_bytes: dict[str, int] = defaultdict(int)  # pickled bytes scattered, per stage
        self.out_bytes: dict[str, int] = defaultdict(int)  # pickled bytes written, per stage
        self.timeline: list[tuple[str, float, float]] = []  # (label, wall start, end) per step
        self.dir = tempdirs.make(SPILL_PREFIX)  # a killed run's spills go on the next start
        self._cleanup = weakref.finalize(self, shutil.rmtree, self.dir, True)
        self._n = 0
        self._pool: Any = None

    # -- plumbing -------------------------------------------------------------------------------
    def _path(self, label: str) -> str:
        self._n += 1
        safe = "".join(c if c.isalnum() else "_" for c in label)[:40]
        return os.path.join(self.dir, f"{self._n:06d}-{safe}")

    def _run(self, label: str, tasks: list[tuple[Callable[..., Any], tuple]]) -> None:
        """Run tasks (in the worker processes when there are several workers: a task whose
        worker dies is run again, ``local_pool``), merge counters and CPU in task order, and
        report each finished task to the progress display (``bars``, while a job's
        ``progress`` runs)."""
        from c4forge import faults

        started = time.time()
        twice = faults.duplicate(label)  # a test hook: each task run twice, one result kept
        if twice:
            tasks = [t for task in tasks for t in (task, task)]
        bars = self.bars
        if bars is not None:
            bars.begin(label, len(tasks))
        if self.workers > 1:
            if self._pool is None:
                from c4forge.engines.local_pool import TaskPool

                # workers fork while the progress ticker holds no lock (it prints under this
                # one), so no worker starts with stderr's lock taken
                self._pool = TaskPool(self.workers, fork_lock=self._fork_lock)
            outs: list = self._pool.run(
                label, tasks, (self.bag.keep,), on_done=bars.advance if bars else None
            )
        else:
            outs = []
            for f, args in tasks:
                outs.append(f(*args, self.bag.keep))
                if bars is not None:
                    bars.advance()
        if twice:
            outs = outs[1::2]
        for counts, cpu, samples in outs:
            self.bag.merge(counts)
            self.bag.merge_samples(samples)
            self.seconds[label.split("/", 1)[0]] += cpu
        self.timeline.append((label, started, time.time()))

    def _fork_lock(self) -> Any:
        return self.bars.lock if self.bars is not None else contextlib.nullcontext()

    def _out(self, label: str, files: list[str]) -> Coll:
        self.out_bytes[label.split("/", 1)[0]] += sum(os.path.getsize(p) for p in files)
        return Coll(files, self)

    def _coll(self, coll: Any, label: str) -> Coll:
        if isinstance(coll, Coll):
            return coll
        path = self._path(label + "-in")
        write_items(path, coll)
        return Coll([path], self)

    def _groups(self, coll: Coll) -> list[list[str]]:
        """The partition files of each map task: up to four tasks per worker (a slow task leaves
        the others work to take), never more tasks than files."""
        n = max(1, min(len(coll.files), self.workers * 4))
        return [coll.files[i::n] for i in range(n)]

    def _shuffle(
        self, label: str, colls: list[Coll], whole: bool = False, combine: Fn | None = None
    ) -> tuple[int, list[list[str]]]:
        """Scatter each collection into buckets; returns (buckets, [side] → spill files)."""
        total = sum(c.nbytes() for c in colls)
        buckets = max(MIN_BUCKETS, min(MAX_BUCKETS, -(-total // BUCKET_BYTES)))
        sides: list[list[str]] = []
        tasks = []
        for c in colls:
            spills = []
            for group in self._groups(c):
                spill = self._path(label + "-scatter")
                spills.append(spill)
                tasks.append((_scatter_task, (group, spill, buckets, whole, combine)))
            sides.append(spills)
        self._run(label, tasks)
        stage = label.split("/", 1)[0]
        self.shuffle_bytes[stage] += sum(os.path.getsize(p) for side in sides for p in side)
        return buckets, sides

    def _reduce(self, label: str, kind: str, fn: Fn | None, colls: list[Coll], **kw: Any) -> Coll:
        buckets, sides = self._shuffle(label, colls, **kw)
        indexes = [[(p, spill_index(p).tolist()) for p in side] for side in sides]  # read once
        outs, tasks = [], []
        for b in range(buckets):
            out = self._path(label)
            outs.append(out)
            segments = [
                [(p, idx[b], idx[b + 1] - idx[b]) for p, idx in side if idx[b + 1] > idx[b]]
                for side in indexes
            ]
            tasks.append((_reduce_task, (kind, fn, segments, out)))
        self._run(label, tasks)
        for side in sides:  # spill files are read once
            for p in side:
                os.remove(p)
                os.remove(p + ".idx")
        return self._out(label, outs)

    # -- primitives -----------------------------------------------------------------------------
    def source(self, label: str, items: list[Any], fn: Fn) -> Coll:
        outs, tasks = [], []
        for item in items:
            out = self._path(label)
            outs.append(out)
            tasks.append((_source_task, (fn, [item], out)))
        self._run(label, tasks)
        return self._out(label, outs)

    def flat_map(self, coll: Any, label: str, fn: Fn) -> Coll:
        c = self._coll(coll, label)
        outs, tasks = [], []
        for group in self._groups(c):
            out = self._path(label)
            outs.append(out)
            tasks.append((_map_task, (fn, group, out)))
        self._run(label, tasks)
        return self._out(label, outs)

    def group(self, coll: Any, label: str, fn: Fn) -> Coll:
        return self._reduce(label, "group", fn, [self._coll(coll, label)])

    def combine(self, coll: Any, label: str, fn: Fn) -> Coll:
        return self._reduce(label, "combine", fn, [self._coll(coll, label)], combine=fn)

    def cogroup(self, label: str, left: Any, right: Any, fn: Fn) -> Coll:
        colls = [self._coll(left, label + "-l"), self._coll(right, label + "-r")]
        return self._reduce(label, "cogroup", fn, colls)

    def distinct(self, coll: Any, label: str) -> Coll:
        return self._reduce(label, "distinct", None, [self._coll(coll, label)], whole=True)

    def loop(self, coll: Any, label: str, body: Fn, rounds: int) -> Coll:
        current = self._coll(coll, label)
        for r in range(rounds):
            nxt = body(self, current, f"{label}{r}")
            if set(nxt) == set(current):
                return nxt
            current = nxt
        return current

    def drain(self, coll: Any, label: str) -> None:
        return None  # collections are computed eagerly: the counters are already in the bag

    def counters(self) -> dict[str, dict[str, int]]:
        return self.bag.counts

    def start(self, keep_samples: int = 0, partitions: int = 2) -> None:
        super().start(keep_samples, partitions)
        self.bag.keep = keep_samples

    def samples(self) -> dict[str, list]:
        """The merged samples of every task (already the smallest per reason)."""
        return {k: [tuple(r) for r in v] for k, v in sorted(self.bag.samples.items())}

    def close(self) -> None:
        profile = os.environ.get("C4FORGE_ENGINE_PROFILE")
        if profile:  # benchmarks/scale.py: CPU and shuffle bytes per stage
            import json

            with open(profile, "w") as f:
                json.dump(
                    {
                        "seconds": self.seconds,
                        "shuffle_bytes": self.shuffle_bytes,
                        "out_bytes": self.out_bytes,
                        "timeline": self.timeline,
                    },
                    f,
                )
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._cleanup()
