"""`c4forge shards --objective bert_mlm_nsp` end to end: real documents, a real SentencePiece
vocabulary, the Beam job, and the resulting Arrow shards opened with pyarrow and HF `datasets`.

Checks formats.md §3.2's bert columns and objectives.md §4.1's invariants on every row: layout
`[CLS] A [SEP] B [SEP]`, segment ids, the 15 % masking count rule, sorted positions, weights,
labels that restore real text of the corpus, and byte-identical shards across worker counts.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pytest
from shards_fixtures import TRAIN_FILES, contains, corpus_fixtures, hf_splits, shards_argv

from c4forge.cli import main
from c4forge.corpus.clean_docs import iter_documents
from c4forge.formats import shards as S

MAX_SEQ = 64
MAX_PRED = 10


work, docs, vocab_dir, vocab = corpus_fixtures(
    "bert-shards", per_train_file=130, total=300, vocab_size=600, sample_chars=300_000
)


def build(docs: str, vocab_dir: str, out: str, *extra: str) -> int:
    options = {
        "objective": "bert_mlm_nsp",
        "inputs_length": MAX_SEQ,
        "max_predictions_per_seq": MAX_PRED,
        "num_shards": "train=2,validation=1",
        "batch_rows": 128,
    }
    return main(shards_argv(docs, vocab_dir, out, "--quiet", *extra, **options))


@pytest.fixture(scope="module")
def bert_set(work, docs, vocab_dir):
    out = str(work / "bert")
    assert build(docs, vocab_dir, out, "--workers", "1") == 0
    return out


def test_schema_and_manifest(bert_set, vocab):
    index = json.load(open(os.path.join(bert_set, "index.json")))
    obj = index["objective"]
    assert obj["name"] == "bert_mlm_nsp" and obj["inputs_length"] == MAX_SEQ
    assert obj["max_predictions_per_seq"] == MAX_PRED and obj["dupe_factor"] == 1
    assert obj["short_seq_prob"] == 0.1
    assert index["vocabulary"] == vocab.descriptor()
    path = os.path.join(bert_set, "train-00000-of-00002.arrow")
    with pa.memory_map(path) as source:
        schema = pa.ipc.open_stream(source).schema
    want = {
        "input_ids": pa.list_(pa.field("item", pa.uint16(), nullable=False), MAX_SEQ),
        "token_type_ids": pa.list_(pa.field("item", pa.uint8(), nullable=False), MAX_SEQ),
        "masked_lm_positions": pa.list_(pa.field("item", pa.uint16(), nullable=False), MAX_PRED),
        "masked_lm_ids": pa.list_(pa.field("item", pa.uint16(), nullable=False), MAX_PRED),
        "masked_lm_weights": pa.list_(pa.field("item", pa.float32(), nullable=False), MAX_PRED),
        "next_sentence_label": pa.uint8(),
    }
    assert [f.name for f in schema] == list(want)
    for f in schema:
        assert f.type == want[f.name] and not f.nullable, f.name
    stats = index["stats"]["train"]
    assert stats["documents"] == 260 and stats["instances"] == index["splits"]["train"]["rows"]
    assert 0 < stats["random_next"] < stats["instances"]
    assert stats["masked"] == index["splits"]["train"]["target_tokens"]


def sentence_streams(docs: str, vocab) -> list[np.ndarray]:
    """Every document's tokens as the shard job sees them: its Punkt sentences, encoded."""
    from c4forge.objectives.bert import split_document

    out = []
    for name in TRAIN_FILES:
        for d in iter_documents(os.path.join(docs, name)):
            sents = vocab.encode_batch(split_document(d["text"]))
            out.append(np.asarray([t for s in sents for t in s], dtype="<i4"))
    return out


def occurs(run: np.ndarray, streams: list[np.ndarray]) -> bool:
    return any(contains(s, run) for s in streams)


