"""Packing (objectives.md §5) against the §6.9 invariants and a plain-Python first-fit reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from objective_references import (
    attention_masks,
    derive_decoder_features,
    first_fit_pack,
    next_fit_row_count,
    pad_concat,
    rows_of,
)

from c4forge.objectives import make_config, shard_examples

LI, LT = 64, 16


def make_examples(
    lengths: list[tuple[int, int]], seed: int = 0
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Examples shaped like real ones: non-zero tokens, EOS (1) last, unique token values."""
    rng = np.random.default_rng(seed)
    out = []
    for li, lt in lengths:
        ins = rng.integers(3, 60000, li).astype(np.int32)
        tgs = rng.integers(3, 60000, lt).astype(np.int32)
        ins[-1] = tgs[-1] = 1
        out.append((ins, tgs))
    return out


def reference_first_fit(lengths: list[tuple[int, int]], li: int, lt: int, window: int) -> list[int]:
    """Straightforward §5.2: global row index of each example."""
    rows_of_example, base = [], 0
    for w0 in range(0, len(lengths), window):
        rem: list[list[int]] = []
        for a, b in lengths[w0 : w0 + window]:
            for r, (ri, rt) in enumerate(rem):  # noqa: B007 (r is used after the loop)
                if a <= ri and b <= rt:
                    break
            else:
                r = len(rem)
                rem.append([li, lt])
            rem[r][0] -= a
            rem[r][1] -= b
            rows_of_example.append(base + r)
        base += len(rem)
    return rows_of_example


lengths_st = st.lists(st.tuples(st.integers(1, LI), st.integers(1, LT)), min_size=1, max_size=120)


@settings(max_examples=120, deadline=None)
@given(lengths=lengths_st, window=st.integers(1, 40), seed=st.integers(0, 1000))
def test_first_fit_invariants(lengths, window, seed):
    examples = make_examples(lengths, seed)
    packed = first_fit_pack(examples, LI, LT, window=window)
    c = packed.columns
    rows = packed.num_rows
    for name, width in (
        ("inputs", LI),
        ("inputs_segment_ids", LI),
        ("inputs_positions", LI),
        ("targets", LT),
        ("targets_segment_ids", LT),
        ("targets_positions", LT),
    ):
        assert c[name].shape == (rows, width)
    expected_rows = reference_first_fit(lengths, LI, LT, window)
    assert rows == max(expected_rows) + 1
    seen = 0
    for r in range(rows):
        for side in ("inputs", "targets"):
            seg, pos, tok = c[f"{side}_segment_ids"][r], c[f"{side}_positions"][r], c[side][r]
            real = seg != 0
            # 0 exactly on trailing padding, and padding tokens are 0
            assert np.array_equal(real, tok != 0)
            n_real = int(real.sum())
            assert real[:n_real].all() and not real[n_real:].any()
            # ids 1, 2, ... in steps of 0 or 1; positions restart per segment
            ids = seg[:n_real]
            assert ids[0] == 1 and set(np.diff(ids).tolist()) <= {0, 1}
            starts = np.r_[True, ids[1:] != ids[:-1]]
            assert np.array_equal(pos[:n_real][starts], np.zeros(starts.sum()))
            assert (pos[n_real:] == 0).all()
        assert c["inputs_segment_ids"][r].max() == c["targets_segment_ids"][r].max()
        seen += int(c["inputs_segment_ids"][r].max())
    assert seen == len(examples) == int(packed.examples_per_row.sum())
    # every example once, contiguous and intact, same segment id on both sides, in the reference row
    for i, (ins, tgs) in enumerate(examples):
        r = expected_rows[i]
        # its segment: same tokens on both sides (inputs alone can repeat, e.g. a lone EOS)
        segs_here = [
            s
            for s in range(1, int(c["inputs_segment_ids"][r].max()) + 1)
            if np.array_equal(c["inputs"][r][c["inputs_segment_ids"][r] == s], ins)
            and np.array_equal(c["targets"][r][c["targets_segment_ids"][r] == s], tgs)
        ]
        assert len(segs_here) >= 1
        s = segs_here[0]
        assert np.array_equal(
            c["inputs_positions"][r][c["inputs_segment_ids"][r] == s], np.arange(len(ins))
        )
        assert np.array_equal(
            c["targets_positions"][r][c["targets_segment_ids"][r] == s], np.arange(len(tgs))
        )
    # first example of each row, in creation order
    assert np.array_equal(np.array(expected_rows)[packed.first_example], np.arange(rows))
    # §6.9 yardstick
    in_lens = [a for a, _ in lengths]
    tg_lens = [b for _, b in lengths]
    assert rows <= 1.1 * next_fit_row_count(in_lens, tg_lens, LI, LT, window) + 1


def test_full_examples_get_their_own_row_and_windows_are_respected():
    lengths = [(LI, LT), (3, 2), (LI, 3), (4, 2), (5, 5), (LI, LT)]
    packed = first_fit_pack(make_examples(lengths), LI, LT, window=3)
    assert reference_first_fit(lengths, LI, LT, 3) == [0, 1, 2, 3, 3, 4]
    assert packed.num_rows == 5
    assert packed.examples_per_row.tolist() == [1, 1, 1, 2, 1]
    assert (packed.columns["inputs_segment_ids"][0] == 1).all()


