"""Reading a mixture: its verified shard sets, the stream of one rank, per-source eval batches.

``open_mixture`` checks every source before any work, each failure one line naming the source:
a missing folder or manifest, another vocabulary (formats.md §3.6), another model family, an
empty train split, and row lengths that differ (unless padding is asked for: shorter rows are
then zero-padded to the longest, which the model sees as trailing padding).

Rows of every source come out in one layout. When any source is packed with segment ids
(``per_document``, the task sets), a ``concat`` source gets them synthesised: segment 1 on every
real token and positions ``0 … n−1``, the same attention and decoder inputs the model derives for
a concat row (objectives.md §5.3–5.4). Token columns take the widest dtype among the sources.
Each micro-batch also carries ``source`` (int64 per row), for the per-source figures.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from c4forge.errors import C4ForgeError, ConfigError
from c4forge.trainers.data import (
    SEGMENT_COLUMNS,
    T5_COLUMNS,
    DataPlan,
    RowOrder,
    ShardReader,
    TrainStream,
    eval_batches,
    open_shard_set,
)
from c4forge.trainers.mixture_map import MixtureMap
from c4forge.trainers.mixture_spec import MixtureSpec, mixing_rates

Check = Callable[[dict[str, np.ndarray], str], None]


@dataclass(frozen=True)
class OpenSource:
    """One verified source: its shard set and its own global row order."""

    name: str
    path: str
    shards: Any  # formats.shards.ShardSet
    order: RowOrder  # the source's rows in its (seed, epoch) shard order

    @property
    def train_rows(self) -> int:
        return self.order.rows_per_epoch


@dataclass(frozen=True)
class Mixture:
    """A verified mixture: sources, requested rates, the row map and the common row layout."""

    spec: MixtureSpec
    sources: tuple[OpenSource, ...]
    rates: tuple[float, ...]  # requested, normalised
    map: MixtureMap
    inputs_length: int
    targets_length: int
    columns: tuple[str, ...]  # the layout every row comes out in
    dtypes: dict[str, np.dtype]
    direct: tuple[bool, ...] = ()  # per source: its rows are already in the layout

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    def describe(self) -> dict[str, Any]:
        """What a checkpoint records (and a resumed run must match)."""
        out = self.spec.describe()
        for rec, src in zip(out["sources"], self.sources):
            rec["index_sha256"] = src.shards.index_sha256
            rec["dataset_fingerprint"] = src.shards.fingerprint
            rec["train_rows"] = src.train_rows
        out["rates"] = list(self.rates)
        out["block_counts"] = list(self.map.counts)
        return out

    # -- one layout for every source
    def conform(self, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Rows of one source in the mixture's layout: padded, segment columns, dtypes."""
        widths = {"inputs": self.inputs_length, "targets": self.targets_length}
        out: dict[str, np.ndarray] = {}
        for name in self.columns:
            side = "inputs" if name.startswith("inputs") else "targets"
            if name in data:
                col = data[name]
            else:  # a concat source in a packed mixture: one segment per row
                tokens = data[side]
                real = tokens != 0
                if name.endswith("segment_ids"):
                    col = real.astype(self.dtypes[name])
                else:
                    col = np.where(real, np.arange(tokens.shape[1]), 0)
            col = col.astype(self.dtypes[name], copy=False)
            short = widths[side] - col.shape[1]
            if short:
                col = np.pad(col, ((0, 0), (0, short)))
            out[name] = col
        return out

    def reader(self, check: Check | None = None, cache: int = 4) -> MixtureReader:
        return MixtureReader(self, check, cache)

    def eval_batches(
        self,
        rows: int | None,
        batch_rows: int,
        rank: int = 0,
        world_size: int = 1,
        check: Check | None = None,
    ) -> Iterator[dict[str, np.ndarray]]:
        """Each source's first ``rows`` validation rows (``data.eval_batches``), source by
        source, each batch marked with its source; a source without validation rows is
        skipped."""
        for k, src in enumerate(self.sources):
            if not src.shards.index["splits"].get("validation", {}).get("shards"):
                continue
            for batch in eval_batches(
                src.shards, rows, batch_rows, rank, world_size, columns=self.columns, check=check
            ):
                item = self.conform(batch)
                item["source"] = np.full(batch_rows, k, np.int64)
                yield item


