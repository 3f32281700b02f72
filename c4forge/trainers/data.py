"""Training data: the global row order over a shard set, and an IterableDataset that streams it.

The whole order is a pure function of ``(seed, global row index)`` and the manifest's per-shard
row counts (formats.md §3.5): epoch ``e`` visits the train shards in ``epoch_shard_order(n, seed,
e)``, each shard's rows in file order, epochs back to back. Step ``s`` consumes global rows
``[s·B, (s+1)·B)``. An optional shuffle buffer permutes rows inside windows of ``K`` global
batches with a permutation seeded by ``(seed, window)``, so it too depends only on the step. A
resumed run therefore needs nothing but the step: no reader state is saved, nothing is replayed.

Splitting: rank ``r`` of ``world`` takes rows ``[r·B/world, (r+1)·B/world)`` of each step's batch
and cuts them into ``accum`` micro-batches; DataLoader worker ``w`` of ``n`` produces micro-batches
``w, w+n, w+2n, …`` (counted from the start step), which the DataLoader's in-order round robin
puts back in sequence. Tokens leave the workers as uint16/int32 and are widened on the device.
"""

from __future__ import annotations

import collections
import functools
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from c4forge.errors import ConfigError, InputError, VerificationError
from c4forge.formats.shards import epoch_shard_order as shard_order

SEGMENT_COLUMNS = (
    "inputs_segment_ids",
    "inputs_positions",
    "targets_segment_ids",
    "targets_positions",
)
T5_COLUMNS = ("inputs", "targets", *SEGMENT_COLUMNS)  # what the encoder-decoder reads
_SHUFFLE_TAG = 0x5348_5546  # "SHUF": keeps the shuffle stream apart from other seeded streams
READ_AHEAD_ROWS = 4096  # rows a loader worker reads at once (whole micro-batches, at least one)
VERIFY_MODES = ("read", "full", "quick")  # --verify-shards; see open_shard_set


# ---------------------------------------------------------------------------------------------
# Shard set access (c4forge.formats.shards does the §3.6 checks).
# ---------------------------------------------------------------------------------------------


def open_shard_set(
    path: str,
    *,
    vocab: dict | None = None,
    inputs_length: int | None = None,
    targets_length: int | None = None,
    full: bool = False,
    verify: str | None = None,
) -> Any:
    """Open and verify a shard set: format, vocabulary (sha256, size, extra ids), lengths.

    ``verify`` is ``--verify-shards``: ``read`` (each shard's sha256 checked on the bytes of
    its first read in a process, ``ShardSet.iter_batches``), ``full`` (every shard hashed
    before training: a pass of its own), ``quick`` (sizes only). ``full=True`` is ``full``.
    """
    from c4forge.formats.shards import ShardSet
    from c4forge.io import storage

    if not storage.is_remote(path) and not os.path.isdir(path):  # remote: ShardSet reads it
        raise InputError(f"{path}: no such shard directory")
    mode = verify or ("full" if full else "quick")
    if mode not in VERIFY_MODES:
        raise ConfigError(f"--verify-shards must be one of {', '.join(VERIFY_MODES)}, got {mode!r}")
    return ShardSet.open(
        path,
        vocab=vocab,
        inputs_length=inputs_length,
        targets_length=targets_length,
        full=mode == "full",
        verify_reads=mode == "read",
    )


