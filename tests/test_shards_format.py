"""The Arrow shard format (formats.md §3) on rows built here: layout, readers, verification.

The Beam job that produces real shards is tested in test_shards_pipeline.py; these tests pin the
byte format and the §3.6 refusals without tokenizing anything.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pyarrow as pa
import pytest
from shards_fixtures import PACKED_COLUMNS, hf_splits

from c4forge.errors import ConfigError, VerificationError
from c4forge.formats import shards as S

VOCAB = {
    "sha256": "a41f" + "0" * 60,
    "num_pieces": 1000,
    "extra_ids": 100,
    "vocab_size": 1100,
    "embedding_size": 1152,
    "pad_id": 0,
    "eos_id": 1,
    "unk_id": 2,
    "bos_id": -1,
}
OBJECTIVE = {
    "name": "span_corruption",
    "inputs_length": 16,
    "targets_length": 6,
    "packing": "concat",
}


def random_rows(rng: np.random.Generator, rows: int, spec) -> dict[str, np.ndarray]:
    """Rows shaped like span-corruption output: tokens, EOS, then zero padding."""
    out = {}
    for e in spec:
        n = e["length"]
        col = rng.integers(3, 1100, size=(rows, n)).astype(S.numpy_dtype(e))
        ends = rng.integers(1, n + 1, size=rows)
        for r, end in enumerate(ends):
            col[r, end - 1] = 1
            col[r, end:] = 0
        out[e["name"]] = col
    return out


def build_set(directory: str, rows_per_shard=(5, 0, 7), seed: int = 0, vocab=VOCAB, **kw) -> dict:
    """A complete shard set written with the same functions the Beam job uses."""
    spec = S.column_spec("span_corruption", "concat", 16, 6, "uint16")
    manifest = S.make_manifest(
        objective=OBJECTIVE,
        schema=spec,
        seed=seed,
        source={"clean_stats_sha256": None, "documents": {"train": 10, "validation": 2}},
        token_dtype="uint16",
        vocabulary=vocab,
        batch_rows=kw.get("batch_rows", 4),
        compression=kw.get("compression"),
        created_by="c4forge test",
    )
    rng = np.random.default_rng(seed)
    progress = S.Progress(directory)
    splits = {}
    for split, counts in (("train", rows_per_shard), ("validation", (3,))):
        records = []
        for i, n in enumerate(counts):
            name = S.shard_file_name(split, i, len(counts))
            meta = S.shard_metadata(
                manifest["dataset_fingerprint"], vocab["sha256"], split, i, len(counts)
            )
            rec = S.write_shard(
                os.path.join(directory, name),
                spec,
                random_rows(rng, n, spec),
                meta,
                batch_rows=manifest["arrow"]["batch_rows"],
                compression=manifest["arrow"]["compression"],
            )
            progress.save({**rec, "dataset_fingerprint": manifest["dataset_fingerprint"]})
            records.append(rec)
        splits[split] = S.split_summary(len(counts), records)
    manifest["splits"] = splits
    S.write_index(directory, manifest)
    return manifest


@pytest.fixture
def shard_dir(tmp_path):
    d = str(tmp_path / "shards")
    build_set(d)
    return d


def test_names_and_dtype_rules():
    assert S.shard_file_name("train", 3, 64) == "train-00003-of-00064.arrow"
    assert S.choose_token_dtype(32128) == "uint16"
    assert S.choose_token_dtype(65536) == "uint16"
    assert S.choose_token_dtype(65537) == "int32"
    assert S.choose_token_dtype(32128, "int32") == "int32"
    with pytest.raises(ConfigError, match="int32"):
        S.choose_token_dtype(70000, "uint16")
    spec = S.column_spec("span_corruption", "per_document", 512, 114, "uint16")
    assert [e["name"] for e in spec] == PACKED_COLUMNS
    with pytest.raises(ConfigError, match="packing"):
        S.column_spec("span_corruption", "zigzag", 512, 114, "uint16")


def test_stream_file_layout(shard_dir):
    """Stream (not file) IPC, uncompressed, non-nullable fixed-size lists, batches of batch_rows."""
    path = os.path.join(shard_dir, "train-00002-of-00003.arrow")
    with pa.memory_map(path) as source:
        reader = pa.ipc.open_stream(source)
        schema = reader.schema
        batches = list(reader)
    assert [b.num_rows for b in batches] == [4, 3]
    f = schema.field("inputs")
    assert f.type == pa.list_(pa.field("item", pa.uint16(), nullable=False), 16)
    assert not f.nullable and not schema.field("targets").nullable
    meta = json.loads(schema.metadata[b"c4forge"])
    index = json.load(open(os.path.join(shard_dir, "index.json")))
    assert meta == {
        "format_version": 1,
        "dataset_fingerprint": index["dataset_fingerprint"],
        "vocab_sha256": VOCAB["sha256"],
        "split": "train",
        "shard_index": 2,
        "num_shards": 3,
    }
    assert b"huggingface" not in schema.metadata
    with pytest.raises(pa.ArrowInvalid):  # an IPC *file* reader refuses stream files (§3.5)
        pa.ipc.open_file(path)
    # Zero-copy view of the token matrix.
    inputs = batches[0].column("inputs").flatten().to_numpy().reshape(-1, 16)
    assert inputs.dtype == np.uint16 and inputs.shape == (4, 16)


def test_index_json_fields(shard_dir):
    index = json.load(open(os.path.join(shard_dir, "index.json")))
    assert index["format"] == "c4forge.shards" and index["format_version"] == 1
    assert index["arrow"] == {"batch_rows": 4, "compression": None, "ipc": "stream"}
    assert index["dataset_fingerprint"] == S.dataset_fingerprint(index)
    train = index["splits"]["train"]
    assert [s["rows"] for s in train["shards"]] == [5, 0, 7]
    assert train["rows"] == 12 and train["num_shards"] == 3
    for rec in train["shards"]:
        path = os.path.join(shard_dir, rec["file"])
        assert rec["bytes"] == os.path.getsize(path)
    assert not os.path.exists(os.path.join(shard_dir, "_progress"))
    # sorted keys, 2-space indent
    text = open(os.path.join(shard_dir, "index.json")).read()
    assert text == json.dumps(index, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def test_shardset_reads_back_what_was_written(tmp_path):
    d = str(tmp_path / "s")
    build_set(d)
    shards = S.ShardSet.open(d, vocab_sha256=VOCAB["sha256"], inputs_length=16, targets_length=6)
    assert shards.columns == ["inputs", "targets"]
    assert [r for _, r in shards.split_shards("train")] == [5, 0, 7]
    rows = shards.read_rows("train")
    assert rows["inputs"].shape == (12, 16) and rows["targets"].shape == (12, 6)
    # Same generator, same order: the rows we wrote.
    spec = S.column_spec("span_corruption", "concat", 16, 6, "uint16")
    rng = np.random.default_rng(0)
    expected = [random_rows(rng, n, spec) for n in (5, 0, 7)]
    np.testing.assert_array_equal(rows["inputs"], np.concatenate([e["inputs"] for e in expected]))
    index = shards.index["splits"]["train"]
    assert index["input_tokens"] == int(np.count_nonzero(rows["inputs"]))
    assert shards.verify() == {"files": 4, "rows": 15}


def test_hf_datasets_open_the_shards(shard_dir, tmp_path):
    from datasets import Dataset

    one = Dataset.from_file(os.path.join(shard_dir, "train-00000-of-00003.arrow"))
    assert len(one) == 5 and one.features["inputs"].length == 16
    empty = Dataset.from_file(os.path.join(shard_dir, "train-00001-of-00003.arrow"))
    assert len(empty) == 0
    ds = hf_splits(shard_dir, str(tmp_path / "hf"))
    assert ds["train"].num_rows == 12 and ds["validation"].num_rows == 3
    rows = S.ShardSet.open(shard_dir).read_rows("train")
    assert ds["train"][0]["inputs"] == rows["inputs"][0].tolist()


def test_writes_are_deterministic_and_lz4_reads(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    build_set(a)
    build_set(b)
    for name in sorted(os.listdir(a)):
        assert open(os.path.join(a, name), "rb").read() == open(os.path.join(b, name), "rb").read()
    c = str(tmp_path / "c")
    build_set(c, compression="lz4")
    index = json.load(open(os.path.join(c, "index.json")))
    assert index["arrow"]["compression"] == "lz4"
    np.testing.assert_array_equal(
        S.ShardSet.open(c).read_rows("train")["inputs"],
        S.ShardSet.open(a).read_rows("train")["inputs"],
    )
    with pytest.raises(ConfigError, match="compression"):
        S.write_shard(str(tmp_path / "x.arrow"), [], {}, {}, compression="zstd-max")


def test_other_vocabulary_is_refused_with_both_hashes(shard_dir):
    other = dict(VOCAB, sha256="7c09" + "1" * 60, vocab_size=8100, num_pieces=8000)
    with pytest.raises(VerificationError) as err:
        S.ShardSet.open(shard_dir, vocab=other)
    msg = str(err.value)
    assert msg == (
        f"{os.path.join(shard_dir, 'index.json')} was built with vocabulary {VOCAB['sha256']} "
        f"(1100 ids); this run uses {other['sha256']} (8100 ids)"
    )
    # A same-hash vocabulary whose size disagrees (wrong extra ids) is refused as well.
    with pytest.raises(VerificationError, match="1100 ids.*1200 ids"):
        S.ShardSet.open(shard_dir, vocab=dict(VOCAB, vocab_size=1200, extra_ids=200))
    with pytest.raises(VerificationError, match="7c09"):
        S.ShardSet.open(shard_dir, vocab_sha256=other["sha256"])


def test_vocab_json_directory_is_accepted(shard_dir, tmp_path):
    vocab_dir = tmp_path / "vocab"
    vocab_dir.mkdir()
    (vocab_dir / "vocab.json").write_text(
        json.dumps({**VOCAB, "format": "c4forge.vocab", "format_version": 1})
    )
    assert S.ShardSet.open(shard_dir, vocab=str(vocab_dir)).vocab["sha256"] == VOCAB["sha256"]


def test_lengths_format_and_fingerprint_checks(shard_dir):
    with pytest.raises(VerificationError, match="inputs_length is 16; this run expects 512"):
        S.ShardSet.open(shard_dir, inputs_length=512)
    with pytest.raises(VerificationError, match="targets_length is 6; this run expects 114"):
        S.ShardSet.open(shard_dir, targets_length=114)
    index_path = os.path.join(shard_dir, "index.json")
    index = json.load(open(index_path))
    json.dump(dict(index, format_version=2), open(index_path, "w"))
    with pytest.raises(
        VerificationError, match="version 1.*found format 'c4forge.shards' version 2"
    ):
        S.ShardSet.open(shard_dir)
    # An edited manifest (seed changed, fingerprint not) no longer matches its fingerprint.
    json.dump(dict(index, seed=7), open(index_path, "w"))
    with pytest.raises(VerificationError, match="dataset_fingerprint expected"):
        S.ShardSet.open(shard_dir)


def test_truncated_and_corrupted_shards(shard_dir):
    path = os.path.join(shard_dir, "train-00002-of-00003.arrow")
    data = open(path, "rb").read()
    # Same size, one flipped byte inside a token buffer: only the checksum can tell.
    flipped = bytearray(data)
    flipped[-40] ^= 0xFF
    open(path, "wb").write(bytes(flipped))
    shards = S.ShardSet.open(shard_dir)
    with pytest.raises(VerificationError) as err:
        shards.verify()
    assert path in str(err.value) and "sha256 expected" in str(err.value)
    # Truncated: the manifest's size already disagrees when the set is opened.
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(
        VerificationError, match=r"size expected \d+ bytes \(index.json\), found \d+"
    ):
        S.ShardSet.open(shard_dir)
    os.remove(path)
    with pytest.raises(VerificationError, match="missing"):
        S.ShardSet.open(shard_dir)


def test_shard_from_another_build_is_caught_by_its_metadata(tmp_path):
    """index.json looks right, but a file was copied in from a build with another seed."""
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    build_set(a, seed=0)
    build_set(b, seed=1)
    name = "train-00000-of-00003.arrow"
    shutil.copy(os.path.join(b, name), os.path.join(a, name))
    index_path = os.path.join(a, "index.json")
    index = json.load(open(index_path))
    rec = index["splits"]["train"]["shards"][0]
    other = json.load(open(os.path.join(b, "index.json")))["splits"]["train"]["shards"][0]
    rec.update({k: other[k] for k in ("rows", "bytes", "sha256", "input_tokens", "target_tokens")})
    json.dump(index, open(index_path, "w"))
    shards = S.ShardSet.open(a)
    with pytest.raises(VerificationError) as err:
        shards.verify()
    msg = str(err.value)
    assert name in msg and "dataset_fingerprint expected" in msg and other["sha256"] not in msg


def test_row_count_and_schema_mismatch(tmp_path):
    d = str(tmp_path / "s")
    build_set(d)
    index_path = os.path.join(d, "index.json")
    index = json.load(open(index_path))
    index["splits"]["train"]["shards"][0]["rows"] = 6
    json.dump(index, open(index_path, "w"))
    with pytest.raises(VerificationError, match="rows expected 6 .*found 5"):
        list(S.ShardSet.open(d).iter_batches("train-00000-of-00003.arrow"))
    # A file written with int32 tokens where the manifest says uint16.
    spec32 = S.column_spec("span_corruption", "concat", 16, 6, "int32")
    meta = json.loads(
        pa.ipc.open_stream(
            open(os.path.join(d, "train-00002-of-00003.arrow"), "rb")
        ).schema.metadata[b"c4forge"]
    )
    path = os.path.join(d, "train-00002-of-00003.arrow")
    S.write_shard(path, spec32, random_rows(np.random.default_rng(0), 7, spec32), meta)
    index["splits"]["train"]["shards"][0]["rows"] = 5
    index["splits"]["train"]["shards"][2]["bytes"] = os.path.getsize(path)
    json.dump(index, open(index_path, "w"))
    with pytest.raises(VerificationError, match="schema expected .*uint16.*found .*int32"):
        S.ShardSet.open(d).verify(checksums=False)


def test_progress_records_trust_only_intact_files(tmp_path):
    d = str(tmp_path)
    spec = S.column_spec("span_corruption", "concat", 16, 6, "uint16")
    name = S.shard_file_name("train", 0, 1)
    rec = S.write_shard(
        os.path.join(d, name), spec, random_rows(np.random.default_rng(0), 3, spec), {}
    )
    progress = S.Progress(d)
    assert progress.finished(name, "fp") is None  # no record yet
    progress.save({**rec, "dataset_fingerprint": "fp"})
    assert progress.finished(name, "fp")["sha256"] == rec["sha256"]
    assert progress.finished(name, "other-fp") is None
    data = bytearray(open(os.path.join(d, name), "rb").read())
    data[-60] ^= 0xFF  # same size, different bytes
    open(os.path.join(d, name), "wb").write(bytes(data))
    assert progress.finished(name, "fp") is None
    assert progress.names() == [name]


def test_int32_token_columns(tmp_path):
    spec = S.column_spec("span_corruption", "concat", 8, 4, "int32")
    rows = {"inputs": np.full((2, 8), 70000, np.int64), "targets": np.ones((2, 4), np.int64)}
    path = str(tmp_path / "x.arrow")
    S.write_shard(path, spec, rows, {})
    batch = next(iter(pa.ipc.open_stream(open(path, "rb"))))
    assert batch.schema.field("inputs").type.value_type == pa.int32()
    assert batch.column("inputs").flatten().to_numpy().max() == 70000
    bad = dict(rows, inputs=np.full((2, 8), 70000, np.int64))
    with pytest.raises(ValueError, match="outside uint16"):
        S.write_shard(path, S.column_spec("span_corruption", "concat", 8, 4, "uint16"), bad, {})


def test_epoch_shard_order():
    orders = [S.epoch_shard_order(64, 0, e) for e in range(3)]
    for order in orders:
        assert sorted(order) == list(range(64))
    assert orders[0] != orders[1] != orders[2]
    assert S.epoch_shard_order(64, 0, 1) == orders[1]
    assert S.epoch_shard_order(64, 1, 0) != orders[0]
    assert S.epoch_shard_order(0, 0, 0) == []