class MixtureReader:
    """Rows of global mixture indices: each source's ``ShardReader`` behind the row map."""

    def __init__(self, mixture: Mixture, check: Check | None, cache: int) -> None:
        self.mixture = mixture
        self.readers = []
        for src in mixture.sources:
            shards = src.shards.split_shards("train")
            self.readers.append(
                ShardReader(
                    src.shards,
                    [p for p, _ in shards],
                    [r for _, r in shards],
                    cache=cache,
                    columns=mixture.columns,
                    check=check,
                )
            )

    def rows(self, rows: np.ndarray) -> dict[str, np.ndarray]:
        """The rows of global mixture indices ``rows``, in that order, with their sources."""
        m = self.mixture
        rows = np.asarray(rows, np.int64)
        out = {
            c: np.empty(
                (len(rows), m.inputs_length if c.startswith("inputs") else m.targets_length),
                m.dtypes[c],
            )
            for c in m.columns
        }
        direct = m.direct or (False,) * len(m.sources)
        dest = _range_positions(rows)
        if dest is not None:
            lo = int(rows[0]) if dest is _IN_ORDER else int(rows.min())
            self._read_range(lo, lo + len(rows), dest, direct, out)
            return out
        source, within = m.map.locate(rows)
        for k, sel in _by_source(source, len(m.sources)):
            shard, at = m.sources[k].order.locate(within[sel])
            if not direct[k]:
                part = m.conform(self.readers[k].gather(shard, at))
                for c in m.columns:
                    out[c][sel] = part[c]
                continue
            for hit, sh in _by_shard(shard):  # each row copied once, straight into the batch
                data = self.readers[k].shard(sh)
                into, take = (sel, at) if hit is None else (sel[hit], at[hit])
                for c in m.columns:
                    out[c][into] = data[c][take]
        out["source"] = source
        return out

    def _read_range(
        self, lo: int, hi: int, dest: Any, direct: tuple[bool, ...], out: dict[str, np.ndarray]
    ) -> None:
        """Rows ``[lo, hi)`` in any order (row ``lo + i`` goes to ``out[dest[i]]``): each
        source's rows there are consecutive rows of its order (``MixtureMap.runs``), so they
        are read as slices of the decoded shards and, when already in the mixture's layout,
        copied once, straight into the batch (a gather then a scatter would copy twice)."""
        m = self.mixture
        source = m.map.range_sources(lo, hi)
        out["source"] = source if dest is _IN_ORDER else _placed(source, dest)
        for k, offsets, first in m.map.runs(lo, hi):
            into = offsets if dest is _IN_ORDER else dest[offsets]
            for at, shard, row, n in m.sources[k].order.runs(first, first + len(offsets)):
                data = self.readers[k].shard(shard)
                part = {c: v[row : row + n] for c, v in data.items()}
                if not direct[k]:
                    part = m.conform(part)
                for c in m.columns:
                    out[c][into[at : at + n]] = part[c]


_IN_ORDER = slice(None)  # ``_range_positions``: the rows are ``lo, lo + 1, …`` in order


def _range_positions(rows: np.ndarray) -> Any:
    """Where each row of the range ``[min, min + len)`` sits in ``rows`` (``_IN_ORDER`` when
    they are that range in order), or None when ``rows`` is not a permutation of a range (a
    rank's share of a batch, a shuffle window cut by the read)."""
    n = len(rows)
    if not n:
        return None
    lo = int(rows.min())
    if int(rows.max()) - lo != n - 1:
        return None
    if int(rows[0]) == lo and np.array_equal(rows, np.arange(lo, lo + n)):
        return _IN_ORDER
    dest = np.full(n, -1, np.int64)
    dest[rows - lo] = np.arange(n)
    return dest if dest.min() >= 0 else None


def _placed(values: np.ndarray, dest: np.ndarray) -> np.ndarray:
    """``values[i]`` moved to position ``dest[i]``."""
    out = np.empty_like(values)
    out[dest] = values
    return out


def _by_source(source: np.ndarray, num_sources: int) -> list[tuple[int, np.ndarray]]:
    """(source, positions of its rows) in order of first appearance (deterministic decode
    order); one comparison per source, no Python loop over rows."""
    found = [(k, np.flatnonzero(source == k)) for k in range(num_sources)]
    return sorted(((k, sel) for k, sel in found if len(sel)), key=lambda ks: int(ks[1][0]))


