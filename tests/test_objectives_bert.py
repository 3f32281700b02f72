"""BERT's MLM + NSP rows (objectives.md §4.1)."""

from __future__ import annotations

import numpy as np
import pytest

from c4forge.objectives import make_config
from c4forge.objectives.bert import BERT_STAT_KEYS, bert_mlm_nsp, bert_rows, split_document

V, EXTRA = 1100, 100
NUM_PIECES = V - EXTRA
MASK, CLS, SEP = V - 1, V - 2, V - 3


def make_docs(n_docs: int = 40, seed: int = 0) -> list[list[list[int]]]:
    """Documents whose token stream is a run of consecutive ids, so slices are easy to trace."""
    rng = np.random.default_rng(seed)
    docs, nxt = [], 3
    for _ in range(n_docs):
        sents = []
        for _ in range(int(rng.integers(1, 12))):
            k = int(rng.integers(3, 40))
            sents.append([(nxt + j) % (NUM_PIECES - 3) + 3 for j in range(k)])
            nxt += k
        docs.append(sents)
    return docs


def stream_of(doc: list[list[int]]) -> list[int]:
    return [t for s in doc for t in s]


def is_slice(part: list[int], whole: list[int]) -> bool:
    if not part:
        return False
    i = whole.index(part[0]) if part[0] in whole else -1
    return i >= 0 and whole[i : i + len(part)] == part


def test_instances_follow_the_reference_layout():
    docs = make_docs()
    docs.insert(5, [])  # empty document: counted, skipped
    cfg = make_config("bert_mlm_nsp")
    # Counters initialised the way callers do (c4forge.shards.rows): a key the job uses but the public
    # list lacks fails here with a KeyError.
    stats: dict[str, int] = dict.fromkeys(BERT_STAT_KEYS, 0)
    inst = list(
        bert_mlm_nsp(docs, clean_shard_index=0, seed=0, config=cfg, vocab_size=V, stats=stats)
    )
    assert (
        stats["documents"] == 41
        and stats["documents_empty"] == 1
        and stats["instances"] == len(inst)
    )
    mask_kinds = {"mask": 0, "same": 0, "random": 0}
    for x in inst:
        ids = x.input_ids
        assert len(ids) <= 128 and ids[0] == CLS and ids[-1] == SEP
        assert np.count_nonzero(ids == SEP) == 2 and np.count_nonzero(ids == CLS) == 1
        first_sep = int(np.flatnonzero(ids == SEP)[0])
        assert x.token_type_ids.tolist() == [0] * (first_sep + 1) + [1] * (len(ids) - first_sep - 1)
        n = len(ids)
        assert len(x.masked_lm_positions) == min(20, max(1, round(n * 0.15)))
        pos = x.masked_lm_positions
        assert np.all(np.diff(pos) > 0) and not np.isin(pos, [0, first_sep, n - 1]).any()
        original = ids.copy()
        original[pos] = x.masked_lm_ids
        for p, lab in zip(pos.tolist(), x.masked_lm_ids.tolist()):
            got = int(ids[p])
            mask_kinds["mask" if got == MASK else "same" if got == lab else "random"] += 1
            assert got == MASK or 3 <= got < NUM_PIECES
        a = original[1:first_sep].tolist()
        b = original[first_sep + 1 : -1].tolist()
        assert a and b
        own = stream_of(docs[x.document])
        assert is_slice(a, own)
        if x.next_sentence_label == 0:
            assert is_slice(b, own)
            assert own.index(b[0]) > own.index(a[-1])
        else:
            assert any(is_slice(b, stream_of(d)) for d in docs if d)
    total = sum(mask_kinds.values())
    assert abs(mask_kinds["mask"] / total - 0.8) < 0.05
    assert abs(mask_kinds["same"] / total - 0.1) < 0.04
    assert abs(mask_kinds["random"] / total - 0.1) < 0.04
    labels = [x.next_sentence_label for x in inst]
    assert 0.35 < np.mean(labels) < 0.85


def test_deterministic_dupes_and_rows():
    docs = make_docs(20, seed=1)
    cfg = make_config("bert_mlm_nsp", inputs_length=64, dupe_factor=2, max_predictions_per_seq=8)
    a = list(bert_mlm_nsp(docs, clean_shard_index=3, seed=5, config=cfg, vocab_size=V))
    b = list(bert_mlm_nsp(docs, clean_shard_index=3, seed=5, config=cfg, vocab_size=V))
    c = list(bert_mlm_nsp(docs, clean_shard_index=3, seed=6, config=cfg, vocab_size=V))
    assert [x.input_ids.tobytes() for x in a] == [x.input_ids.tobytes() for x in b]
    assert [x.input_ids.tobytes() for x in a] != [x.input_ids.tobytes() for x in c]
    assert len({x.key for x in a}) == len(a)
    cols, keys = bert_rows(a, cfg)
    assert cols["input_ids"].shape == (len(a), 64) and cols["token_type_ids"].dtype == np.uint8
    assert cols["masked_lm_positions"].shape == (len(a), 8)
    assert cols["masked_lm_weights"].dtype == np.float32
    assert np.array_equal(
        cols["masked_lm_weights"].sum(axis=1), [len(x.masked_lm_positions) for x in a]
    )
    assert cols["next_sentence_label"].dtype == np.uint8 and len(keys) == len(a)
    for i, x in enumerate(a[:10]):
        assert np.array_equal(cols["input_ids"][i, : len(x.input_ids)], x.input_ids)
        assert not cols["input_ids"][i, len(x.input_ids) :].any()


def test_wrong_config_is_refused():
    with pytest.raises(ValueError):
        list(
            bert_mlm_nsp(
                make_docs(2), clean_shard_index=0, seed=0, config=make_config(), vocab_size=V
            )
        )


def test_split_document_uses_punkt():
    pytest.importorskip("nltk")
    sents = split_document("Hello there, Mr. Smith. How are you?\n\nSecond line here.")
    assert sents == ["Hello there, Mr. Smith.", "How are you?", "Second line here."]