# ---------------------------------------------------------------------------------------------
# The global row order (pure functions).
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RowOrder:
    """Maps global row indices to ``(shard, row in shard)``; see the module docstring."""

    shard_rows: tuple[int, ...]
    seed: int
    batch_size: int
    shuffle_window: int = 0  # in global batches; 0 = no shuffle

    def __post_init__(self) -> None:
        if not self.shard_rows or sum(self.shard_rows) == 0:
            raise InputError("the train split has no rows")
        if self.batch_size <= 0:
            raise ConfigError(f"--batch-size must be positive, got {self.batch_size}")

    @property
    def rows_per_epoch(self) -> int:
        return sum(self.shard_rows)

    def _epoch_layout(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        return _epoch_layout(self.shard_rows, self.seed, epoch)

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global row indices → (shard index, row within shard), both int64 arrays."""
        rows = np.asarray(rows, np.int64)
        epoch, offset = np.divmod(rows, self.rows_per_epoch)
        if len(rows) and epoch.min() == epoch.max():  # the usual case: one epoch, no masks
            order, starts = self._epoch_layout(int(epoch[0]))
            pos = np.searchsorted(starts, offset, side="right") - 1
            return order[pos], offset - starts[pos]
        shard = np.empty_like(rows)
        within = np.empty_like(rows)
        for e in np.unique(epoch):
            sel = epoch == e
            order, starts = self._epoch_layout(int(e))
            pos = np.searchsorted(starts, offset[sel], side="right") - 1
            shard[sel] = order[pos]
            within[sel] = offset[sel] - starts[pos]
        return shard, within

    def runs(self, lo: int, hi: int) -> Iterator[tuple[int, int, int, int]]:
        """Global rows ``[lo, hi)`` as runs ``(offset from lo, shard, first row in it, rows)``
        of consecutive rows of one shard, in order: ``locate`` of a range, with no per-row
        arrays (a mixture reads each source's rows as such ranges)."""
        per_epoch = self.rows_per_epoch
        at = lo
        while at < hi:
            epoch, offset = divmod(at, per_epoch)
            order, starts = self._epoch_layout(epoch)
            pos = int(np.searchsorted(starts, offset, side="right")) - 1
            first = offset - int(starts[pos])
            take = min(hi - at, self.shard_rows[int(order[pos])] - first)
            yield at - lo, int(order[pos]), first, take
            at += take

    def _window_perm(self, window: int) -> np.ndarray:
        size = self.shuffle_window * self.batch_size
        return np.random.default_rng([self.seed, _SHUFFLE_TAG, window]).permutation(size)

    def step_rows(self, step: int) -> np.ndarray:
        """The B global row indices of training step ``step`` (0-based), in batch order."""
        b = self.batch_size
        plain = np.arange(step * b, (step + 1) * b, dtype=np.int64)
        if self.shuffle_window <= 1:
            return plain
        k = self.shuffle_window
        window, slot = divmod(step, k)
        perm = self._window_perm(window)
        return window * k * b + perm[slot * b : (slot + 1) * b]


@functools.lru_cache(maxsize=8)
def _epoch_layout(shard_rows: tuple[int, ...], seed: int, epoch: int) -> tuple[np.ndarray, ...]:
    """(shard order, first global offset of each) of one epoch; cached because every
    micro-batch asks for it and a permutation costs more than the lookup it serves."""
    order = np.asarray(shard_order(len(shard_rows), seed, epoch), np.int64)
    rows = np.asarray(shard_rows, np.int64)[order]
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]])
    order.setflags(write=False)
    starts.setflags(write=False)
    return order, starts


# ---------------------------------------------------------------------------------------------
# Reading rows.
# ---------------------------------------------------------------------------------------------


def _concatenate(parts: list[np.ndarray], buffer: np.ndarray | None) -> np.ndarray:
    """``np.concatenate(parts)``, written into ``buffer`` when it has exactly that shape."""
    if not parts:
        return np.zeros((0, 0), np.uint16)
    rows = sum(len(p) for p in parts)
    if (
        buffer is not None
        and buffer.shape == (rows, *parts[0].shape[1:])
        and buffer.dtype == parts[0].dtype
    ):
        return np.concatenate(parts, out=buffer)
    return np.concatenate(parts)


