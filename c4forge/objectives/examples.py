"""T5's document pipeline (objectives.md §2) for one clean shard, as a pure function.

documents' token lists (file order) → drop empty → select_random_chunk(65536) → concatenate
groups of 128 (or keep documents apart) → pieces of `tokens_length` → objective → trim + EOS.

Groups never cross a clean shard and every random draw is seeded from
(seed, objective, clean shard, group, piece), so shards can be processed in any order, on any
number of workers, with identical bytes. `rows_of_block` then turns the examples into row
columns.

Two forms of the same examples: `shard_examples` yields one `Example` at a time (tests, other
callers); `example_blocks` / `rows_of_block` keep many examples in flat arrays, which is what
the shard job runs (a Python object per example costs more than its corruption). A test checks
that both give identical examples, counters and rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

import numpy as np

from c4forge.objectives.config import ObjectiveConfig
from c4forge.objectives.functions import (
    RAGGED_MAX_PIECES,
    _views,
    objective_kwargs,
    span_corruption,
    span_corruption_batch,
    span_corruption_ragged_flat,
)
from c4forge.objectives.packing import pack_arrays
from c4forge.objectives.seeding import example_key, example_keys, piece_rng
from c4forge.objectives.transforms import TooManySpans
from c4forge.vocab.vocab import EOS_ID

HOLD_EXAMPLES = 4096  # full-piece examples held back so that group tails batch together
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


def _fit(
    inputs: np.ndarray, targets: np.ndarray, config: ObjectiveConfig, st: dict[str, int]
) -> tuple[np.ndarray, np.ndarray]:
    """One example trimmed to the row lengths (EOS kept last), each trim counted in `st`."""
    if len(inputs) > config.inputs_length:
        inputs = _trim(inputs, config.inputs_length, EOS_ID)
        st["inputs_truncated"] += 1
    if len(targets) > config.targets_length:
        targets = _trim(targets, config.targets_length, EOS_ID)
        st["targets_truncated"] += 1
    return inputs, targets


class ExampleBlock(NamedTuple):
    """Consecutive examples of one clean shard as flat arrays: what the shard job moves around.

    Why: a Python object per example costs more than its corruption does; a block keeps the
    tokens of many examples in two flat int32 arrays (inputs, targets concatenated) with
    their lengths, keys and (group, piece) locations.
    """

    keys: np.ndarray  # uint64
    groups: np.ndarray  # int64
    pieces: np.ndarray  # int64
    inputs: np.ndarray  # int32, concatenated
    in_lens: np.ndarray  # int64
    targets: np.ndarray  # int32, concatenated
    tg_lens: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.keys)

    @classmethod
    def from_examples(cls, examples: Sequence[Example]) -> ExampleBlock:
        n = len(examples)
        return cls(
            np.fromiter((e.key for e in examples), dtype=np.uint64, count=n),
            np.fromiter((e.group for e in examples), dtype=np.int64, count=n),
            np.fromiter((e.piece for e in examples), dtype=np.int64, count=n),
            _flat([e.inputs for e in examples]),
            np.fromiter((len(e.inputs) for e in examples), dtype=np.int64, count=n),
            _flat([e.targets for e in examples]),
            np.fromiter((len(e.targets) for e in examples), dtype=np.int64, count=n),
        )

    def input_views(self) -> list[np.ndarray]:
        return _views(self.inputs, self.in_lens)

    def target_views(self) -> list[np.ndarray]:
        return _views(self.targets, self.tg_lens)

    def examples(self) -> Iterator[Example]:
        for key, i, t, g, p in zip(
            self.keys.tolist(),
            self.input_views(),
            self.target_views(),
            self.groups.tolist(),
            self.pieces.tolist(),
        ):
            yield Example(key, i, t, g, p)

    def take(self, lo: int, hi: int) -> ExampleBlock:
        """Examples lo … hi−1 (views)."""
        ins = np.cumsum(np.r_[0, self.in_lens])
        tgs = np.cumsum(np.r_[0, self.tg_lens])
        return ExampleBlock(
            self.keys[lo:hi],
            self.groups[lo:hi],
            self.pieces[lo:hi],
            self.inputs[ins[lo] : ins[hi]],
            self.in_lens[lo:hi],
            self.targets[tgs[lo] : tgs[hi]],
            self.tg_lens[lo:hi],
        )

    @staticmethod
    def concat(blocks: Sequence[ExampleBlock]) -> ExampleBlock:
        if len(blocks) == 1:
            return blocks[0]
        return ExampleBlock(*(np.concatenate(parts) for parts in zip(*blocks)))


def _flat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays).astype(np.int32, copy=False) if arrays else np.zeros(0, np.int32)


def _streams(
    documents: Iterable[Sequence[int] | np.ndarray],
    config: ObjectiveConfig,
    seed: int,
    clean_shard_index: int,
    st: dict[str, int],
    first_document: int = 0,
) -> Iterator[tuple[np.ndarray, int]]:
    """(token stream, group index) to cut pieces from: §2 steps 1–4.

    Drop empty documents, `select_random_chunk`, optional EOS separator; then either groups of
    `config.concat_documents` concatenated documents, or one document per stream (its index).
    ``first_document``: the clean-shard index of the first document given (a part of a clean
    shard, cut at a group boundary): its documents and groups keep their clean-shard indices,
    which is right when no document before it was empty (``shards.parts`` checks that).
    """
    eos_sep = config.doc_separator == "eos"
    # Config attributes read once (`concatenates` is a property): this loop runs per document.
    chunk_max, concatenates = config.select_random_chunk_max, config.concatenates
    group_size = config.concat_documents
    group: list[np.ndarray] = []
    if concatenates and first_document % group_size:
        raise ValueError(f"a part must start at a group boundary ({group_size} documents)")
    group_index = first_document // group_size if concatenates else 0
    for doc_index, doc in enumerate(documents, first_document):
        st["documents"] += 1
        tokens = np.asarray(doc, dtype=np.int32)
        if len(tokens) == 0:
            st["documents_empty"] += 1
            continue
        if len(tokens) > chunk_max:
            st["documents_chunked"] += 1
            before = len(tokens)
            tokens = select_random_chunk(
                tokens, chunk_max, (seed, CHUNK_STREAM, clean_shard_index, doc_index)
            )
            st["chunk_tokens_dropped"] += before - len(tokens)
        if eos_sep:
            tokens = np.append(tokens, np.int32(EOS_ID))
        st["tokens"] += len(tokens)
        if not concatenates:
            st["groups"] += 1
            yield tokens, doc_index
            continue
        group.append(tokens)
        if len(group) == group_size:
            st["groups"] += 1
            yield np.concatenate(group), group_index
            group, group_index = [], group_index + 1
    if group:
        st["groups"] += 1
        yield np.concatenate(group), group_index


def _check_start(config: ObjectiveConfig, seed: int, clean_shard_index: int) -> None:
    if config.spec.fn is None:
        raise ValueError(f"{config.name} is not a piece objective; use objectives.bert")
    if seed < 0 or clean_shard_index < 0:
        raise ValueError("seed and clean shard index must be >= 0")


def _batched(config: ObjectiveConfig) -> bool:
    return config.spec.vectorised and config.mask == "random"


def shard_examples(
    documents: Iterable[Sequence[int] | np.ndarray],
    *,
    clean_shard_index: int,
    seed: int,
    config: ObjectiveConfig,
    vocab_size: int,
    stats: dict[str, int] | None = None,
    first_document: int = 0,
) -> Iterator[Example]:
    """Examples of one clean shard in deterministic order; counters go into `stats` (see STAT_KEYS).

    `documents` are SentencePiece ids without EOS, in file order. Concat mode: consecutive
    non-empty documents form groups of `config.concat_documents`, and a group's pieces are cut
    from its concatenated stream (only its last piece is short). Otherwise (per_document packing,
    or objectives that never concatenate) the group is one document and `group` is its index.
    """
    _check_start(config, seed, clean_shard_index)
    st = stats if stats is not None else new_stats()
    if _batched(config):
        for block in span_corruption_blocks(
            documents,
            clean_shard_index=clean_shard_index,
            seed=seed,
            config=config,
            vocab_size=vocab_size,
            stats=st,
            first_document=first_document,
        ):
            yield from block.examples()
        return
    spec = config.spec
    params = {
        "vocab_size": vocab_size,
        "noise_density": config.noise_density,
        "mean_noise_span_length": config.mean_noise_span_length,
        "mask": config.mask,
        "extra_ids": config.extra_ids,
    }
    kwargs = objective_kwargs(spec.name, spec.fn, params)  # only what the function declares
    for stream, g in _streams(documents, config, seed, clean_shard_index, st, first_document):
        step = config.tokens_length
        for p in range(-(-len(stream) // step)):
            st["pieces"] += 1
            rng = piece_rng(seed, spec.objective_id, clean_shard_index, g, p)
            try:
                inputs, targets = spec.fn(stream[p * step : (p + 1) * step], rng, **kwargs)
            except TooManySpans:
                st["too_many_spans"] += 1
                continue
            inputs, targets = _fit(inputs, targets, config, st)
            st["examples"] += 1
            yield Example(example_key(seed, clean_shard_index, g, p), inputs, targets, g, p)


def span_corruption_blocks(
    documents: Iterable[Sequence[int] | np.ndarray],
    *,
    clean_shard_index: int,
    seed: int,
    config: ObjectiveConfig,
    vocab_size: int,
    stats: dict[str, int] | None = None,
    first_document: int = 0,
) -> Iterator[ExampleBlock]:
    """Span corruption (random mask) of one clean shard as `ExampleBlock`s, vectorized.

    The full pieces of a concatenated group go through `span_corruption_batch` together;
    other pieces (group tails, per-document pieces) wait and go through the ragged version,
    up to `RAGGED_MAX_PIECES` at a time. Both consume each piece's own generator exactly as
    `span_corruption` does, and blocks come out in piece order, so the examples equal those
    of the one-by-one definition (tests compare them).
    """
    _check_start(config, seed, clean_shard_index)
    st = stats if stats is not None else new_stats()
    corrupt = _SpanCorrupter(config, seed, clean_shard_index, vocab_size, st)
    waiting = _WaitingPieces()
    step = config.tokens_length
    for stream, g in _streams(documents, config, seed, clean_shard_index, st, first_document):
        full = len(stream) // step
        first = 0
        if full and config.concatenates:
            st["pieces"] += full
            block = corrupt.full_pieces(stream[: full * step].reshape(full, step), g)
            if block is not None:
                waiting.add_block(block)
            first = full
        p, end = first, -(-len(stream) // step)
        while p < end:  # the other pieces wait, flushed whenever RAGGED_MAX_PIECES are pending
            take = min(end - p, RAGGED_MAX_PIECES - len(waiting.pending))
            st["pieces"] += take
            waiting.add_pieces(
                [(stream[q * step : (q + 1) * step], g, q) for q in range(p, p + take)]
            )
            p += take
            if len(waiting.pending) >= RAGGED_MAX_PIECES:
                yield from waiting.flush(corrupt.ragged)
        if waiting.held >= HOLD_EXAMPLES:
            yield from waiting.flush(corrupt.ragged)
    yield from waiting.flush(corrupt.ragged)


_Pending = tuple[np.ndarray, int, int]  # (piece tokens, group, piece index)


class _WaitingPieces:
    """The output of `span_corruption_blocks` in piece order while ragged pieces wait.

    `queue` holds, in piece order, ready blocks (a group's full pieces) and ranges of indices
    into `pending` (pieces whose ragged results are not computed yet). Holding a few groups'
    blocks lets the group tails of many groups share one ragged call (one call per tail costs
    ~15x more). `held` counts the examples of the ready blocks.
    """

    def __init__(self) -> None:
        self.pending: list[_Pending] = []
        self.queue: list[ExampleBlock | range] = []
        self.held = 0

    def add_block(self, block: ExampleBlock) -> None:
        self.queue.append(block)
        self.held += len(block)

    def add_pieces(self, pieces: list[_Pending]) -> None:
        at = len(self.pending)
        self.pending.extend(pieces)
        last = self.queue[-1] if self.queue else None
        if isinstance(last, range) and last.stop == at:
            self.queue[-1] = range(last.start, at + len(pieces))
        else:
            self.queue.append(range(at, at + len(pieces)))

    def flush(
        self, ragged: Callable[[list[_Pending]], tuple[np.ndarray, ExampleBlock] | None]
    ) -> Iterator[ExampleBlock]:
        """Everything queued, in order: the pending pieces through one `ragged` call."""
        result = ragged(self.pending) if self.pending else None
        for entry in self.queue:
            if not isinstance(entry, range):
                yield entry
            elif result is not None:
                lo, hi = np.searchsorted(result[0], (entry.start, entry.stop))
                if hi > lo:
                    yield result[1].take(int(lo), int(hi))
        self.queue.clear()
        self.pending.clear()
        self.held = 0


class _SpanCorrupter:
    """Span corruption of one clean shard's pieces into trimmed, counted `ExampleBlock`s, each
    piece from its own generator (seed, objective, clean shard, group, piece)."""

    def __init__(
        self,
        config: ObjectiveConfig,
        seed: int,
        clean_shard_index: int,
        vocab_size: int,
        st: dict[str, int],
    ) -> None:
        self.config, self.seed, self.shard, self.st = config, seed, clean_shard_index, st
        self.oid = config.spec.objective_id
        self.kw = {
            "vocab_size": vocab_size,
            "noise_density": config.noise_density,
            "mean_noise_span_length": config.mean_noise_span_length,
            "extra_ids": config.extra_ids,
            "eos_id": EOS_ID,
        }

    def rng(self, group: int, piece: int) -> np.random.Generator:
        return piece_rng(self.seed, self.oid, self.shard, group, piece)

    def block(self, groups: list[int] | np.ndarray, pieces: list[int] | np.ndarray, *arrays):
        g = np.asarray(groups, dtype=np.int64)
        p = np.asarray(pieces, dtype=np.int64)
        keys = example_keys(self.seed, self.shard, g.tolist(), p.tolist())
        return _trimmed(ExampleBlock(keys, g, p, *arrays), self.config, self.st)

    def full_pieces(self, pieces: np.ndarray, g: int) -> ExampleBlock | None:
        """All full pieces (P, L) of group `g` in one vectorized pass; same draws as one by
        one. None when they need more sentinels than there are (all pieces share a shape)."""
        full = len(pieces)
        rngs = (self.rng(g, p) for p in range(full))
        try:
            ins, tgs = span_corruption_batch(pieces, rngs, **self.kw)
        except TooManySpans:
            self.st["too_many_spans"] += full
            return None
        return self.block(
            np.full(full, g),
            np.arange(full),
            ins.ravel(),
            np.full(full, ins.shape[1], dtype=np.int64),
            tgs.ravel(),
            np.full(full, tgs.shape[1], dtype=np.int64),
        )

    def ragged(self, pending: list[_Pending]) -> tuple[np.ndarray, ExampleBlock] | None:
        """Results of the pending pieces that fit, and their pending indices (ascending)."""
        st = self.st
        multi = [i for i, item in enumerate(pending) if len(item[0]) >= 2]
        items = pending if len(multi) == len(pending) else [pending[i] for i in multi]
        rngs = (self.rng(g, p) for _, g, p in items)
        flat = span_corruption_ragged_flat([item[0] for item in items], rngs, **self.kw)
        st["too_many_spans"] += len(multi) - (0 if flat is None else len(flat[0]))
        if len(multi) == len(pending):  # the usual case: no 1-token piece
            if flat is None:
                return None
            ok, ins, in_lens, tgs, tg_lens = flat
            gs = [pending[i][1] for i in ok.tolist()]
            ps = [pending[i][2] for i in ok.tolist()]
            return ok, self.block(gs, ps, ins, in_lens, tgs, tg_lens)
        # A 1-token piece (span_corruption's L = 1 rule) among them: assemble in order.
        done: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if flat is not None:
            ok, ins, in_lens, tgs, tg_lens = flat
            pairs = zip(_views(ins, in_lens), _views(tgs, tg_lens))
            done = {multi[j]: pair for j, pair in zip(ok.tolist(), pairs)}
        out: list[tuple[int, int, int, np.ndarray, np.ndarray]] = []
        for i, (piece, g, p) in enumerate(pending):
            if i in done:
                out.append((i, g, p, *done[i]))
            elif len(piece) < 2:
                out.append((i, g, p, *span_corruption(piece, self.rng(g, p), **self.kw)))
        if not out:
            return None
        return np.array([o[0] for o in out], dtype=np.int64), self.block(
            [o[1] for o in out],
            [o[2] for o in out],
            _flat([o[3] for o in out]),
            np.array([len(o[3]) for o in out], dtype=np.int64),
            _flat([o[4] for o in out]),
            np.array([len(o[4]) for o in out], dtype=np.int64),
        )


def _trimmed(block: ExampleBlock, config: ObjectiveConfig, st: dict[str, int]) -> ExampleBlock:
    """Count the block's examples; trim any longer than the row lengths (EOS kept last)."""
    st["examples"] += len(block)
    if (not len(block)) or (
        block.in_lens.max() <= config.inputs_length and block.tg_lens.max() <= config.targets_length
    ):
        return block
    examples = list(block.examples())
    fixed = []
    for e in examples:
        inputs, targets = _fit(e.inputs, e.targets, config, st)
        fixed.append(e._replace(inputs=inputs, targets=targets))
    return ExampleBlock.from_examples(fixed)


def example_blocks(
    documents: Iterable[Sequence[int] | np.ndarray],
    *,
    clean_shard_index: int,
    seed: int,
    config: ObjectiveConfig,
    vocab_size: int,
    stats: dict[str, int] | None = None,
    block_examples: int = 512,
    first_document: int = 0,
) -> Iterator[ExampleBlock]:
    """`shard_examples` as blocks: vectorized for span corruption, grouped otherwise."""
    kw = {
        "clean_shard_index": clean_shard_index,
        "seed": seed,
        "config": config,
        "vocab_size": vocab_size,
        "stats": stats,
        "first_document": first_document,
    }
    if _batched(config):
        yield from span_corruption_blocks(documents, **kw)
        return
    pending: list[Example] = []
    for ex in shard_examples(documents, **kw):
        pending.append(ex)
        if len(pending) == block_examples:
            yield ExampleBlock.from_examples(pending)
            pending = []
    if pending:
        yield ExampleBlock.from_examples(pending)


def rows_of_block(
    block: ExampleBlock, config: ObjectiveConfig, dtype: Any = np.int32
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(columns, row keys) for a block of one clean shard's examples, in example order.

    concat: one padded row per example, key = the example's key. per_document: first-fit rows
    over windows of `config.pack_window` examples, key = the key of the row's first example.
    Columns are `config.columns`; callers sort rows by key and cast to the shard's token dtype.
    """
    if config.packing == "concat":
        return {
            "inputs": _rows(block.inputs, block.in_lens, config.inputs_length, dtype, "inputs"),
            "targets": _rows(block.targets, block.tg_lens, config.targets_length, dtype, "targets"),
        }, block.keys
    packed = pack_arrays(
        block.input_views(),
        block.target_views(),
        config.inputs_length,
        config.targets_length,
        window=config.pack_window or 512,
        dtype=dtype,
    )
    return packed.columns, block.keys[packed.first_example]


def _rows(flat: np.ndarray, lens: np.ndarray, width: int, dtype: Any, name: str) -> np.ndarray:
    """Zero-padded rows; a block of full-width examples is a plain reshape."""
    if len(lens) and (lens.max() > width or lens.min() < 1):
        raise ValueError(f"{name} length outside 1..{width}")
    if len(lens) and lens.min() == width:
        return flat.reshape(-1, width).astype(dtype)
    out = np.zeros((len(lens), width), dtype=dtype)
    out[np.arange(width)[None, :] < lens[:, None]] = flat
    return out


# ----------------------------------------------------------------------------- the example builder

ENCODE_BATCH = 256  # documents per SentencePiece batch call


def encoded_documents(texts: Iterable[str], vocab: Any) -> Iterator[np.ndarray]:
    """SentencePiece ids (int32 arrays) of each document, in order, encoded in batches."""
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) == ENCODE_BATCH:
            yield from vocab.encode_arrays(batch)
            batch = []
    if batch:
        yield from vocab.encode_arrays(batch)


def block_chunks(
    blocks: Iterable[ExampleBlock], size: int, *, exact: bool
) -> Iterator[ExampleBlock]:
    """Regroup ExampleBlocks into chunks of ``size`` examples (``exact``) or at least ``size``."""
    pending: list[ExampleBlock] = []
    count = 0
    for b in blocks:
        pending.append(b)
        count += len(b)
        while count >= size:
            merged = ExampleBlock.concat(pending)
            cut = size if exact else count
            yield merged.take(0, cut) if cut < count else merged
            pending = [merged.take(cut, count)] if cut < count else []
            count -= cut
    if count:
        yield ExampleBlock.concat(pending)


def piece_rows(
    texts: Iterable[str],
    vocab: Any,
    *,
    clean_shard_index: int,
    seed: int,
    config: ObjectiveConfig,
    stats: dict[str, int],
    dtype: Any,
    chunk_examples: int,
    first_document: int = 0,
) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    """The T5 objectives' example builder (objectives.RowBuilder): rows of one clean shard, or
    of its documents from ``first_document`` on (``ObjectiveConfig.splittable``).

    Per-document packing windows are counted from the clean shard's first example; chunks hold
    a whole number of windows, so chunking never changes which examples share a window (and a
    part of a clean shard cannot know where its windows start: such builds are not split).
    """
    if first_document and not config.splittable:
        raise ValueError(f"{config.name} with --packing {config.packing} cannot start mid-shard")
    blocks = example_blocks(
        encoded_documents(texts, vocab),
        clean_shard_index=clean_shard_index,
        seed=seed,
        config=config,
        vocab_size=vocab.vocab_size,
        stats=stats,
        first_document=first_document,
    )
    if config.packing == "per_document":
        window = config.pack_window or 512
        chunks = block_chunks(blocks, max(1, chunk_examples // window) * window, exact=True)
    else:  # one row per example: where a chunk ends changes nothing
        chunks = block_chunks(blocks, chunk_examples, exact=False)
    for examples in chunks:
        yield rows_of_block(examples, config, dtype=dtype)