def _by_shard(shard: np.ndarray) -> Iterator[tuple[np.ndarray | None, int]]:
    """(positions, shard) per shard in order of first appearance; positions None when every
    row is of one shard (the usual case)."""
    first = int(shard[0])
    if shard[-1] == first and (shard == first).all():
        yield None, first
        return
    values, where = np.unique(shard, return_index=True)
    for sh in values[np.argsort(where)]:
        yield np.flatnonzero(shard == sh), int(sh)


class MixtureStream(TrainStream):
    """``TrainStream`` over a mixture: the same steps, micro-batches, ranks and workers (the
    global row indices are the mixture's), rows read through the mixture map."""

    def __init__(
        self,
        mixture: Mixture,
        plan: DataPlan,
        start_step: int,
        end_step: int,
        *,
        as_numpy: bool = False,
        host_dtype: Any = None,
        check: Check | None = None,
    ) -> None:
        first = mixture.sources[0]
        super().__init__(
            first.shards,
            plan,
            start_step,
            end_step,
            as_numpy=as_numpy,
            host_dtype=host_dtype,
            columns=mixture.columns,
            check=check,
        )
        self.mixture = mixture

    def open_reader(self) -> MixtureReader:
        return self.mixture.reader(self.check)

    def read(self, reader: Any, rows: np.ndarray) -> dict[str, np.ndarray]:
        return reader.rows(rows)

    def _item(self, data: dict[str, np.ndarray], step: int, micro: int) -> dict[str, Any]:
        return MixtureItem(super()._item(data, step, micro))


class MixtureItem(dict):
    """A mixture's micro-batch: a plain dict of columns, except in how it leaves a DataLoader
    worker. Every tensor a worker sends takes a shared-memory segment and a file descriptor
    passed over a socket, the main cost of passing an item; the ``source`` column (one small
    int per row) crosses inside the item's pickle as bytes instead and is a tensor again on
    arrival, so a mixture's item costs what a single set's does."""

    def __copy__(self) -> MixtureItem:
        return MixtureItem(self)

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        fields = dict(self)
        source = fields.get("source")
        tensor = source is not None and not isinstance(source, np.ndarray)
        if tensor:
            fields["source"] = source.numpy()
        return _rebuild_item, (fields, tensor)


def _rebuild_item(fields: dict[str, Any], tensor: bool) -> MixtureItem:
    item = MixtureItem(fields)
    if tensor:
        import torch

        item["source"] = torch.from_numpy(item["source"])
    return item


# ----------------------------------------------------------------------------- opening


def _objective_family(shards: Any, where: str) -> str:
    from c4forge.trainers.models import family_of_objective

    return family_of_objective(str(shards.index["objective"]["name"]), set(shards.columns), where)