class ShardReader:
    """Random access to the rows of shards, with a small per-process LRU of decoded shards."""

    def __init__(
        self,
        shard_set: Any,
        paths: list[str],
        expected_rows: list[int],
        cache: int = 4,
        columns: tuple[str, ...] = T5_COLUMNS,
        check: Callable[[dict[str, np.ndarray], str], None] | None = None,
    ):
        self.shard_set = shard_set
        self.paths = paths
        self.expected_rows = expected_rows
        self.columns = [c for c in shard_set.columns if c in columns]
        self.check = check  # the family's row check, run once per decoded shard
        self.limits = id_limits(shard_set.index, self.columns)
        self._in_range: set[int] = set()  # shards whose ids were checked in this reader
        self._cache: collections.OrderedDict[int, dict[str, np.ndarray]] = collections.OrderedDict()
        self._cache_size = max(1, cache)

    def shard(self, idx: int) -> dict[str, np.ndarray]:
        hit = self._cache.get(idx)
        if hit is not None:
            self._cache.move_to_end(idx)
            return hit
        path = self.paths[idx]
        parts: dict[str, list[np.ndarray]] = {c: [] for c in self.columns}
        n = 0
        for batch in self.shard_set.iter_batches(path):
            for c in self.columns:
                col = batch.column(c)
                if hasattr(col.type, "list_size"):
                    flat = col.flatten().to_numpy(zero_copy_only=False)
                    parts[c].append(flat.reshape(-1, col.type.list_size))
                else:  # a scalar column (bert's next_sentence_label)
                    parts[c].append(col.to_numpy(zero_copy_only=False))
            n += batch.num_rows
        if n != self.expected_rows[idx]:
            raise VerificationError(
                f"{path}: read {n} rows, index.json says {self.expected_rows[idx]}"
            )
        # The evicted shard's arrays take the new rows when the shapes agree: fresh multi-MB
        # allocations page-fault on every decode (worst with a mixture's several readers).
        spare = self._cache.popitem(last=False)[1] if len(self._cache) >= self._cache_size else {}
        data = {c: _concatenate(v, spare.get(c)) for c, v in parts.items()}
        if self.check is not None:  # the family's checks first: their messages say more
            self.check(data, path)
        if idx not in self._in_range:
            check_id_range(data, self.limits, path)
            self._in_range.add(idx)
        self._cache[idx] = data
        return data

    def gather(self, shard: np.ndarray, within: np.ndarray) -> dict[str, np.ndarray]:
        """Rows in the given order; each shard is decoded once per call."""
        out: dict[str, np.ndarray] | None = None
        for s in dict.fromkeys(shard.tolist()):  # first-appearance order, deterministic
            sel = np.nonzero(shard == s)[0]
            data = self.shard(int(s))
            if out is None:
                out = {c: np.empty((len(shard), *a.shape[1:]), a.dtype) for c, a in data.items()}
            for c, a in data.items():
                out[c][sel] = a[within[sel]]
        assert out is not None
        return out


# ---------------------------------------------------------------------------------------------
# The IterableDataset.
# ---------------------------------------------------------------------------------------------


def id_limits(index: dict[str, Any], columns: list[str]) -> dict[str, tuple[int, str]]:
    """``{column: (bound, what)}``: the columns whose values index a table in the model (the
    embedding, the input positions, the segment types), with the exclusive bound index.json
    gives them. A value outside is a damaged or foreign shard; on a GPU it would be a
    device-side assert, on the CPU an IndexError, far from the shard that holds it."""
    vocab_size = int(index["vocabulary"]["vocab_size"])
    lengths = {e["name"]: e.get("length") for e in index["schema"]}
    bounds: dict[str, tuple[int, str]] = {}
    for name in ("inputs", "targets", "input_ids", "masked_lm_ids"):
        bounds[name] = (vocab_size, f"the vocabulary's {vocab_size} ids")
    if lengths.get("input_ids"):
        n = int(lengths["input_ids"])
        bounds["masked_lm_positions"] = (n, f"the {n} input positions")
    bounds["token_type_ids"] = (2, "the 2 segment types")
    return {c: bounds[c] for c in columns if c in bounds}


def check_id_range(
    data: dict[str, np.ndarray], limits: dict[str, tuple[int, str]], path: str
) -> None:
    """Every id of ``data`` inside its column's bound (``id_limits``), else a one-line error
    naming the shard, the column, the row and the value. Unsigned columns need only a max."""
    for name, (bound, what) in limits.items():
        col = data.get(name)
        if col is None or not col.size:
            continue
        if col.max() < bound and (col.dtype.kind == "u" or col.min() >= 0):
            continue  # the usual case: one max (and min) per column
        bad = (col >= bound) | (col < 0)
        row = int(np.nonzero(bad.reshape(len(col), -1).any(axis=1))[0][0])
        value = int(col[row][bad[row]].flat[0]) if col.ndim > 1 else int(col[row])
        raise VerificationError(
            f"{path}: {name} holds id {value} (row {row} of the shard), outside {what} "
            "(index.json); the shard is damaged or was built for another vocabulary"
        )


def _torch() -> Any:
    import torch

    return torch


@dataclass(frozen=True)
class DataPlan:
    """Everything that fixes which rows a rank sees: batch sizes, split, position, shuffle."""

    batch_size: int  # global rows per optimizer step
    world_size: int = 1
    rank: int = 0
    grad_accum: int = 1
    seed: int = 0
    shuffle_window: int = 0

    def __post_init__(self) -> None:
        per = self.batch_size // max(1, self.world_size)
        if self.batch_size % self.world_size or per % self.grad_accum or per == 0:
            raise ConfigError(
                f"--batch-size {self.batch_size} must be a multiple of world size "
                f"{self.world_size} × --grad-accum {self.grad_accum}"
            )

    @property
    def rank_rows(self) -> int:
        return self.batch_size // self.world_size

    @property
    def micro_rows(self) -> int:
        return self.rank_rows // self.grad_accum


