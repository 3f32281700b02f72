"""Rows from examples (objectives.md §5): zero-padded `concat` rows and first-fit packed rows,
plus the load-time features (decoder inputs, loss weights) and the attention-mask reference.

All layout work is vectorized: a boolean "row prefix" mask or flat index arrays place every
token with one numpy assignment; the only Python loop is first-fit's row choice, one iteration
per example (not per token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

PACKED_COLUMNS = (
    "inputs",
    "targets",
    "inputs_segment_ids",
    "inputs_positions",
    "targets_segment_ids",
    "targets_positions",
)


def _lengths(arrays: list[np.ndarray], width: int, name: str) -> np.ndarray:
    lens = np.fromiter((len(a) for a in arrays), dtype=np.int64, count=len(arrays))
    if len(lens) and (lens.max() > width or lens.min() < 1):
        bad = int(np.flatnonzero((lens > width) | (lens < 1))[0])
        raise ValueError(
            f"example {bad}: {name} length {lens[bad]} does not fit a row of {width} (or is empty)"
        )
    return lens


def _prefix_rows(arrays: list[np.ndarray], lens: np.ndarray, width: int, dtype: Any) -> np.ndarray:
    """Row i = arrays[i] then zeros; one boolean-mask assignment fills rows in row-major order."""
    out = np.zeros((len(arrays), width), dtype=dtype)
    if arrays:
        out[np.arange(width)[None, :] < lens[:, None]] = np.concatenate(arrays)
    return out


@dataclass
class PackedRows:
    """Packed columns (PACKED_COLUMNS, shape (rows, width)) and, per row, its first example's index."""

    columns: dict[str, np.ndarray]
    first_example: np.ndarray
    examples_per_row: np.ndarray

    @property
    def num_rows(self) -> int:
        return len(self.first_example)


def first_fit_rows(
    in_lens: np.ndarray,
    tg_lens: np.ndarray,
    inputs_length: int,
    targets_length: int,
    window: int = 512,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """§5.2 placement only: (row, inputs offset, targets offset) of every example.

    Rows are numbered globally in creation order; rows never span a window of `window` examples.
    An example goes to the first row of its window where both its inputs and targets fit.
    """
    n = len(in_lens)
    row_of: list[int] = []
    off_in: list[int] = []
    off_tg: list[int] = []
    ins, tgs = np.asarray(in_lens).tolist(), np.asarray(tg_lens).tolist()  # Python ints: fast
    # Rows left with less room than the shortest example anywhere can never take another one:
    # they leave `live`, so the scan only visits rows that might fit (same choice as scanning
    # all rows). A plain Python scan of the few live rows beats numpy's per-call overhead.
    floor_in = min(ins, default=0)
    floor_tg = min(tgs, default=0)
    base = 0  # global index of the window's first row
    for w0 in range(0, n, window):
        left_in: list[int] = []  # room left in each row of the window
        left_tg: list[int] = []
        live: list[int] = []  # rows that may still take an example, ascending
        for i in range(w0, min(w0 + window, n)):
            li, lt = ins[i], tgs[i]
            r = -1
            # A row is never empty once opened, so a full-width example always opens a new row.
            if li < inputs_length and lt < targets_length:
                for j in live:
                    if left_in[j] >= li and left_tg[j] >= lt:
                        r = j
                        break
            if r < 0:
                r = len(left_in)
                left_in.append(inputs_length)
                left_tg.append(targets_length)
                live.append(r)
            ri, rt = left_in[r], left_tg[r]
            off_in.append(inputs_length - ri)
            off_tg.append(targets_length - rt)
            ri -= li
            rt -= lt
            left_in[r], left_tg[r] = ri, rt
            if ri < floor_in or rt < floor_tg:
                live.remove(r)
            row_of.append(base + r)
        base += len(left_in)
    return (
        np.array(row_of, dtype=np.int64),
        np.array(off_in, dtype=np.int64),
        np.array(off_tg, dtype=np.int64),
    )


def _place(
    arrays: list[np.ndarray],
    lens: np.ndarray,
    order: np.ndarray,
    row_of: np.ndarray,
    offset: np.ndarray,
    row_fill: np.ndarray,
    width: int,
    dtype: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(tokens, segment ids, positions) of the packed rows of one side.

    Tokens: with the examples sorted by (row, placement), one boolean row-prefix mask places
    every token. Segment ids and positions need no per-token index arrays: a row's segment id
    at a column is the number of example starts at or before it (a cumulative sum of start
    marks), and its position is the column minus the start column of its segment (a running
    maximum of start columns); both are zeroed on the trailing padding.
    """
    fill = np.arange(width)[None, :] < row_fill[:, None]
    rows = len(row_fill)
    tokens = np.zeros((rows, width), dtype=dtype)
    tokens[fill] = np.concatenate([arrays[i] for i in order.tolist()])
    marks = np.zeros((rows, width), dtype=dtype)
    marks[row_of, offset] = 1
    segs = np.cumsum(marks, axis=1, dtype=dtype)
    segs *= fill
    marks[row_of, offset] = offset.astype(dtype)
    np.maximum.accumulate(marks, axis=1, out=marks)
    pos = np.arange(width, dtype=dtype)[None, :] - marks
    pos *= fill
    return tokens, segs, pos


def pack_arrays(
    ins: list[np.ndarray],
    tgs: list[np.ndarray],
    inputs_length: int,
    targets_length: int,
    window: int = 512,
    dtype: Any = np.int32,
) -> PackedRows:
    """`--packing per_document`: first-fit packing (§5.2) of examples given as their inputs and
    targets arrays, with segment ids and positions. Segment ids are 1, 2, … in placement order
    within a row, the same on encoder and decoder side; positions restart at 0 per segment;
    padding (0) is trailing. Deterministic."""
    if window < 1:
        raise ValueError("pack window must be >= 1")
    in_lens = _lengths(ins, inputs_length, "inputs")
    tg_lens = _lengths(tgs, targets_length, "targets")
    row_of, off_in, off_tg = first_fit_rows(in_lens, tg_lens, inputs_length, targets_length, window)
    rows = int(row_of.max()) + 1 if len(row_of) else 0
    # Examples in (row, placement) order; placement order within a row = index order.
    order = np.argsort(row_of, kind="stable")
    sorted_rows = row_of[order]
    group_start = (
        np.r_[0, np.flatnonzero(np.diff(sorted_rows)) + 1] if len(order) else np.array([], np.int64)
    )
    per_row = np.diff(np.r_[group_start, len(order)])
    first = order[group_start] if len(order) else np.array([], np.int64)
    cols: dict[str, np.ndarray] = {}
    in_fill = np.bincount(row_of, weights=in_lens, minlength=rows).astype(np.int64)
    tg_fill = np.bincount(row_of, weights=tg_lens, minlength=rows).astype(np.int64)
    cols["inputs"], cols["inputs_segment_ids"], cols["inputs_positions"] = _place(
        ins, in_lens, order, row_of, off_in, in_fill, inputs_length, dtype
    )
    cols["targets"], cols["targets_segment_ids"], cols["targets_positions"] = _place(
        tgs, tg_lens, order, row_of, off_tg, tg_fill, targets_length, dtype
    )
    return PackedRows({k: cols[k] for k in PACKED_COLUMNS}, first, per_row)