def open_mixture(
    spec: MixtureSpec,
    *,
    vocab: dict | None,
    seed: int,
    lengths: dict[str, int] | None = None,
    full: bool = False,
    verify: str | None = None,
) -> Mixture:
    """Open and verify every source (see the module docstring); ``lengths`` are a resumed
    run's row lengths, which the mixture must give again."""
    opened = []
    for src in spec.sources:
        try:
            shards = open_shard_set(src.shards, vocab=vocab, full=full, verify=verify)
        except C4ForgeError as err:
            raise type(err)(f"mixture source {src.name!r}: {err}") from None
        if vocab is None:  # the first source's vocabulary binds the others
            vocab = dict(shards.vocab)
        split = shards.index["splits"].get("train")
        rows = tuple(r for _, r in shards.split_shards("train")) if split else ()
        if not rows or sum(rows) == 0:
            raise ConfigError(f"mixture source {src.name!r}: {src.shards} has no train rows")
        opened.append((src, shards, rows))
    families = {src.name: _objective_family(sh, src.shards) for src, sh, _ in opened}
    fams = list(families.items())
    odd = next(((n, f) for n, f in fams if f != fams[0][1]), None)
    if odd is not None:
        raise ConfigError(
            f"mixture sources train different model families: {fams[0][0]!r} is "
            f"{fams[0][1]}, {odd[0]!r} is {odd[1]}"
        )
    from c4forge.trainers.models import families, get_family

    if get_family(fams[0][1]).mixture_training_ref is None:
        mixing = [f.name for f in families().values() if f.mixture_training_ref is not None]
        raise ConfigError(
            f"mixtures train the {'/'.join(mixing)} family (encoder-decoder rows) only"
        )
    inputs_length, targets_length = _row_lengths(spec, opened)
    if lengths is not None and (inputs_length, targets_length) != (
        lengths["inputs_length"],
        lengths["targets_length"],
    ):
        raise ConfigError(
            f"the mixture's rows are {inputs_length}/{targets_length} tokens; the checkpoint "
            f"was trained on {lengths['inputs_length']}/{lengths['targets_length']}"
        )
    packed = any(set(SEGMENT_COLUMNS) <= set(sh.columns) for _, sh, _ in opened)
    columns = tuple(c for c in T5_COLUMNS if packed or c not in SEGMENT_COLUMNS)
    dtypes = {}
    for c in columns:
        side = "inputs" if c.startswith("inputs") else "targets"
        found = [_column_dtype(sh, c if c in sh.columns else side) for _, sh, _ in opened]
        dtypes[c] = np.result_type(*found)
    rates = mixing_rates(spec, [sum(r) for _, _, r in opened])
    widths = {"inputs": inputs_length, "targets": targets_length}
    direct = tuple(
        all(
            c in sh.columns
            and _column_dtype(sh, c) == dtypes[c]
            and int(sh.index["objective"][f"{c.split('_')[0]}_length"]) == widths[c.split("_")[0]]
            for c in columns
        )
        for _, sh, _ in opened
    )
    return Mixture(
        spec=spec,
        sources=tuple(
            OpenSource(src.name, src.shards, sh, RowOrder(rows, seed, 1))
            for src, sh, rows in opened
        ),
        rates=tuple(rates),
        map=MixtureMap.from_rates(rates, seed),
        inputs_length=inputs_length,
        targets_length=targets_length,
        columns=columns,
        dtypes=dtypes,
        direct=direct,
    )


def _column_dtype(shards: Any, name: str) -> np.dtype:
    from c4forge.formats.shards import numpy_dtype

    entry = next(e for e in shards.index["schema"] if e["name"] == name)
    return numpy_dtype(entry)


def _row_lengths(spec: MixtureSpec, opened: list) -> tuple[int, int]:
    found = {
        src.name: (
            int(sh.index["objective"]["inputs_length"]),
            int(sh.index["objective"]["targets_length"]),
        )
        for src, sh, _ in opened
    }
    widest = (max(v[0] for v in found.values()), max(v[1] for v in found.values()))
    if len(set(found.values())) > 1 and not spec.pad:
        listed = ", ".join(f"{n} {i}/{t}" for n, (i, t) in found.items())
        raise ConfigError(
            f"mixture sources have different row lengths ({listed}); pass --mix-pad (or "
            f"pad = true) to zero-pad every row to {widest[0]}/{widest[1]}"
        )
    return widest


def realised_counts(mixture: Mixture, plan: DataPlan, steps: int) -> list[int]:
    """Rows each source filled in training steps ``[0, steps)``: whole shuffle windows in
    closed form, a partial window row by row."""
    b, k = plan.batch_size, max(1, plan.shuffle_window)
    done = (steps // k) * k if plan.shuffle_window > 1 else steps
    counts = np.asarray(mixture.map.source_counts(done * b), np.int64)
    if done < steps:
        order = RowOrder((1,), plan.seed, b, plan.shuffle_window)
        rows = np.concatenate([order.step_rows(s) for s in range(done, steps)])
        src, _ = mixture.map.locate(rows)
        counts += np.bincount(src, minlength=len(mixture.sources))
    return [int(v) for v in counts]


def rate_lines(mixture: Mixture, counts: list[int]) -> list[str]:
    """The summary's table: each source's requested and realised share of the rows."""
    total = max(1, sum(counts))
    width = max(len(n) for n in mixture.names)
    lines = [f"mixture ({mixture.spec.strategy}): requested → realised rate over {total:,} rows"]
    for src, want, got in zip(mixture.sources, mixture.rates, counts):
        lines.append(
            f"  {src.name:<{width}}  {100 * want:7.3f} % → {100 * got / total:7.3f} %  "
            f"({got:,} rows, {got / max(1, src.train_rows):.2f} epochs of {src.train_rows:,})"
        )
    return lines