def test_rows_follow_bert_invariants(bert_set, vocab, docs):
    v, pieces = vocab.vocab_size, vocab.num_pieces
    mask_id, cls_id, sep_id = v - 1, v - 2, v - 3
    rows = S.ShardSet.open(bert_set, vocab=vocab).read_rows("train")
    ids, types = rows["input_ids"].astype(np.int64), rows["token_type_ids"]
    pos, lab = rows["masked_lm_positions"].astype(np.int64), rows["masked_lm_ids"]
    weights, nsp = rows["masked_lm_weights"], rows["next_sentence_label"]
    assert len(ids) > 200
    assert set(np.unique(nsp).tolist()) == {0, 1}
    streams = sentence_streams(docs, vocab)
    kinds = {"mask": 0, "same": 0, "random": 0}
    for r in range(len(ids)):
        n = int(np.count_nonzero(ids[r]))
        row = ids[r, :n]
        assert not ids[r, n:].any() and not types[r, n:].any()  # trailing padding only
        assert row[0] == cls_id and row[-1] == sep_id
        seps = np.flatnonzero(row == sep_id)
        assert len(seps) == 2 and np.count_nonzero(row == cls_id) == 1
        first_sep = int(seps[0])
        assert 1 < first_sep < n - 2  # A and B are non-empty
        assert types[r, :n].tolist() == [0] * (first_sep + 1) + [1] * (n - first_sep - 1)
        num = min(MAX_PRED, max(1, round(n * 0.15)))
        assert weights[r].tolist() == [1.0] * num + [0.0] * (MAX_PRED - num)
        p = pos[r, :num]
        assert np.all(np.diff(p) > 0) and p[-1] < n - 1
        assert not np.isin(p, [0, first_sep]).any()
        assert not pos[r, num:].any() and not lab[r, num:].any()
        original = row.copy()
        original[p] = lab[r, :num]
        body = np.delete(original, [0, first_sep, n - 1])
        assert body.max() < pieces and body.min() >= 2  # pieces (unk 2 included), no specials
        for at, label in zip(p.tolist(), lab[r, :num].tolist()):
            got = int(row[at])
            kinds["mask" if got == mask_id else "same" if got == label else "random"] += 1
            assert got in (mask_id, label) or 3 <= got < pieces
        if r % 5 == 0:  # A (and B when it is the true continuation) is real corpus text
            a, b = original[1:first_sep], original[first_sep + 1 : n - 1]
            assert occurs(a, streams), f"row {r}: A is not a run of any document"
            if nsp[r] == 0:
                assert occurs(np.concatenate([a, b]), streams) or occurs(b, streams)
    total = sum(kinds.values())
    assert abs(kinds["mask"] / total - 0.8) < 0.05
    assert 0.05 < kinds["same"] / total < 0.15 and 0.05 < kinds["random"] / total < 0.15


def test_hf_datasets_reads_bert_shards(bert_set, tmp_path):
    from datasets import Dataset

    ds = hf_splits(bert_set, str(tmp_path / "hf"), splits=("train",))
    index = json.load(open(os.path.join(bert_set, "index.json")))
    assert ds["train"].num_rows == index["splits"]["train"]["rows"]
    one = Dataset.from_file(os.path.join(bert_set, "validation-00000-of-00001.arrow"))
    assert one.features["input_ids"].length == MAX_SEQ
    assert one.features["masked_lm_weights"].feature.dtype == "float32"
    assert one.features["next_sentence_label"].dtype == "uint8"
    rows = S.ShardSet.open(bert_set).read_rows("validation")
    assert one[2]["input_ids"] == rows["input_ids"][2].tolist()
    assert one[2]["masked_lm_weights"] == rows["masked_lm_weights"][2].tolist()


def test_identical_bytes_with_two_workers(bert_set, work, docs, vocab_dir):
    again = str(work / "bert-2")
    assert build(docs, vocab_dir, again, "--workers", "2") == 0
    names = sorted(
        os.path.relpath(os.path.join(root, f), bert_set)
        for root, _, files in os.walk(bert_set)
        for f in files
    )
    assert "index.json" in names and "vocab/sentencepiece.model" in names
    for name in names:
        assert (
            open(os.path.join(again, name), "rb").read()
            == open(os.path.join(bert_set, name), "rb").read()
        ), name


def test_bert_option_errors(work, docs, vocab_dir, capsys):
    out = str(work / "never")
    assert build(docs, vocab_dir, out, "--noise-density", "0.3") == 2
    assert "bert_mlm_nsp does not use --noise-density" in capsys.readouterr().err
    assert build(docs, vocab_dir, out, "--packing", "per_document") == 2
    argv = ["shards", docs, "--vocab", vocab_dir, "--output", out, "--dupe-factor", "2"]
    assert main(argv) == 2
    assert "only for --objective bert_mlm_nsp" in capsys.readouterr().err
    assert build(docs, vocab_dir, out, "--max-predictions-per-seq", "100") == 2
    assert not os.path.exists(out)


def test_a_shard_that_receives_no_rows_is_still_written(tmp_path):
    """An output shard no key hashed to is written empty (one empty record batch)."""
    from c4forge.shards.rows import assemble

    schema = S.column_spec("bert_mlm_nsp", "concat", MAX_SEQ, MAX_PRED, "uint16", max_predictions=8)
    columns = assemble([], schema)
    assert columns["next_sentence_label"].shape == (0,)
    assert columns["masked_lm_weights"].shape == (0, 8)
    meta = S.shard_metadata("f" * 64, "v" * 64, "train", 0, 1)
    rec = S.write_shard(str(tmp_path / "train-00000-of-00001.arrow"), schema, columns, meta)
    assert rec["rows"] == 0 and rec["input_tokens"] == 0
    with pa.memory_map(str(tmp_path / "train-00000-of-00001.arrow")) as source:
        assert pa.ipc.open_stream(source).read_all().num_rows == 0
