"""BERT's own MLM + NSP (objectives.md §4.1), after google-research/bert `create_pretraining_data.py`.

Works on documents as lists of sentences (token ids), not on pieces. Specials come from the top
extra ids — [MASK] = V−1, [CLS] = V−2, [SEP] = V−3 (a T5 vocabulary has no BERT specials); pad 0.

Differences from the reference, all deliberate:
- randomness: one generator per (seed, clean shard, document, dupe) instead of one global
  `random.Random(12345)`, so clean shards build independently; random "next" documents are
  drawn from the same clean shard. Draws are batched per instance (e.g. all front/back choices
  of a truncation at once); the distributions are the reference's.
- whole-word masking is not implemented (the reference default is off).
- documents are not shuffled and instances not shuffled: rows are ordered by key downstream.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from c4forge.objectives.config import ObjectiveConfig, chunked
from c4forge.objectives.packing import _prefix_rows
from c4forge.objectives.seeding import example_key, piece_rng

BERT_OBJECTIVE_ID = 7
BERT_STAT_KEYS = (
    "documents",
    "documents_empty",
    "sentences",
    "instances",
    "random_next",
    "truncated_tokens",
    "masked",
)


@dataclass
class BertInstance:
    key: int
    input_ids: np.ndarray  # [CLS] A [SEP] B [SEP]
    token_type_ids: np.ndarray
    masked_lm_positions: np.ndarray  # sorted
    masked_lm_ids: np.ndarray  # original ids at those positions
    next_sentence_label: int  # 1 = B is random
    document: int
    index: int


def split_document(text: str) -> list[str]:
    """Sentences of a clean document: Punkt on each line (the clean pipeline's splitter)."""
    from c4forge.rules.sentences import split_sentences

    return [
        s for line in text.split("\n") if line.strip() for s in split_sentences(line) if s.strip()
    ]


def _truncate(
    la: int, lb: int, max_tokens: int, rng: np.random.Generator
) -> tuple[int, int, int, int]:
    """BERT's truncate_seq_pair as offsets: (a_front, a_back, b_front, b_back) tokens removed.

    One removal at a time from the longer side (B on ties), front or back with p = 0.5.
    """
    excess = la + lb - max_tokens
    if excess <= 0:
        return 0, 0, 0, 0
    fronts = rng.random(excess) < 0.5
    cut = [0, 0, 0, 0]
    for front in fronts.tolist():
        if la > lb:
            la -= 1
            cut[0 if front else 1] += 1
        else:
            lb -= 1
            cut[2 if front else 3] += 1
    return cut[0], cut[1], cut[2], cut[3]


def _mask(
    tokens: np.ndarray,
    len_a: int,
    rng: np.random.Generator,
    *,
    mask_id: int,
    num_pieces: int,
    masked_lm_prob: float,
    max_predictions: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """create_masked_lm_predictions: 80 % [MASK], 10 % unchanged, 10 % random ordinary piece."""
    n = len(tokens)
    special = np.zeros(n, dtype=bool)
    special[[0, len_a + 1, n - 1]] = True
    candidates = rng.permutation(np.flatnonzero(~special))
    num = min(max_predictions, max(1, round(n * masked_lm_prob)), len(candidates))
    chosen = candidates[:num]
    r_mask = rng.random(num)
    r_keep = rng.random(num)
    random_ids = rng.integers(3, num_pieces, num)
    replacement = np.where(
        r_mask < 0.8, mask_id, np.where(r_keep < 0.5, tokens[chosen], random_ids)
    )
    out = tokens.copy()
    out[chosen] = replacement
    order = np.argsort(chosen)
    positions = chosen[order]
    return out, positions, tokens[positions]


def bert_mlm_nsp(
    documents: Sequence[Sequence[Sequence[int]]],
    *,
    clean_shard_index: int,
    seed: int,
    config: ObjectiveConfig,
    vocab_size: int,
    stats: dict[str, int] | None = None,
) -> Iterator[BertInstance]:
    """Instances of one clean shard: for each dupe, for each document (sentences of token ids)."""
    if config.name != "bert_mlm_nsp":
        raise ValueError(f"config is for {config.name}, not bert_mlm_nsp")
    st = stats if stats is not None else dict.fromkeys(BERT_STAT_KEYS, 0)
    mask_id, cls_id, sep_id = vocab_size - 1, vocab_size - 2, vocab_size - 3
    num_pieces = vocab_size - config.extra_ids
    max_seq = config.inputs_length
    max_tokens = max_seq - 3
    max_pred = config.option("max_predictions_per_seq")
    short_prob = config.option("short_seq_prob")
    docs: list[list[np.ndarray]] = []
    index_of: list[int] = []  # position in `docs` → original document index
    for i, doc in enumerate(documents):
        st["documents"] += 1
        sents = [np.asarray(s, dtype=np.int32) for s in doc if len(s)]
        if not sents:
            st["documents_empty"] += 1
            continue
        st["sentences"] += len(sents)
        docs.append(sents)
        index_of.append(i)
    for dupe in range(config.option("dupe_factor")):
        for d, document in enumerate(docs):
            rng = piece_rng(seed, BERT_OBJECTIVE_ID, clean_shard_index, index_of[d], dupe)
            target = max_tokens
            if rng.random() < short_prob:
                target = int(rng.integers(2, max_tokens + 1))
            chunk: list[np.ndarray] = []
            length = 0
            made = 0
            i = 0
            while i < len(document):
                chunk.append(document[i])
                length += len(document[i])
                if i == len(document) - 1 or length >= target:
                    a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
                    tokens_a = np.concatenate(chunk[:a_end])
                    if len(chunk) == 1 or rng.random() < 0.5:
                        is_random = 1
                        target_b = target - len(tokens_a)
                        other = d
                        for _ in range(10):
                            other = int(rng.integers(0, len(docs)))
                            if other != d:
                                break
                        rdoc = docs[other]
                        start = int(rng.integers(0, len(rdoc)))
                        parts, got = [], 0
                        for s in rdoc[start:]:
                            parts.append(s)
                            got += len(s)
                            if got >= target_b:
                                break
                        tokens_b = np.concatenate(parts)
                        i -= len(chunk) - a_end  # put the unused sentences back
                    else:
                        is_random = 0
                        tokens_b = np.concatenate(chunk[a_end:])
                    fa, ba, fb, bb = _truncate(len(tokens_a), len(tokens_b), max_tokens, rng)
                    st["truncated_tokens"] += fa + ba + fb + bb
                    tokens_a = tokens_a[fa : len(tokens_a) - ba]
                    tokens_b = tokens_b[fb : len(tokens_b) - bb]
                    la, lb = len(tokens_a), len(tokens_b)
                    ids = np.empty(la + lb + 3, dtype=np.int32)
                    ids[0], ids[la + 1], ids[-1] = cls_id, sep_id, sep_id
                    ids[1 : la + 1] = tokens_a
                    ids[la + 2 : -1] = tokens_b
                    types = np.zeros(len(ids), dtype=np.int32)
                    types[la + 2 :] = 1
                    masked, positions, labels = _mask(
                        ids,
                        la,
                        rng,
                        mask_id=mask_id,
                        num_pieces=num_pieces,
                        masked_lm_prob=0.15,
                        max_predictions=max_pred,
                    )
                    st["instances"] += 1
                    st["random_next"] += is_random
                    st["masked"] += len(positions)
                    piece = (dupe << 32) | made
                    yield BertInstance(
                        example_key(seed, clean_shard_index, index_of[d], piece),
                        masked,
                        types,
                        positions.astype(np.int32),
                        labels.astype(np.int32),
                        is_random,
                        index_of[d],
                        made,
                    )
                    made += 1
                    chunk, length = [], 0
                i += 1


def bert_rows(
    instances: Sequence[BertInstance], config: ObjectiveConfig, dtype: Any = np.int32
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(columns of formats.md §3.2's bert table, keys); predictions padded with 0 / 0 / 0.0."""
    max_seq, max_pred = config.inputs_length, config.option("max_predictions_per_seq")
    ids = [x.input_ids for x in instances]
    lens = np.array([len(x) for x in ids], dtype=np.int64)
    plens = np.array([len(x.masked_lm_positions) for x in instances], dtype=np.int64)
    cols = {
        "input_ids": _prefix_rows(ids, lens, max_seq, dtype),
        "token_type_ids": _prefix_rows(
            [x.token_type_ids for x in instances], lens, max_seq, np.uint8
        ),
        "masked_lm_positions": _prefix_rows(
            [x.masked_lm_positions for x in instances], plens, max_pred, dtype
        ),
        "masked_lm_ids": _prefix_rows([x.masked_lm_ids for x in instances], plens, max_pred, dtype),
        "masked_lm_weights": (np.arange(max_pred)[None, :] < plens[:, None]).astype(np.float32),
        "next_sentence_label": np.array([x.next_sentence_label for x in instances], dtype=np.uint8),
    }
    keys = np.fromiter((x.key for x in instances), dtype=np.uint64, count=len(instances))
    return cols, keys


def sentence_documents(texts: Iterable[str], vocab: Any) -> Iterator[list[np.ndarray]]:
    """Each document as the ids of its Punkt sentences (objectives.md §4.1).

    Sentences of ``ENCODE_BATCH`` documents go to SentencePiece in one batch call; each
    sentence is encoded on its own (so each starts with the dummy-prefix ``▁``, as BERT's
    per-line tokenization does).
    """
    from c4forge.objectives.examples import ENCODE_BATCH

    sentences: list[str] = []
    counts: list[int] = []

    def flush() -> Iterator[list[np.ndarray]]:
        ids = vocab.encode_arrays(sentences)
        at = 0
        for n in counts:
            yield ids[at : at + n]
            at += n

    for text in texts:
        sents = split_document(text)
        sentences.extend(sents)
        counts.append(len(sents))
        if len(counts) == ENCODE_BATCH:
            yield from flush()
            sentences, counts = [], []
    if counts:
        yield from flush()


def bert_row_blocks(
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
    """bert_mlm_nsp's example builder (objectives.RowBuilder): rows of one clean shard.

    Random "next" sentences come from any document of the clean shard: all of its documents
    are held (as token arrays) while its instances are made, so a build is never cut into
    parts (``first_document`` is always 0: ``ObjectiveConfig.splittable`` is False).
    """
    if first_document:
        raise ValueError("bert_mlm_nsp rows cannot start mid-shard")
    docs = list(sentence_documents(texts, vocab))
    instances = bert_mlm_nsp(
        docs,
        clean_shard_index=clean_shard_index,
        seed=seed,
        config=config,
        vocab_size=vocab.vocab_size,
        stats=stats,
    )
    for pending in chunked(instances, chunk_examples):
        yield bert_rows(pending, config, dtype=dtype)
