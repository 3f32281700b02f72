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
        m = self.mixture
        source, within = m.map.locate(rows)
        out = {
            c: np.empty((len(rows), m.inputs_length if c.startswith("inputs") else m.targets_length),
                        m.dtypes[c])
            for c in m.columns
        }  # fmt: skip
        for k in dict.fromkeys(source.tolist()):  # first-appearance order, deterministic
            sel = np.nonzero(source == k)[0]
            shard, at = m.sources[k].order.locate(within[sel])
            if m.direct and m.direct[k]:  # copy each row once, straight into the batch
                first = int(shard[0])
                if (shard == first).all():  # the usual case: one shard of this source
                    data = self.readers[k].shard(first)
                    for c in m.columns:
                        out[c][sel] = data[c][at]
                    continue
                for sh in dict.fromkeys(shard.tolist()):
                    hit = shard == sh
                    data = self.readers[k].shard(sh)
                    for c in m.columns:
                        out[c][sel[hit]] = data[c][at[hit]]
                continue
            part = m.conform(self.readers[k].gather(shard, at))
            for c in m.columns:
                out[c][sel] = part[c]
        out["source"] = source
        return out


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
) -> Mixture:
    """Open and verify every source (see the module docstring); ``lengths`` are a resumed
    run's row lengths, which the mixture must give again."""
    opened = []
    for src in spec.sources:
        try:
            shards = open_shard_set(src.shards, vocab=vocab, full=full)
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
    if fams[0][1] != "t5":
        raise ConfigError("mixtures train the t5 family (encoder-decoder rows) only")
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
        src.name: (int(sh.index["objective"]["inputs_length"]),
                   int(sh.index["objective"]["targets_length"]))
        for src, sh, _ in opened
    }  # fmt: skip
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
