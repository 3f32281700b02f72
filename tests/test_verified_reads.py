"""Shards are verified as they are read: ``train`` refuses a bit-flipped shard (sha256 computed
from the bytes of the read itself, not a second pass) and a shard holding a token id outside
the vocabulary, with a one-line error naming the shard, in the main process and from a
DataLoader worker. Real SentencePiece vocabulary and span-corruption shards of the bundled C4
sample (``train_fixtures``)."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import train_fixtures as fx  # noqa: E402

from c4forge.cli import main  # noqa: E402
from c4forge.errors import VerificationError  # noqa: E402
from c4forge.formats import shards as fmt  # noqa: E402
from c4forge.io import storage  # noqa: E402
from c4forge.trainers import data as D  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("verifydata")
    return root, fx.build_data(root, docs=40)


def _copy(root, tmp_path):
    """A private copy of the shards folder (and the vocabulary beside it)."""
    work = tmp_path / "set"
    shutil.copytree(root / "shards", work / "shards")
    shutil.copytree(root / "vocab", work / "vocab")
    return work


def _train(work, tmp_path, *extra):
    argv = [
        "train",
        str(work / "shards"),
        "--output",
        str(tmp_path / "run"),
        "--steps",
        "2",
        "--preset",
        "tiny",
        "--batch-size",
        "4",
        "--vocab",
        str(work / "vocab"),
        "--eval-rows",
        "8",
        "--no-progress",
        *extra,
    ]
    return main(argv)


def _first_train_shard(work) -> str:
    """The train shard step 0 reads (epoch 0's first shard at seed 0, formats.md §3.5)."""
    first = fmt.epoch_shard_order(3, 0, 0)[0]
    return str(work / "shards" / fmt.shard_file_name("train", first, 3))


def _flip(path: str, at: int) -> None:
    data = bytearray(open(path, "rb").read())
    data[at] ^= 0x01  # same size: only a checksum can tell
    open(path, "wb").write(bytes(data))


def _token_offset(path: str) -> int:
    """The offset of a byte inside the first record batch's token buffer."""
    data = open(path, "rb").read()
    return len(data) // 2


def _rewrite_with_token(shard_dir: str, name: str, value: int) -> None:
    """Rewrite one shard with one target id replaced by ``value`` and index.json updated to
    the new bytes (a shard built for another vocabulary: its sha256 matches, its ids do not)."""
    index_path = os.path.join(shard_dir, "index.json")
    index = json.load(open(index_path))
    shards = fmt.ShardSet.open(shard_dir)
    path = os.path.join(shard_dir, name)
    cols = {e["name"]: [] for e in index["schema"]}
    for batch in shards.iter_batches(path):
        for e in index["schema"]:
            cols[e["name"]].append(fmt.column_numpy(batch, e))
    cols = {k: np.concatenate(v).copy() for k, v in cols.items()}
    cols["targets"][1, 0] = value
    split, i = name.split("-")[0], int(name.split("-")[1])
    count = index["splits"][split]["num_shards"]
    meta = fmt.shard_metadata(
        index["dataset_fingerprint"], index["vocabulary"]["sha256"], split, i, count
    )
    rec = fmt.write_shard(path, index["schema"], cols, meta, batch_rows=16)
    index["splits"][split]["shards"][i].update(bytes=rec["bytes"], sha256=rec["sha256"])
    storage.write_json(index_path, index)


def test_a_flipped_shard_is_refused_by_default(data, tmp_path, capsys):
    root, _ = data
    work = _copy(root, tmp_path)
    victim = _first_train_shard(work)
    _flip(victim, _token_offset(victim))
    assert _train(work, tmp_path) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err  # after the start-up summary, the error is its last line
    err = err.splitlines()[-1]
    assert f"{victim}: sha256 expected" in err
    # --verify-shards quick keeps the old, unchecked read (sizes only): it trains
    assert _train(work, tmp_path, "--verify-shards", "quick") == 0


def test_a_token_outside_the_vocabulary_is_a_one_line_error(data, tmp_path, capsys):
    root, desc = data
    work = _copy(root, tmp_path)
    name = os.path.basename(_first_train_shard(work))
    _rewrite_with_token(str(work / "shards"), name, desc["vocab_size"] + 7)
    assert _train(work, tmp_path) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err  # after the start-up summary, the error is its last line
    err = err.splitlines()[-1]
    assert f"{name}: targets holds id" in err
    assert f"{desc['vocab_size'] + 7} (row 1 of the shard)" in err
    assert f"outside the vocabulary's {desc['vocab_size']} ids" in err


def test_a_worker_process_reports_the_damaged_shard_in_one_line(data, tmp_path, capsys):
    """The error crosses the DataLoader's worker boundary as its own one-line message."""
    root, _ = data
    work = _copy(root, tmp_path)
    victim = _first_train_shard(work)
    _flip(victim, _token_offset(victim))
    assert _train(work, tmp_path, "--num-workers", "1") == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err  # after the start-up summary, the error is its last line
    assert "Caught" not in err
    err = err.splitlines()[-1]
    assert f"{victim}: sha256 expected" in err


def test_the_read_itself_is_hashed_once_per_process(data, tmp_path, monkeypatch):
    """No second pass: the digest comes from the batches' bytes (``storage.sha256`` is never
    called for an intact shard) and a shard already verified here is not hashed again."""
    root, _ = data
    shards = D.open_shard_set(str(root / "shards"), verify="read")
    path = shards.split_shards("train")[0][0]

    def second_pass(p):
        raise AssertionError(f"{p} hashed by a separate read")

    monkeypatch.setattr(storage, "sha256", second_pass)
    reader = D.ShardReader(shards, [path], [shards.split_shards("train")[0][1]])
    rows = reader.shard(0)
    assert path in shards.verified and len(rows["inputs"]) == shards.split_shards("train")[0][1]
    monkeypatch.undo()
    # the streamed digest is the file's sha256 (the record index.json holds)
    assert shards._records("train")[0]["sha256"] == storage.sha256(path)
    again = list(shards.iter_batches(path))  # verified: no digest this time
    assert sum(b.num_rows for b in again) == len(rows["inputs"])


def test_verify_finds_a_flip_in_one_pass(data, tmp_path):
    """``ShardSet.verify`` (``shards verify``, ``--verify-shards full``) hashes while reading;
    a flip that breaks the Arrow stream is still reported as the checksum mismatch it is."""
    root, _ = data
    work = _copy(root, tmp_path)
    victim = str(work / "shards" / "validation-00000-of-00001.arrow")
    _flip(victim, 20)  # inside the schema message
    with pytest.raises(VerificationError, match=f"{victim}: sha256 expected"):
        fmt.ShardSet.open(str(work / "shards")).verify()
