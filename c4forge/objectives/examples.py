"""T5's document pipeline (objectives.md §2) for one clean shard, as a pure function.

documents' token lists (file order) → drop empty → select_random_chunk(65536) → concatenate
groups of 128 (or keep documents apart) → pieces of `tokens_length` → objective → trim + EOS.

Groups never cross a clean shard and every random draw is seeded from
(seed, objective, clean shard, group, piece), so shards can be processed in any order, on any
number of workers, with identical bytes. `rows_of` then turns the examples into row columns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from c4forge.objectives.functions import (
    RAGGED_MAX_PIECES,
    span_corruption_batch,
    span_corruption_ragged,
)
from c4forge.objectives.packing import first_fit_pack, pad_concat
from c4forge.objectives.registry import ObjectiveConfig
from c4forge.objectives.seeding import example_key, piece_rng
from c4forge.objectives.transforms import TooManySpans

EOS_ID = 1
CHUNK_STREAM = 1_000_003  # seed slot marking select_random_chunk draws (objective-independent)

STAT_KEYS = (
    "documents",
    "documents_empty",
    "documents_chunked",
    "chunk_tokens_dropped",
    "tokens",
    "groups",
    "pieces",
    "examples",
    "too_many_spans",
    "inputs_truncated",
    "targets_truncated",
)


def new_stats() -> dict[str, int]:
    return dict.fromkeys(STAT_KEYS, 0)


class Example(NamedTuple):
    """One corrupted piece: `key` orders rows in shards; `group`/`piece` locate it in the shard."""

    key: int
    inputs: np.ndarray
    targets: np.ndarray
    group: int
    piece: int


def select_random_chunk(tokens: np.ndarray, max_length: int, rng_seed: Sequence[int]) -> np.ndarray:
    """T5: keep one aligned window `start = max_length·U{0…ceil(n/max_length)−1}` of a long document."""
    n = len(tokens)
    if n <= max_length:
        return tokens
    k = int(np.random.default_rng(list(rng_seed)).integers(0, math.ceil(n / max_length)))
    return tokens[k * max_length : (k + 1) * max_length]


def _trim(arr: np.ndarray, length: int, eos_id: int) -> np.ndarray:
    out = arr[:length].copy()
    out[-1] = eos_id
    return out


def shard_examples(
    documents: Iterable[Sequence[int] | np.ndarray],
    *,
    clean_shard_index: int,
    seed: int,
    config: ObjectiveConfig,
    vocab_size: int,
    stats: dict[str, int] | None = None,
) -> Iterator[Example]:
    """Examples of one clean shard in deterministic order; counters go into `stats` (see STAT_KEYS).

    `documents` are SentencePiece ids without EOS, in file order. Concat mode: consecutive
    non-empty documents form groups of `config.concat_documents`, and a group's pieces are cut
    from its concatenated stream (only its last piece is short). Otherwise (per_document packing,
    or objectives that never concatenate) the group is one document and `group` is its index.
    """
    spec = config.spec
    if spec.fn is None:
        raise ValueError(f"{config.name} is not a piece objective; use objectives.bert")
    if seed < 0 or clean_shard_index < 0:
        raise ValueError("seed and clean shard index must be >= 0")
    st = stats if stats is not None else new_stats()
    eos_sep = config.doc_separator == "eos"
    group: list[np.ndarray] = []
    group_index = 0

    batched = config.name == "span_corruption" and config.mask == "random"

    def finish(inputs: np.ndarray, targets: np.ndarray, g: int, p: int) -> Example:
        if len(inputs) > config.inputs_length:
            inputs = _trim(inputs, config.inputs_length, EOS_ID)
            st["inputs_truncated"] += 1
        if len(targets) > config.targets_length:
            targets = _trim(targets, config.targets_length, EOS_ID)
            st["targets_truncated"] += 1
        st["examples"] += 1
        return Example(example_key(seed, clean_shard_index, g, p), inputs, targets, g, p)

    def corrupt_one(piece: np.ndarray, g: int, p: int) -> tuple[np.ndarray, np.ndarray] | None:
        rng = piece_rng(seed, spec.objective_id, clean_shard_index, g, p)
        try:
            return spec.fn(
                piece,
                rng,
                vocab_size=vocab_size,
                noise_density=config.noise_density,
                mean_noise_span_length=config.mean_noise_span_length,
                mask=config.mask,
                extra_ids=config.extra_ids,
            )
        except TooManySpans:
            return None

    # Pieces of unequal length (per-document pieces, group tails) wait here and are corrupted
    # RAGGED_MAX_PIECES at a time; they are yielded in their original order.
    pending: list[tuple[np.ndarray, int, int]] = []

    def flush() -> Iterator[Example]:
        items = pending[:]
        pending.clear()
        multi = [i for i, item in enumerate(items) if len(item[0]) >= 2]
        results = span_corruption_ragged(
            [items[i][0] for i in multi],
            (
                piece_rng(seed, spec.objective_id, clean_shard_index, items[i][1], items[i][2])
                for i in multi
            ),
            vocab_size=vocab_size,
            noise_density=config.noise_density,
            mean_noise_span_length=config.mean_noise_span_length,
            extra_ids=config.extra_ids,
            eos_id=EOS_ID,
        )
        done = dict(zip(multi, results))
        for i, (piece, g, p) in enumerate(items):
            res = done[i] if i in done else corrupt_one(piece, g, p)
            if res is None:
                st["too_many_spans"] += 1
                continue
            yield finish(res[0], res[1], g, p)

    def emit(stream: np.ndarray, g: int) -> Iterator[Example]:
        st["groups"] += 1
        step = config.tokens_length
        first = 0
        full = len(stream) // step
        if batched and full and config.concatenates:
            # All full pieces of the group in one vectorized pass; same draws as one by one.
            yield from flush()
            st["pieces"] += full
            rngs = (
                piece_rng(seed, spec.objective_id, clean_shard_index, g, p) for p in range(full)
            )
            try:
                ins, tgs = span_corruption_batch(
                    stream[: full * step].reshape(full, step),
                    rngs,
                    vocab_size=vocab_size,
                    noise_density=config.noise_density,
                    mean_noise_span_length=config.mean_noise_span_length,
                    extra_ids=config.extra_ids,
                    eos_id=EOS_ID,
                )
                for p in range(full):
                    yield finish(ins[p], tgs[p], g, p)
            except TooManySpans:
                st["too_many_spans"] += full
            first = full
        for p in range(first, -(-len(stream) // step)):
            piece = stream[p * step : (p + 1) * step]
            st["pieces"] += 1
            if batched:
                pending.append((piece, g, p))
                if len(pending) >= RAGGED_MAX_PIECES:
                    yield from flush()
                continue
            res = corrupt_one(piece, g, p)
            if res is None:
                st["too_many_spans"] += 1
                continue
            yield finish(res[0], res[1], g, p)

    for doc_index, doc in enumerate(documents):
        st["documents"] += 1
        tokens = np.asarray(doc, dtype=np.int32)
        if len(tokens) == 0:
            st["documents_empty"] += 1
            continue
        if len(tokens) > config.select_random_chunk_max:
            st["documents_chunked"] += 1
            before = len(tokens)
            tokens = select_random_chunk(
                tokens,
                config.select_random_chunk_max,
                (seed, CHUNK_STREAM, clean_shard_index, doc_index),
            )
            st["chunk_tokens_dropped"] += before - len(tokens)
        if eos_sep:
            tokens = np.append(tokens, np.int32(EOS_ID))
        st["tokens"] += len(tokens)
        if not config.concatenates:
            yield from emit(tokens, doc_index)
            continue
        group.append(tokens)
        if len(group) == config.concat_documents:
            yield from emit(np.concatenate(group), group_index)
            group, group_index = [], group_index + 1
    if group:
        yield from emit(np.concatenate(group), group_index)
    yield from flush()


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
