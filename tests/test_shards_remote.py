"""`c4forge shards --output SCHEME://…`: shards, progress records and index.json written through
Beam's FileSystems, as a Dataflow run writes them to a bucket.

The bucket is faked by `MemFileSystem`, a minimal in-memory Beam `FileSystem` registered under
the `membucket://` scheme (Beam finds FileSystem subclasses by scheme). It fakes the storage, not
the code under test: the shard job, `c4forge.io.storage` and Beam's `FileSystems` dispatch
all run for real. Objects become visible only when their writer is closed, like GCS objects.
The job runs with one in-process worker so that it shares this process's memory.
"""

from __future__ import annotations

import gzip
import json
import os

import pytest
from memfs import MemFileSystem  # tests/memfs.py: the test-only in-memory bucket

from c4forge.cli import main
from c4forge.formats import shards as S
from c4forge.io import storage
from c4forge.io.ownership import MARKER_NAME

SAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "c4forge", "data", "sample", "c4-sample.00000-of-00001.json.gz"
)


def write_c4_file(path: str, lines: list[bytes]) -> None:
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
        f.write(b"".join(lines))


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("remote")


@pytest.fixture(scope="module")
def docs(work):
    with gzip.open(SAMPLE, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    d = work / "docs"
    d.mkdir()
    write_c4_file(str(d / "c4-train.00000-of-00002.json.gz"), lines[:150])
    write_c4_file(str(d / "c4-train.00001-of-00002.json.gz"), lines[150:300])
    write_c4_file(str(d / "c4-validation.00000-of-00001.json.gz"), lines[300:340])
    return str(d)


@pytest.fixture(scope="module")
def vocab_dir(work, docs):
    from c4forge.vocab.train import Source, build_vocab

    out = str(work / "vocab")
    build_vocab([Source("en", docs)], out, vocab_size=500, sample_chars=200_000, progress=False)
    return out


def build(docs: str, vocab_dir: str, out: str, *extra: str) -> int:
    argv = ["shards", docs, "--vocab", vocab_dir, "--output", out, "--inputs-length", "64"]
    return main([*argv, "--num-shards", "train=3", "--workers", "1", "--quiet", *extra])


@pytest.fixture(scope="module")
def local_set(work, docs, vocab_dir):
    out = str(work / "local")
    assert build(docs, vocab_dir, out) == 0
    return out


def bucket(prefix: str) -> dict[str, bytes]:
    return {p[len(prefix) + 1 :]: d for p, d in MemFileSystem.files.items() if p.startswith(prefix)}


def test_storage_functions_on_a_beam_filesystem():
    MemFileSystem.files.clear()
    base = "membucket://b/fs-test"
    assert storage.is_remote(base) and storage.join(base, "a", "b.json") == base + "/a/b.json"
    storage.write_json(storage.join(base, "x.json"), {"b": 1, "a": [1, 2]})
    assert (
        MemFileSystem.files[base + "/x.json"] == b'{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    )
    assert storage.read_json(base + "/x.json") == {"a": [1, 2], "b": 1}
    storage.write_bytes(base + "/sub/y.bin", b"abc")
    assert storage.listdir(base) == ["x.json"]  # direct children only
    assert (
        storage.listdir(base + "/sub") == ["y.bin"] and storage.listdir("membucket://b/none") == []
    )
    assert storage.size(base + "/sub/y.bin") == 3
    assert storage.sha256(base + "/sub/y.bin") == S.sha256_bytes(b"abc")
    with pytest.raises(RuntimeError), storage.atomic_writer(base + "/z.bin") as f:
        f.write(b"partial")
        raise RuntimeError("interrupted")
    assert not any("z.bin" in p for p in MemFileSystem.files)  # neither final nor temp name
    storage.remove(base + "/missing")  # not an error
    storage.rmtree(base + "/sub")
    assert list(MemFileSystem.files) == [base + "/x.json"]


def test_remote_output_matches_local_bytes(local_set, docs, vocab_dir):
    MemFileSystem.files.clear()
    out = "membucket://bucket/shards"
    assert build(docs, vocab_dir, out) == 0
    remote = bucket(out)
    local = {
        os.path.relpath(os.path.join(root, n), local_set): open(os.path.join(root, n), "rb").read()
        for root, _, files in os.walk(local_set)
        for n in files
    }
    assert "vocab/sentencepiece.model" in local
    assert sorted(remote) == sorted(local)  # no _progress/ and no temp objects left behind
    assert remote == local
    index = json.loads(remote["index.json"])
    assert index["splits"]["train"]["num_shards"] == 3


def test_remote_rerun_rebuilds_only_a_damaged_shard(docs, vocab_dir, capsys):
    MemFileSystem.files.clear()
    out = "membucket://bucket/again"
    assert build(docs, vocab_dir, out) == 0
    reference = bucket(out)
    MemFileSystem.writes.clear()
    assert build(docs, vocab_dir, out) == 0  # complete: no shard or manifest rewritten
    # nothing but the check's records and the run marker (io.ownership) is written
    assert [
        w for w in MemFileSystem.writes if "/_progress/" not in w and MARKER_NAME not in w
    ] == []
    assert sorted(bucket(out)) == sorted(reference)  # and the check's records are gone
    victim = f"{out}/train-00002-of-00003.arrow"
    MemFileSystem.files[victim] = MemFileSystem.files[victim][:100]  # truncated later
    assert build(docs, vocab_dir, out) == 0
    final = {
        w.split(".tmp-")[0]
        for w in MemFileSystem.writes
        if "/_progress/" not in w and MARKER_NAME not in w
    }
    assert final == {victim, f"{out}/index.json"}
    assert bucket(out) == reference
    # Other settings in the same bucket folder need --overwrite, as locally.
    assert build(docs, vocab_dir, out, "--seed", "3") == 2
    assert "pass --overwrite" in capsys.readouterr().err
    assert build(docs, vocab_dir, out, "--seed", "3", "--overwrite") == 0
    assert json.loads(MemFileSystem.files[f"{out}/index.json"])["seed"] == 3


def test_a_remote_shard_set_reads_like_the_local_one(local_set, docs, vocab_dir):
    """`ShardSet` and the trainer's opener read a bucket through the storage layer: same
    manifest checks, same rows, same training batches, same refusals."""
    import torch

    from c4forge.errors import VerificationError
    from c4forge.trainers import data as D

    MemFileSystem.files.clear()
    out = "membucket://bucket/read"
    assert build(docs, vocab_dir, out) == 0
    remote, local = S.ShardSet.open(out, vocab=vocab_dir), S.ShardSet.open(local_set)
    assert remote.index == local.index and remote.index_sha256 == local.index_sha256
    assert remote.split_shards("train")[0][0] == f"{out}/train-00000-of-00003.arrow"
    for split in ("train", "validation"):
        a, b = remote.read_rows(split), local.read_rows(split)
        assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)
    assert remote.verify() == local.verify()
    assert remote.vocab_dir == f"{out}/vocab"
    assert (
        storage.read_bytes(f"{out}/vocab/sentencepiece.model")
        == open(os.path.join(vocab_dir, "sentencepiece.model"), "rb").read()
    )
    # The trainer's opener and stream: the first batches equal the local set's.
    plan = D.DataPlan(batch_size=4, seed=1)
    streams = [D.TrainStream(D.open_shard_set(p), plan, 0, 2) for p in (out, local_set)]
    for a, b in zip(*(list(zip(range(3), s)) for s in streams)):
        assert torch.equal(a[1]["inputs"], b[1]["inputs"])
        assert torch.equal(a[1]["targets"], b[1]["targets"])
    # Refusals name the remote file, as locally.
    victim = f"{out}/train-00001-of-00003.arrow"
    good = MemFileSystem.files[victim]
    # verified as read (train's default): the stream's own bytes are hashed, intact or not
    checked = D.open_shard_set(out, verify="read")
    rows = dict(checked.split_shards("train"))[victim]
    assert len(D.ShardReader(checked, [victim], [rows]).shard(0)["inputs"]) == rows
    assert victim in checked.verified
    mid = len(good) // 2
    MemFileSystem.files[victim] = good[:mid] + bytes([good[mid] ^ 1]) + good[mid + 1 :]
    checked = D.open_shard_set(out, verify="read")
    with pytest.raises(VerificationError, match=f"{victim}: sha256 expected"):
        D.ShardReader(checked, [victim], [rows]).shard(0)
    MemFileSystem.files[victim] = good[:-1] + bytes([good[-1] ^ 1])  # same size
    with pytest.raises(VerificationError, match=f"{victim}: sha256 expected"):
        S.ShardSet.open(out).verify()
    MemFileSystem.files[victim] = good[:100]
    with pytest.raises(VerificationError, match=f"{victim}: size expected"):
        S.ShardSet.open(out)
    del MemFileSystem.files[victim]
    with pytest.raises(VerificationError, match=f"{victim}: missing"):
        S.ShardSet.open(out)
    del MemFileSystem.files[f"{out}/index.json"]
    with pytest.raises(VerificationError, match="manifest not found"):
        D.open_shard_set(out)
