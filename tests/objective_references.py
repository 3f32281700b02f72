"""Test-only references of the objectives and packing code: simpler or list-based versions
the package's fast paths are checked against (seqio's next-fit row count, a numpy decoder
shift and attention masks, per-example packing and padding, per-piece ragged span
corruption). They are not used by any command, so they live with the tests."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from c4forge.objectives.config import ObjectiveConfig
from c4forge.objectives.examples import Example
from c4forge.objectives.functions import _views, span_corruption_ragged_flat
from c4forge.objectives.noise import composition_from_uniforms
from c4forge.objectives.packing import PackedRows, _lengths, _prefix_rows, pack_arrays
from c4forge.vocab.vocab import EOS_ID


def _split_pairs(examples: Sequence[Any]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Accept `(inputs, targets)` pairs or objects with `.inputs` / `.targets` (e.g. `Example`)."""
    if not examples:
        return [], []
    if hasattr(examples[0], "inputs"):
        return [e.inputs for e in examples], [e.targets for e in examples]
    return [e[0] for e in examples], [e[1] for e in examples]


def pad_concat(
    examples: Sequence[Any], inputs_length: int, targets_length: int, dtype: Any = np.int32
) -> dict[str, np.ndarray]:
    """`--packing concat`: one example per row, zero-padded to the row widths (T5's default)."""
    ins, tgs = _split_pairs(examples)
    return {
        "inputs": _prefix_rows(ins, _lengths(ins, inputs_length, "inputs"), inputs_length, dtype),
        "targets": _prefix_rows(
            tgs, _lengths(tgs, targets_length, "targets"), targets_length, dtype
        ),
    }


def first_fit_pack(
    examples: Sequence[Any],
    inputs_length: int,
    targets_length: int,
    window: int = 512,
    dtype: Any = np.int32,
) -> PackedRows:
    """`--packing per_document`: first-fit packing with segment ids and positions (§5.2).

    Segment ids are 1, 2, … in placement order within a row, the same on encoder and decoder
    side; positions restart at 0 per segment; padding (0) is trailing. Deterministic.
    """
    ins, tgs = _split_pairs(examples)
    return pack_arrays(ins, tgs, inputs_length, targets_length, window=window, dtype=dtype)


def next_fit_row_count(
    in_lens: Sequence[int],
    tg_lens: Sequence[int],
    inputs_length: int,
    targets_length: int,
    window: int = 512,
) -> int:
    """Rows seqio-style next-fit would use on the same windows (one open row; the §6.9 yardstick)."""
    rows = 0
    for w0 in range(0, len(in_lens), window):
        rem_in = rem_tg = -1
        for li, lt in zip(in_lens[w0 : w0 + window], tg_lens[w0 : w0 + window]):
            if li > rem_in or lt > rem_tg:
                rows += 1
                rem_in, rem_tg = inputs_length, targets_length
            rem_in -= li
            rem_tg -= lt
    return rows


def derive_decoder_features(
    targets: np.ndarray, targets_segment_ids: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(decoder_input_tokens, decoder_loss_weights) of §5.3, for one row or a batch (last axis).

    With segment ids: shift right within each segment, 0 at a segment start and on padding.
    Without (concat mode): a plain shift with 0 first, as seqio does (the position after EOS
    then holds EOS, harmless since its weight is 0 and padding attends to nothing).
    """
    targets = np.asarray(targets)
    dec = np.zeros_like(targets)
    dec[..., 1:] = targets[..., :-1]
    if targets_segment_ids is not None:
        seg = np.asarray(targets_segment_ids)
        starts = np.ones(seg.shape, dtype=bool)
        starts[..., 1:] = seg[..., 1:] != seg[..., :-1]
        dec[starts | (seg == 0)] = 0
    weights = (targets != 0).astype(np.float32)
    return dec, weights


def attention_masks(
    inputs: np.ndarray,
    targets: np.ndarray,
    inputs_segment_ids: np.ndarray | None = None,
    targets_segment_ids: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Boolean (…, query, key) masks of §5.4 — the numpy reference for the trainer's version.

    Without segment columns every non-pad token has segment 1. Padding rows/columns are False.
    """
    inputs, targets = np.asarray(inputs), np.asarray(targets)
    enc = (
        np.asarray(inputs_segment_ids)
        if inputs_segment_ids is not None
        else (inputs != 0).astype(np.int64)
    )
    dec = (
        np.asarray(targets_segment_ids)
        if targets_segment_ids is not None
        else (targets != 0).astype(np.int64)
    )
    enc_real, dec_real = inputs != 0, targets != 0
    enc = np.where(enc_real, enc, 0)
    dec = np.where(dec_real, dec, 0)
    lt = targets.shape[-1]
    causal = np.tril(np.ones((lt, lt), dtype=bool))
    return {
        "encoder_self": (enc[..., :, None] == enc[..., None, :])
        & enc_real[..., :, None]
        & enc_real[..., None, :],
        "decoder_self": (
            (dec[..., :, None] == dec[..., None, :])
            & dec_real[..., :, None]
            & dec_real[..., None, :]
            & causal
        ),
        "encoder_decoder": (dec[..., :, None] == enc[..., None, :])
        & dec_real[..., :, None]
        & enc_real[..., None, :],
    }


def rows_of(
    examples: Sequence[Example], config: ObjectiveConfig, dtype: Any = np.int32
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(columns, row keys) for the examples of one clean shard, in example order.

    concat: one padded row per example, key = the example's key. per_document: first-fit rows
    over windows of `config.pack_window` examples, key = the key of the row's first example.
    Columns are `config.columns`; callers sort rows by key and cast to the shard's token dtype.
    """
    keys = np.fromiter((e.key for e in examples), dtype=np.uint64, count=len(examples))
    if config.packing == "concat":
        return pad_concat(examples, config.inputs_length, config.targets_length, dtype), keys
    packed = first_fit_pack(
        examples,
        config.inputs_length,
        config.targets_length,
        window=config.pack_window or 512,
        dtype=dtype,
    )
    return packed.columns, keys[packed.first_example]


def span_corruption_ragged(
    pieces: Sequence[np.ndarray],
    rngs: Iterable[np.random.Generator],
    *,
    vocab_size: int,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
    extra_ids: int = 100,
    eos_id: int = EOS_ID,
) -> list[tuple[np.ndarray, np.ndarray] | None]:
    """Span corruption of up to 512 pieces of different lengths (each ≥ 2) in one vectorized pass.

    Row i consumes the same draws as `span_corruption(pieces[i], rng_i)` and gives the same
    example (the cut set is "the s−1 smallest draws" either way; here found for all pieces at
    once by `smallest_per_segment` instead of a per-piece argpartition). Pieces needing more
    than `extra_ids` sentinels give None (the caller counts them).
    """
    flat = span_corruption_ragged_flat(
        pieces,
        rngs,
        vocab_size=vocab_size,
        noise_density=noise_density,
        mean_noise_span_length=mean_noise_span_length,
        extra_ids=extra_ids,
        eos_id=eos_id,
    )
    results: list[tuple[np.ndarray, np.ndarray] | None] = [None] * len(pieces)
    if flat is None:
        return results
    ok, inputs, in_lens, targets, tg_lens = flat
    for i, a, b in zip(ok.tolist(), _views(inputs, in_lens), _views(targets, tg_lens)):
        results[i] = (a, b)
    return results


def random_composition(total: int, parts: int, rng: np.random.Generator) -> np.ndarray:
    """One uniform composition, drawing `total − 1` uniforms from `rng`."""
    return composition_from_uniforms(rng.random(max(total - 1, 0)), total, parts)
