"""The T5 document pipeline (objectives.md §2): drop empty, chunk, concat 128, pieces, corrupt, EOS."""

from __future__ import annotations

import numpy as np
import pytest
from objective_references import rows_of

from c4forge.objectives import (
    OBJECTIVES,
    example_key,
    make_config,
    new_stats,
    shard_examples,
)

V = 32100


def docs_of(seed: int, n: int = 300, max_len: int = 200, empty_every: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    docs = [rng.integers(3, V - 100, int(k)).tolist() for k in rng.integers(1, max_len, n)]
    if empty_every:
        for i in range(0, n, empty_every):
            docs[i] = []
    return docs


def restore(inputs: np.ndarray, targets: np.ndarray) -> list[int]:
    spans: dict[int, list[int]] = {}
    for t in targets[:-1].tolist():
        if t >= V - 100:
            cur = t
            spans[cur] = []
        else:
            spans[cur].append(t)
    return [x for t in inputs[:-1].tolist() for x in (spans[t] if t >= V - 100 else [t])]


def test_concat_groups_pieces_and_counters():
    docs = docs_of(0, n=300, empty_every=7)
    cfg = make_config(inputs_length=64)  # pieces of 70 → 64 / 14
    stats = new_stats()
    ex = list(
        shard_examples(docs, clean_shard_index=2, seed=9, config=cfg, vocab_size=V, stats=stats)
    )
    nonempty = [d for d in docs if d]
    assert stats["documents"] == 300 and stats["documents_empty"] == 300 - len(nonempty)
    assert stats["groups"] == -(-len(nonempty) // 128) == 3
    assert stats["examples"] == stats["pieces"] == len(ex)
    assert stats["tokens"] == sum(map(len, nonempty))
    for g in range(3):
        group_docs = nonempty[128 * g : 128 * (g + 1)]
        stream = [t for d in group_docs for t in d]  # no separator between documents
        pieces = [e for e in ex if e.group == g]
        assert [e.piece for e in pieces] == list(range(len(pieces)))
        assert [t for e in pieces for t in restore(e.inputs, e.targets)] == stream
        for e in pieces[:-1]:  # only the group's last piece is short
            assert len(e.inputs) == 64 and len(e.targets) == 14
        assert len(pieces[-1].inputs) <= 64
    assert [e.key for e in ex] == [example_key(9, 2, e.group, e.piece) for e in ex]
    assert len({e.key for e in ex}) == len(ex)


def test_deterministic_and_seeded_per_shard():
    docs = docs_of(1)
    cfg = make_config(inputs_length=128)

    def run(seed, shard):
        return [
            (e.key, e.inputs.tobytes(), e.targets.tobytes())
            for e in shard_examples(
                docs, clean_shard_index=shard, seed=seed, config=cfg, vocab_size=V
            )
        ]

    a = run(0, 0)
    assert a == run(0, 0)
    assert [x[1] for x in a] != [x[1] for x in run(1, 0)]
    assert [x[1] for x in a] != [x[1] for x in run(0, 1)]
    # lists, tuples or arrays of ids give the same examples
    arrays = [np.array(d, dtype=np.int64) for d in docs]
    assert a == [
        (e.key, e.inputs.tobytes(), e.targets.tobytes())
        for e in shard_examples(arrays, clean_shard_index=0, seed=0, config=cfg, vocab_size=V)
    ]


def test_per_document_pieces_never_mix_documents():
    docs = docs_of(2, n=60, max_len=400, empty_every=5)
    cfg = make_config(inputs_length=64, packing="per_document")
    ex = list(shard_examples(docs, clean_shard_index=0, seed=0, config=cfg, vocab_size=V))
    for doc_index, doc in enumerate(docs):
        mine = [e for e in ex if e.group == doc_index]
        assert [t for e in mine for t in restore(e.inputs, e.targets)] == doc
    cols, keys = rows_of(ex, cfg)
    assert cols["inputs"].shape[1] == 64 and len(keys) == len(cols["inputs"])


def test_document_longer_than_the_chunk():
    cfg = make_config(inputs_length=64, select_random_chunk_max=100, packing="per_document")
    doc = list(range(3, 353))  # 350 tokens → windows [0,100) [100,200) [200,300) [300,350)
    stats = new_stats()
    seen = set()
    for seed in range(40):
        ex = list(
            shard_examples(
                [doc], clean_shard_index=0, seed=seed, config=cfg, vocab_size=V, stats=stats
            )
        )
        kept = [t for e in ex for t in restore(e.inputs, e.targets)]
        start = kept[0] - 3
        assert start % 100 == 0 and kept == doc[start : start + 100]
        seen.add(start)
    assert seen == {0, 100, 200, 300}
    assert stats["documents_chunked"] == 40
    # the default 65,536 chunk: a 70,000-token document keeps one aligned window
    big = np.arange(70_000, dtype=np.int32) % 30000 + 3
    stats = new_stats()
    ex = list(
        shard_examples(
            [big], clean_shard_index=0, seed=0, config=make_config(), vocab_size=V, stats=stats
        )
    )
    assert stats["documents_chunked"] == 1 and stats["tokens"] in (65536, 70_000 - 65536)
    assert stats["chunk_tokens_dropped"] == 70_000 - stats["tokens"]


def test_doc_separator_eos():
    docs = [[5, 6, 7], [8, 9], [10]]
    cfg = make_config(inputs_length=64, doc_separator="eos")
    ex = list(shard_examples(docs, clean_shard_index=0, seed=0, config=cfg, vocab_size=V))
    assert len(ex) == 1
    assert restore(ex[0].inputs, ex[0].targets) == [5, 6, 7, 1, 8, 9, 1, 10, 1]


def test_truncation_and_too_many_spans_are_counted():
    docs = docs_of(3, n=50, max_len=600)
    stats = new_stats()
    cfg = make_config("iid_drop", inputs_length=128, targets_length=8)
    ex = list(
        shard_examples(docs, clean_shard_index=0, seed=0, config=cfg, vocab_size=V, stats=stats)
    )
    assert stats["targets_truncated"] > 0
    assert all(len(e.targets) <= 8 and e.targets[-1] == 1 for e in ex)
    stats = new_stats()
    cfg = make_config("iid_replace_spans", inputs_length=128, extra_ids=5)
    ex = list(
        shard_examples(docs, clean_shard_index=0, seed=0, config=cfg, vocab_size=V, stats=stats)
    )
    assert stats["too_many_spans"] > 0 and stats["examples"] == len(ex)
    assert stats["too_many_spans"] + stats["examples"] == stats["pieces"]


@pytest.mark.parametrize("name", [n for n, s in OBJECTIVES.items() if s.fn is not None])
@pytest.mark.parametrize("packing", ["concat", "per_document"])
def test_every_objective_makes_rows(name, packing):
    docs = docs_of(4, n=80, max_len=300)
    cfg = make_config(name, inputs_length=64, packing=packing)
    stats = new_stats()
    ex = list(
        shard_examples(docs, clean_shard_index=0, seed=0, config=cfg, vocab_size=V, stats=stats)
    )
    assert ex and all(e.inputs[-1] == 1 and e.targets[-1] == 1 for e in ex)
    cols, keys = rows_of(ex, cfg)
    assert tuple(cols) == cfg.columns
    assert cols["inputs"].shape[1] == 64 and cols["targets"].shape[1] == cfg.targets_length
    assert len(keys) == cols["inputs"].shape[0]
    if packing == "concat":
        assert len(keys) == len(ex)


def test_regular_mask_pipeline_counts_trims():
    cfg = make_config(inputs_length=64, mask="regular")
    stats = new_stats()
    ex = list(
        shard_examples(
            docs_of(5), clean_shard_index=0, seed=0, config=cfg, vocab_size=V, stats=stats
        )
    )
    assert all(len(e.inputs) <= 64 and len(e.targets) <= cfg.targets_length for e in ex)
    assert stats["examples"] == len(ex)


@pytest.mark.parametrize("packing", ["concat", "per_document"])
def test_pipeline_examples_equal_the_per_piece_definition(packing):
    """Batched/ragged corruption inside the pipeline = span_corruption(piece, rng of (seed, 0, shard,
    group, piece)) for every example (§2: per-example randomness)."""
    from c4forge.objectives import span_corruption
    from c4forge.objectives.seeding import piece_rng

    docs = docs_of(6, n=300, max_len=900, empty_every=11)
    cfg = make_config(inputs_length=128, packing=packing)
    ex = list(shard_examples(docs, clean_shard_index=4, seed=2, config=cfg, vocab_size=V))
    nonempty = [np.array(d, dtype=np.int32) for d in docs if d]
    if packing == "concat":
        streams = {
            g: np.concatenate(nonempty[128 * g : 128 * (g + 1)])
            for g in range(-(-len(nonempty) // 128))
        }
    else:
        streams = {i: np.array(d, dtype=np.int32) for i, d in enumerate(docs) if d}
    assert len(ex) == sum(-(-len(s) // cfg.tokens_length) for s in streams.values())
    for e in ex:
        piece = streams[e.group][e.piece * cfg.tokens_length : (e.piece + 1) * cfg.tokens_length]
        inputs, targets = span_corruption(piece, piece_rng(2, 0, 4, e.group, e.piece), vocab_size=V)
        assert np.array_equal(e.inputs, inputs) and np.array_equal(e.targets, targets)


@pytest.mark.parametrize(
    "options",
    [
        {"inputs_length": 64},
        {"inputs_length": 128, "doc_separator": "eos", "select_random_chunk_max": 300},
        {"inputs_length": 64, "targets_length": 10},  # trims targets (counted)
        {"inputs_length": 64, "packing": "per_document", "pack_window": 64},
        {"inputs_length": 32, "packing": "per_document", "concat_documents": 3},
    ],
)
def test_vectorized_blocks_equal_the_one_by_one_path(options, monkeypatch):
    """The shard job's block path (batched full pieces, group tails held back and corrupted
    together, flat arrays) gives exactly the examples, counters and rows of the per-piece
    path (`span_corruption` on each piece with its own generator, one Example at a time)."""
    from c4forge.objectives import examples as E

    rng = np.random.default_rng(5)
    docs = docs_of(7, n=700, max_len=400, empty_every=11)
    for i in rng.choice(len(docs), 25, replace=False).tolist():
        docs[i] = docs[i][:1]  # 1-token documents → 1-token pieces (the L = 1 rule)
    cfg = make_config(**options)
    monkeypatch.setattr(E, "HOLD_EXAMPLES", 37)  # flush held blocks often, mid-stream
    kw = {"clean_shard_index": 4, "seed": 3, "config": cfg, "vocab_size": V}
    fast_stats, slow_stats = new_stats(), new_stats()
    blocks = list(E.example_blocks(docs, stats=fast_stats, **kw))
    fast = [e for b in blocks for e in b.examples()]
    monkeypatch.setattr(E, "_batched", lambda config: False)  # the per-piece definition
    slow = list(shard_examples(docs, stats=slow_stats, **kw))
    assert fast_stats == slow_stats and len(fast) == len(slow) == slow_stats["examples"]
    for a, b in zip(fast, slow):
        assert (a.key, a.group, a.piece) == (b.key, b.group, b.piece)
        assert np.array_equal(a.inputs, b.inputs) and np.array_equal(a.targets, b.targets)
    cols, keys = E.rows_of_block(E.ExampleBlock.concat(blocks), cfg, dtype=np.uint16)
    want_cols, want_keys = rows_of(slow, cfg, dtype=np.uint16)
    assert np.array_equal(keys, want_keys)
    for name, col in want_cols.items():
        assert cols[name].dtype == col.dtype and np.array_equal(cols[name], col), name
    if options.get("targets_length"):
        assert slow_stats["targets_truncated"] > 0
