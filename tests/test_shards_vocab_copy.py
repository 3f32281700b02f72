"""A shard set carries its vocabulary (`SHARDS/vocab/`, index.json `vocab_files`), checked on
write, on open and by `c4forge shards verify`; and verify prints only c4forge's own lines.

Real documents (the bundled C4 sample), a real SentencePiece vocabulary, the real Beam job.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from shards_fixtures import corpus_fixtures, shards_argv

from c4forge.cli import main
from c4forge.errors import VerificationError
from c4forge.formats import shards as S
from c4forge.vocab.vocab import Vocabulary

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

work, docs, vocab_dir, vocab = corpus_fixtures(
    "vocabcopy", per_train_file=120, total=300, vocab_size=500, sample_chars=300_000
)


def build(docs: str, vocab: str, out: str, *extra: str) -> int:
    argv = shards_argv(docs, vocab, out, "--workers", "1", "--quiet", *extra, inputs_length=64)
    return main(argv)


@pytest.fixture(scope="module")
def shard_set(work, docs, vocab_dir):
    out = str(work / "set")
    assert build(docs, vocab_dir, out) == 0
    return out


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def test_the_copy_is_the_vocab_folder_and_loads(shard_set, vocab_dir, vocab):
    index = json.load(open(os.path.join(shard_set, "index.json")))
    block = index["vocab_files"]
    assert block["directory"] == "vocab"
    names = sorted(os.listdir(vocab_dir))
    assert [r["file"] for r in block["files"]] == names
    for rec in block["files"]:
        data = read(os.path.join(vocab_dir, rec["file"]))
        assert read(os.path.join(shard_set, "vocab", rec["file"])) == data
        assert rec["bytes"] == len(data) and rec["sha256"] == S.sha256_bytes(data)
    # Not part of the fingerprint: the rows do not depend on where the copy lives.
    assert index["dataset_fingerprint"] == S.dataset_fingerprint(index)
    shards = S.ShardSet.open(shard_set)
    assert shards.vocab_dir == os.path.join(shard_set, "vocab")
    copy = Vocabulary.load(shards.vocab_dir)
    assert copy.sha256 == vocab.sha256 == index["vocabulary"]["sha256"]
    assert copy.encode("A sentence of the sample.") == vocab.encode("A sentence of the sample.")


def test_a_plain_model_gets_a_complete_vocab_folder(work, docs, vocab_dir, vocab, shard_set):
    out = str(work / "plain")
    model = os.path.join(vocab_dir, "sentencepiece.model")
    assert build(docs, model, out, "--extra-ids", "100") == 0
    copy = os.path.join(out, "vocab")
    assert sorted(os.listdir(copy)) == sorted(os.listdir(vocab_dir))
    assert read(os.path.join(copy, "sentencepiece.model")) == read(model)
    # The sentinel model is made the way `c4forge vocab` makes it: the same bytes.
    name = "sentencepiece.extra_ids.model"
    assert read(os.path.join(copy, name)) == read(os.path.join(vocab_dir, name))
    loaded = Vocabulary.load(copy)
    assert loaded.descriptor() == vocab.descriptor()
    # Same rows as the build from the vocab folder.
    for f in os.listdir(shard_set):
        if f.endswith(".arrow"):
            assert read(os.path.join(out, f)) == read(os.path.join(shard_set, f)), f


def test_verify_and_open_refuse_a_damaged_copy(shard_set, work, capsys):
    d = str(work / "damaged")
    shutil.copytree(shard_set, d)
    path = os.path.join(d, "vocab", "sentencepiece.model")
    data = bytearray(read(path))
    data[len(data) // 2] ^= 0x5A  # same size: only the checksum sees it
    open(path, "wb").write(bytes(data))
    S.ShardSet.open(d)  # open checks presence and sizes only (cheap, every training start)
    assert main(["shards", "verify", d, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert path in err and "sha256 expected" in err and "Traceback" not in err
    os.remove(os.path.join(d, "vocab", "vocab.json"))
    with pytest.raises(VerificationError, match="vocab.json: missing"):
        S.ShardSet.open(d)


def test_a_rerun_repairs_the_copy_and_adds_it_to_an_older_set(shard_set, work, docs, vocab_dir):
    d = str(work / "repair")
    shutil.copytree(shard_set, d)
    reference = read(os.path.join(d, "index.json"))
    shards_before = {f: os.stat(os.path.join(d, f)).st_mtime_ns for f in os.listdir(d)}
    # An older shard set: no copy, no index.json entry.
    shutil.rmtree(os.path.join(d, "vocab"))
    index = json.loads(reference)
    del index["vocab_files"]
    S.write_index(d, index)
    assert build(docs, vocab_dir, d) == 0
    assert read(os.path.join(d, "index.json")) == reference
    assert S.ShardSet.open(d).verify()["files"] == 3
    for f, t in shards_before.items():
        if f.endswith(".arrow"):
            assert os.stat(os.path.join(d, f)).st_mtime_ns == t, f  # no shard rewritten


def test_verify_prints_only_our_lines(shard_set, vocab_dir):
    """No Beam import noise ("WARNING:root:apitools not found …") on stderr: only the
    progress bar, whose lines start with "verify"."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")]))
    argv = [sys.executable, "-m", "c4forge", "shards", "verify", shard_set, "--vocab", vocab_dir]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"c4forge shards verify: {shard_set} OK")
    pieces = [p.strip() for p in proc.stderr.replace("\r", "\n").split("\n") if p.strip()]
    assert pieces and all(p.startswith("verify") for p in pieces), proc.stderr