def _iterable_base() -> type:
    try:
        from torch.utils.data import IterableDataset
    except ImportError:  # numpy-only use (tests of the order, other trainers)
        return object
    return IterableDataset


class TrainStream(_iterable_base()):  # type: ignore[misc]
    """Micro-batches of one rank from ``start_step`` to ``end_step`` (exclusive), in order.

    Each item is a dict of torch tensors in the shard dtype (uint16 or int32) plus the ints
    ``step`` and ``micro``; widen them on the device with :func:`to_device`.
    """

    def __init__(
        self,
        shard_set: Any,
        plan: DataPlan,
        start_step: int,
        end_step: int,
        split: str = "train",
        as_numpy: bool = False,
        host_dtype: Any = None,
        columns: tuple[str, ...] = T5_COLUMNS,
        check: Callable[[dict[str, np.ndarray], str], None] | None = None,
    ) -> None:
        super().__init__()
        shards = shard_set.split_shards(split)
        if not shards:
            raise InputError(f"{shard_set.directory}: split {split!r} has no shards")
        self.shard_set = shard_set
        self.paths = [p for p, _ in shards]
        self.rows = [r for _, r in shards]
        self.plan = plan
        self.order = RowOrder(tuple(self.rows), plan.seed, plan.batch_size, plan.shuffle_window)
        self.start_step = start_step
        self.end_step = end_step
        self.as_numpy = as_numpy
        self.host_dtype = host_dtype  # e.g. int32 for XLA, which has no uint16 transfers
        self.columns = columns
        self.check = check

    def __len__(self) -> int:
        return (self.end_step - self.start_step) * self.plan.grad_accum

    def open_reader(self) -> Any:
        """This worker's reader (a mixture's stream reads several shard sets)."""
        return ShardReader(
            self.shard_set, self.paths, self.rows, columns=self.columns, check=self.check
        )

    def read(self, reader: Any, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The rows of global indices ``rows``, in that order."""
        shard, within = self.order.locate(rows)
        return reader.gather(shard, within)

    def micro_rows(self, step: int, micro: int) -> np.ndarray:
        """Global row indices of micro-batch ``micro`` of this rank at ``step``."""
        p = self.plan
        rows = self.order.step_rows(step)
        lo = p.rank * p.rank_rows + micro * p.micro_rows
        return rows[lo : lo + p.micro_rows]

    def __iter__(self) -> Iterator[dict[str, Any]]:
        worker, num_workers = 0, 1
        try:
            from torch.utils.data import get_worker_info

            info = get_worker_info()
            if info is not None:
                worker, num_workers = info.id, info.num_workers
        except ImportError:
            pass
        reader = self.open_reader()
        accum, size = self.plan.grad_accum, self.plan.micro_rows
        mine = range(worker, len(self), num_workers)
        # Read a few micro-batches at once (same rows, same items): per-read overhead (row
        # lookups, shard switches; one per source in a mixture) is paid once per chunk.
        chunk = max(1, READ_AHEAD_ROWS // size)
        for lo in range(0, len(mine), chunk):
            keys = [divmod(i, accum) for i in mine[lo : lo + chunk]]
            rows = [self.micro_rows(self.start_step + s, m) for s, m in keys]
            block = self.read(reader, np.concatenate(rows))
            for j, (step, micro) in enumerate(keys):
                data = {k: v[j * size : (j + 1) * size] for k, v in block.items()}
                yield self._item(data, self.start_step + step, micro)

    def _item(self, data: dict[str, np.ndarray], step: int, micro: int) -> dict[str, Any]:
        if self.host_dtype is not None:  # narrow unsigned token columns only
            data = {
                k: v.astype(self.host_dtype) if v.dtype.kind == "u" else v for k, v in data.items()
            }
        item: dict[str, Any] = dict(data)
        if not self.as_numpy:
            torch = _torch()
            item = {k: torch.from_numpy(v) for k, v in data.items()}
        item["step"] = step
        item["micro"] = micro
        return item


def eval_batches(
    shard_set: Any,
    rows: int | None,
    batch_rows: int,
    rank: int = 0,
    world_size: int = 1,
    split: str = "validation",
    columns: tuple[str, ...] = T5_COLUMNS,
    check: Callable[[dict[str, np.ndarray], str], None] | None = None,
) -> Iterator[dict[str, np.ndarray]]:
    """The first ``rows`` validation rows (shards in index order, rows in file order).

    Batches keep a fixed shape: the last one is filled with all-zero rows (weight 0), so static
    shapes hold and every selected row counts exactly once. Batch ``i`` belongs to rank
    ``i % world_size``.
    """
    shards = shard_set.split_shards(split)
    reader = ShardReader(
        shard_set,
        [p for p, _ in shards],
        [r for _, r in shards],
        cache=1,
        columns=columns,
        check=check,
    )
    total = sum(r for _, r in shards)
    n = total if rows is None or rows <= 0 else min(rows, total)
    starts = np.concatenate([[0], np.cumsum([r for _, r in shards])[:-1]]).astype(np.int64)
    for i, lo in enumerate(range(0, n, batch_rows)):
        if i % world_size != rank:
            continue
        g = np.arange(lo, min(lo + batch_rows, n), dtype=np.int64)
        shard = np.searchsorted(starts, g, side="right") - 1
        data = reader.gather(shard, g - starts[shard])
        if len(g) < batch_rows:
            data = {
                k: np.concatenate([v, np.zeros((batch_rows - len(g), *v.shape[1:]), v.dtype)])
                for k, v in data.items()
            }
        yield data


# ---------------------------------------------------------------------------------------------
# Device-side features (objectives.md §5.3).
# ---------------------------------------------------------------------------------------------


def decoder_input_tokens(targets: Any, positions: Any = None, segments: Any = None) -> Any:
    """Targets shifted right by one within each segment, 0 (the start id) at segment starts and
    at padding: the one definition of the decoder's input, for training, fine-tuning and tests.

    Without segments (``concat``) a plain shift with 0 first, as HF's ``_shift_right``. With
    ``positions`` a segment starts where its position is 0 (the packed columns); with
    ``segments`` alone, where the segment id changes: ``[3, 9, 1, 4, 1, 0, 0]`` with segments
    ``[1, 1, 1, 2, 2, 0, 0]`` → ``[0, 3, 9, 0, 4, 0, 0]``. Works on torch tensors (on any device,
    static shapes) and, with ``positions``, on numpy arrays.
    """
    if isinstance(targets, np.ndarray):
        prev = np.zeros_like(targets)
        prev[:, 1:] = targets[:, :-1]
        if positions is not None:
            prev = np.where((positions == 0) | (segments == 0), 0, prev)
        return prev
    torch = _torch()
    prev = torch.nn.functional.pad(targets[..., :-1], (1, 0))
    if positions is not None:
        return torch.where((positions == 0) | (segments == 0), torch.zeros_like(prev), prev)
    if segments is not None:
        before = torch.nn.functional.pad(segments[..., :-1], (1, 0))
        keep = (segments == before) & (segments != 0)
        return torch.where(keep, prev, torch.zeros_like(prev))
    return prev


@dataclass
class DeviceBatch:
    """One micro-batch on the device, widened: what the model and the loss take."""

    input_ids: Any
    decoder_input_ids: Any
    targets: Any
    encoder_segment_ids: Any = None
    decoder_segment_ids: Any = None
    full_inputs: bool = False  # no padding, no segments (said by the host copy): no mask needed

    def weights(self) -> Any:
        return self.targets != 0


def to_device(item: dict[str, Any], device: Any, non_blocking: bool = False) -> DeviceBatch:
    """Copy a micro-batch in its narrow dtype, then widen and derive features on the device."""
    torch = _torch()

    def move(name: str) -> Any:
        t = item[name]
        if isinstance(t, np.ndarray):
            t = torch.from_numpy(t)
        if t.dtype == torch.uint16 and torch.device(device).type == "xla":
            t = t.to(torch.int32)  # XLA has no uint16 transfers; widen on the host
        return t.to(device, non_blocking=non_blocking).to(torch.int64)

    inputs, targets = move("inputs"), move("targets")
    if "targets_segment_ids" in item:
        enc_seg, dec_seg = move("inputs_segment_ids"), move("targets_segment_ids")
        dec_in = decoder_input_tokens(targets, move("targets_positions"), dec_seg)
        return DeviceBatch(inputs, dec_in, targets, enc_seg, dec_seg)
    return DeviceBatch(inputs, decoder_input_tokens(targets), targets)
