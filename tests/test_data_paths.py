"""Names read from data stay inside their folder, and a shard set's vocabulary copy is bound
to its fingerprinted ``vocabulary`` block: index.json's ``vocab_files`` (folder and file names)
and stats.json's shard names are never followed out of their folder; a copy whose files were
swapped together with their index.json records is refused by ``shards verify`` and ``train``.

Real documents (the bundled C4 sample), a real SentencePiece vocabulary, the real shards job;
a real clean output of the bundled WET fixture for ``report``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest
from cli_errors import one_line_error
from shards_fixtures import corpus_fixtures, shards_argv

from c4forge.cli import main
from c4forge.errors import VerificationError
from c4forge.formats import shards as S
from c4forge.io.names import member_name

HERE = os.path.dirname(os.path.abspath(__file__))

work, docs, vocab_dir, vocab = corpus_fixtures(
    "datapaths", per_train_file=120, total=300, vocab_size=500, sample_chars=300_000
)


@pytest.fixture(scope="module")
def shard_set(work, docs, vocab_dir):
    out = str(work / "set")
    argv = shards_argv(docs, vocab_dir, out, "--workers", "1", "--quiet", inputs_length=64)
    assert main(argv) == 0
    return out


def _copy(shard_set, tmp_path) -> str:
    d = str(tmp_path / "set")
    shutil.copytree(shard_set, d)
    return d


def _edit_index(d: str, edit) -> None:
    path = os.path.join(d, "index.json")
    index = json.load(open(path))
    edit(index)
    json.dump(index, open(path, "w"))


def _record(index: dict, name: str) -> dict:
    return next(r for r in index["vocab_files"]["files"] if r["file"] == name)


@pytest.mark.parametrize("directory", ["../vocab", "/etc", "vocab/../../x", ".."])
def test_vocab_files_directory_must_be_inside_the_set(shard_set, tmp_path, capsys, directory):
    d = _copy(shard_set, tmp_path)
    # what the found case did: the same files, reachable outside the set
    shutil.copytree(os.path.join(d, "vocab"), str(tmp_path / "vocab"))
    _edit_index(d, lambda ix: ix["vocab_files"].update(directory=directory))
    one_line_error(
        capsys, ["shards", "verify", d, "--quiet"], f"vocab_files.directory {directory!r}"
    )
    with pytest.raises(VerificationError, match="not a name inside its folder"):
        S.ShardSet.open(d)  # every training start opens the set this way


def test_vocab_file_names_must_be_vocabulary_files(shard_set, tmp_path, capsys):
    d = _copy(shard_set, tmp_path)
    outside = str(tmp_path / "hostname")
    open(outside, "w").write("a host\n")
    data = open(outside, "rb").read()

    def edit(ix):
        ix["vocab_files"]["files"].append(
            {
                "file": "../../hostname",
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
            }
        )

    _edit_index(d, edit)
    err = one_line_error(capsys, ["shards", "verify", d, "--quiet"], "'../../hostname'")
    assert hashlib.sha256(data).hexdigest() not in err


def _swap(d: str, name: str, data: bytes) -> None:
    """Replace a file of the copy and its index.json record together (sizes, sha256 agree)."""
    open(os.path.join(d, "vocab", name), "wb").write(data)

    def edit(ix):
        _record(ix, name).update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())

    _edit_index(d, edit)


def test_a_swapped_extra_ids_model_is_refused(shard_set, tmp_path, capsys):
    """The extra-ids model is a function of the fingerprinted model and extra_ids: another one,
    even with a matching record, fails (``shards verify`` and at the start of ``train``)."""
    d = _copy(shard_set, tmp_path)
    plain = open(os.path.join(d, "vocab", "sentencepiece.model"), "rb").read()
    _swap(d, "sentencepiece.extra_ids.model", plain)  # the model without its sentinels
    message = "sentencepiece.extra_ids.model: not the model that sentencepiece.model with"
    one_line_error(capsys, ["shards", "verify", d, "--quiet"], message)
    argv = [
        "train",
        d,
        "--output",
        str(tmp_path / "run"),
        "--steps",
        "1",
        "--preset",
        "tiny",
        "--batch-size",
        "4",
        "--no-progress",
    ]
    one_line_error(capsys, argv, message)
    assert not os.path.exists(tmp_path / "run" / "vocab")


def test_a_vocab_json_that_disagrees_with_the_fingerprint_is_refused(shard_set, tmp_path, capsys):
    d = _copy(shard_set, tmp_path)
    desc = json.load(open(os.path.join(d, "vocab", "vocab.json")))
    desc["vocab_size"] += 1
    _swap(d, "vocab.json", json.dumps(desc).encode())
    one_line_error(
        capsys,
        ["shards", "verify", d, "--quiet"],
        "vocab.json: vocab_size is",
        "index.json's vocabulary says",
    )


def test_an_intact_copy_still_verifies(shard_set, capsys):
    """Existing sets: the same bytes, the same fingerprint, and the new checks pass."""
    assert main(["shards", "verify", shard_set, "--quiet"]) == 0
    index = json.load(open(os.path.join(shard_set, "index.json")))
    assert index["dataset_fingerprint"] == S.dataset_fingerprint(index)


@pytest.mark.parametrize("name", ["../x", "/etc/hostname", "a/b", "..", "", None])
def test_member_name_refuses_paths(name):
    with pytest.raises(VerificationError, match="not a name inside its folder"):
        member_name(name, "index.json", "a file")
    assert member_name("c4-train.00000-of-00001.json.gz", "x", "y").startswith("c4-train")


def test_report_does_not_read_a_shard_named_outside_the_clean_folder(tmp_path, capsys):
    from datasheet_fixtures import clean_local

    wet = os.path.join(HERE, "data", "wet", "whirlwind.warc.wet.gz")
    clean = clean_local([wet], tmp_path / "clean")
    stats_path = clean / "stats.json"
    stats = json.load(open(stats_path))
    entry = stats["outputs"]["train"]["files"][0]
    # the same shard, one folder up: the old reader followed the name and reported it
    shutil.copy(clean / entry["file"], tmp_path / entry["file"])
    entry["file"] = f"../{entry['file']}"
    json.dump(stats, open(stats_path, "w"))
    one_line_error(
        capsys,
        ["report", str(clean), "-o", str(tmp_path / "r"), "--quiet"],
        f"{stats_path}: train file '{entry['file']}' is not a name inside its folder",
    )