def test_row_count_well_below_next_fit_on_document_like_lengths():
    rng = np.random.default_rng(0)
    lengths = [(int(a), int(max(2, a // 5))) for a in rng.integers(10, LI + 1, 2000)]
    packed = first_fit_pack(make_examples(lengths), LI, LT, window=512)
    nf = next_fit_row_count([a for a, _ in lengths], [b for _, b in lengths], LI, LT, 512)
    assert packed.num_rows < nf


def test_pad_concat_rows():
    examples = make_examples([(LI, LT), (5, 3), (1, 1)])
    rows = pad_concat(examples, LI, LT)
    assert rows["inputs"].shape == (3, LI) and rows["targets"].shape == (3, LT)
    for i, (ins, tgs) in enumerate(examples):
        assert (
            np.array_equal(rows["inputs"][i, : len(ins)], ins)
            and not rows["inputs"][i, len(ins) :].any()
        )
        assert (
            np.array_equal(rows["targets"][i, : len(tgs)], tgs)
            and not rows["targets"][i, len(tgs) :].any()
        )
    with pytest.raises(ValueError, match="does not fit"):
        pad_concat(make_examples([(LI + 1, 2)]), LI, LT)


def test_decoder_features_spec_example():
    targets = np.array([3, 9, 1, 4, 1, 0, 0])
    segs = np.array([1, 1, 1, 2, 2, 0, 0])
    dec, w = derive_decoder_features(targets, segs)
    assert dec.tolist() == [0, 3, 9, 0, 4, 0, 0]
    assert w.tolist() == [1, 1, 1, 1, 1, 0, 0]
    # concat mode: a plain shift with 0 first; batches work on the last axis
    dec2, w2 = derive_decoder_features(np.array([[5, 6, 1, 0], [7, 1, 0, 0]]))
    assert dec2.tolist() == [[0, 5, 6, 1], [0, 7, 1, 0]]
    assert w2.tolist() == [[1, 1, 1, 0], [1, 1, 0, 0]]


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.tuples(st.integers(1, 12), st.integers(1, 6)), min_size=1, max_size=12))
def test_packed_decoder_inputs_and_masks(lengths):
    examples = make_examples(lengths)
    packed = first_fit_pack(examples, 24, 10, window=8)
    c = packed.columns
    dec, w = derive_decoder_features(c["targets"], c["targets_segment_ids"])
    for r in range(packed.num_rows):
        for s in range(1, int(c["targets_segment_ids"][r].max()) + 1):
            sel = c["targets_segment_ids"][r] == s
            t = c["targets"][r][sel]
            assert dec[r][sel].tolist() == [0] + t[:-1].tolist()  # shift within the segment
        assert np.array_equal(w[r], (c["targets"][r] != 0).astype(np.float32))
    m = attention_masks(
        c["inputs"], c["targets"], c["inputs_segment_ids"], c["targets_segment_ids"]
    )
    es, ts = c["inputs_segment_ids"], c["targets_segment_ids"]
    for r in range(packed.num_rows):
        for q in range(24):
            for k in range(24):
                want = es[r, q] != 0 and es[r, k] != 0 and es[r, q] == es[r, k]
                assert m["encoder_self"][r, q, k] == want
        for q in range(10):
            for k in range(10):
                want = ts[r, q] != 0 and ts[r, k] != 0 and ts[r, q] == ts[r, k] and k <= q
                assert m["decoder_self"][r, q, k] == want
            for k in range(24):
                want = ts[r, q] != 0 and es[r, k] != 0 and ts[r, q] == es[r, k]
                assert m["encoder_decoder"][r, q, k] == want


def test_concat_mode_masks_treat_non_pad_as_one_segment():
    inputs = np.array([[5, 6, 1, 0]])
    targets = np.array([[7, 1, 0]])
    m = attention_masks(inputs, targets)
    assert m["encoder_self"][0].tolist() == [[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]]
    assert m["decoder_self"][0].tolist() == [[1, 0, 0], [1, 1, 0], [0, 0, 0]]
    assert m["encoder_decoder"][0].tolist() == [[1, 1, 1, 0], [1, 1, 1, 0], [0, 0, 0, 0]]


def test_rows_of_per_document_pipeline():
    """Documents → examples → packed rows: each packed segment is one document piece."""
    rng = np.random.default_rng(4)
    docs = [rng.integers(3, 30000, int(n)).tolist() for n in rng.integers(1, 400, 300)]
    cfg = make_config(packing="per_document", inputs_length=128)
    examples = list(shard_examples(docs, clean_shard_index=3, seed=1, config=cfg, vocab_size=32100))
    cols, keys = rows_of(examples, cfg)
    assert set(cols) == set(cfg.columns)
    assert len(keys) == cols["inputs"].shape[0] and keys.dtype == np.uint64
    assert keys[0] == examples[0].key
    assert int(sum(cols["inputs_segment_ids"].max(axis=1))) == len(examples)
    pad = 1 - (cols["inputs"] != 0).mean()
    assert pad < 0.15  # short documents pack densely
