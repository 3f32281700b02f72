"""Which source fills global row ``i`` of a mixture, and which of that source's rows it is.

A pure function of ``(seed, i)`` and the per-block counts, so every rank, DataLoader worker,
accumulation split and resumed run computes the same map without any state (the same contract
as ``data.RowOrder``; the global row index is the mixture's, before any source is read).

Rows come in blocks of ``BLOCK`` (65,536). Every block holds exactly ``counts[k]`` rows of
source ``k`` (the rates apportioned by largest remainder, at least one row each), so the
realised rate of a whole block is the requested one within ``0.5 / BLOCK``. Inside a block the
rows are *interleaved*, not shuffled: source ``k``'s ``j``-th row sits at time
``(j + u_k) / counts[k]`` with ``u_k`` uniform in [0, 1) drawn from ``(seed, block)``, and the
block is those times in sorted order. Any run of ``t`` consecutive rows therefore holds
``t · rate_k`` rows of source ``k`` within ±(sources + 1): each global batch gets the
requested composition, not a binomial draw around it (a plain random choice would miss ±1 %
over 10,000 rows one time in twenty at a 50 % rate).

Source ``k``'s own row number for global row ``i = b · BLOCK + t`` is ``b · counts[k]`` plus
the rank of ``t`` among that block's ``k`` rows: each source is read front to back in its own
global row order (``data.RowOrder``: shards in a ``(seed, epoch)`` permutation, epochs back to
back), so a small source repeats epoch after epoch as often as its rate asks and a large one
is never exhausted early.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from c4forge.errors import ConfigError

BLOCK = 1 << 16
_MIX_TAG = 0x4D49_5831  # "MIX1": keeps this stream apart from the shuffle and dropout streams


def apportion(rates: Sequence[float], total: int = BLOCK) -> tuple[int, ...]:
    """Whole row counts summing to ``total`` in proportion to ``rates`` (largest remainder,
    ties to the earlier source), every source at least one row."""
    if len(rates) > total:
        raise ConfigError(f"a mixture of {len(rates)} sources needs blocks of more rows")
    r = np.asarray(rates, np.float64)
    if r.ndim != 1 or not len(r) or not np.all(np.isfinite(r)) or np.any(r <= 0):
        raise ConfigError(f"mixing rates must be positive numbers, got {list(rates)}")
    quota = r / r.sum() * total
    counts = np.floor(quota).astype(np.int64)
    left = total - int(counts.sum())
    order = np.lexsort((np.arange(len(r)), -(quota - counts)))  # largest remainder first
    counts[order[:left]] += 1
    while (counts == 0).any():  # a tiny rate still gets one row per block
        counts[int(np.argmax(counts))] -= 1
        counts[int(np.argmin(counts))] += 1
    return tuple(int(c) for c in counts)


@functools.lru_cache(maxsize=16)
def _block(counts: tuple[int, ...], seed: int, block: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, rank within source) of each of the block's rows."""
    u = np.random.default_rng([seed, _MIX_TAG, block]).random(len(counts))
    times = np.concatenate([(np.arange(c) + u[k]) / c for k, c in enumerate(counts)])
    source = np.repeat(np.arange(len(counts), dtype=np.int16), counts)
    rank = np.concatenate([np.arange(c, dtype=np.int64) for c in counts])
    order = np.argsort(times, kind="stable")  # ties (measure zero) to the earlier source
    return source[order], rank[order]


@functools.lru_cache(maxsize=16)
def _block_slots(counts: tuple[int, ...], seed: int, block: int) -> tuple[np.ndarray, ...]:
    """Per source, the block's slots it fills, increasing: its ``j``-th slot holds its
    ``j``-th row of the block (the interleaving keeps each source's rows in order)."""
    source, _ = _block(counts, seed, block)
    order = np.argsort(source, kind="stable")
    bounds = np.concatenate([[0], np.cumsum(counts)])
    return tuple(order[bounds[k] : bounds[k + 1]] for k in range(len(counts)))


@dataclass(frozen=True)
class MixtureMap:
    """Global row → (source, row of that source); see the module docstring."""

    counts: tuple[int, ...]  # rows of each source per block; sum = BLOCK
    seed: int

    @classmethod
    def from_rates(cls, rates: Sequence[float], seed: int) -> MixtureMap:
        return cls(apportion(rates), seed)

    @property
    def num_sources(self) -> int:
        return len(self.counts)

    def locate(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global row indices → (source index, row index within that source), int64 arrays."""
        rows = np.asarray(rows, np.int64)
        block, slot = np.divmod(rows, BLOCK)
        base = np.asarray(self.counts, np.int64)
        if len(rows) and block.min() == block.max():  # the usual case: one block
            b = int(block[0])
            src, rank = _block(self.counts, self.seed, b)
            s = src[slot].astype(np.int64)
            return s, b * base[s] + rank[slot]
        source = np.empty_like(rows)
        within = np.empty_like(rows)
        for b in np.unique(block):
            sel = block == b
            src, rank = _block(self.counts, self.seed, int(b))
            s = src[slot[sel]].astype(np.int64)
            source[sel] = s
            within[sel] = int(b) * base[s] + rank[slot[sel]]
        return source, within

    def runs(self, lo: int, hi: int) -> Iterator[tuple[int, np.ndarray, int]]:
        """Global rows ``[lo, hi)`` per block and source as ``(source, offsets of its rows from
        lo, increasing, its first row)``: the rows are consecutive rows of that source, so a
        range needs no per-row lookup (``locate`` of a range, grouped by source)."""
        for b in range(lo // BLOCK, (hi - 1) // BLOCK + 1):
            base = b * BLOCK
            t0, t1 = max(lo, base) - base, min(hi, base + BLOCK) - base
            for k, slots in enumerate(_block_slots(self.counts, self.seed, b)):
                j0, j1 = (int(j) for j in np.searchsorted(slots, (t0, t1)))
                if j1 > j0:
                    yield k, slots[j0:j1] + (base - lo), b * self.counts[k] + j0

    def range_sources(self, lo: int, hi: int) -> np.ndarray:
        """The source of each global row in ``[lo, hi)`` (``locate(arange(lo, hi))[0]``)."""
        parts = []
        for b in range(lo // BLOCK, (hi - 1) // BLOCK + 1):
            base = b * BLOCK
            source, _ = _block(self.counts, self.seed, b)
            parts.append(source[max(lo, base) - base : min(hi, base + BLOCK) - base])
        return np.concatenate(parts).astype(np.int64)

    def source_counts(self, rows: int) -> list[int]:
        """How many of the first ``rows`` global rows each source fills (closed form for whole
        blocks, one block's prefix for the rest)."""
        whole, part = divmod(int(rows), BLOCK)
        out = np.asarray(self.counts, np.int64) * whole
        if part:
            src, _ = _block(self.counts, self.seed, whole)
            out += np.bincount(src[:part], minlength=self.num_sources)
        return [int(v) for v in out]
