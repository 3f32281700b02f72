"""``c4forge.io.storage``: path kinds, and "absent" only ever meaning a confirmed absence.

The failing filesystem below is a real Beam ``FileSystem`` (registered by scheme, reached
through Beam's ``FileSystems`` dispatch like gs:// or s3://) whose listing and reading fail,
as a bucket does on a network or permission error. Both failures were once read as
"nothing there": stale shards survived a failed listing, and a failed read of a finished run's
stats.json let the run be recomputed over it without --overwrite.
"""

from __future__ import annotations

import json

import pytest
from apache_beam.io.filesystem import BeamIOError
from memfs import MemFileSystem

from c4forge import cli
from c4forge.clean import output as clean_output
from c4forge.clean import stats as clean_stats
from c4forge.corpus.clean_docs import CLEAN_STATS_FORMAT
from c4forge.errors import StorageError
from c4forge.io import storage

FAIL = "failbucket"


class FailingFileSystem(MemFileSystem):
    """Objects exist (``exists`` answers), but listing and opening fail."""

    @classmethod
    def scheme(cls) -> str:
        return FAIL

    def _list(self, dir_or_prefix: str):
        raise BeamIOError(f"{dir_or_prefix}: listing refused (503 Slow Down)")

    def open(self, path, mime_type="application/octet-stream", compression_type=None):
        raise BeamIOError(f"{path}: read refused (403 Forbidden)")


@pytest.fixture
def bucket():
    MemFileSystem.reset()
    yield f"{FAIL}://b"
    MemFileSystem.reset()


def test_path_kinds(tmp_path) -> None:
    assert storage.normalize("file:///data/x%20y.gz") == "/data/x y.gz"
    assert storage.normalize("file:/data/x") == "/data/x"
    assert storage.normalize("gs://b/x") == "gs://b/x"
    assert not storage.is_remote("file:///data") and not storage.is_remote("/data")
    assert storage.is_remote("gs://b/x") and storage.is_remote("hdfs://nn/x")
    assert storage.is_remote("s3://b/x") and not storage.is_remote("C:/x")
    uri = tmp_path.as_uri()
    storage.write_json(storage.join(uri, "a.json"), {"b": 1, "a": [1]})
    assert (tmp_path / "a.json").read_text() == '{\n  "a": [\n    1\n  ],\n  "b": 1\n}\n'
    assert storage.listdir(uri) == ["a.json"] and storage.exists(uri + "/a.json")
    assert storage.read_json_if_exists(uri + "/missing.json") is None
    assert storage.sha256(str(tmp_path / "a.json")) == storage.sha256_bytes(
        (tmp_path / "a.json").read_bytes()
    )


def test_failed_listing_is_an_error_not_an_empty_folder(bucket) -> None:
    MemFileSystem.put(f"{bucket}/out/c4-train.00000-of-00002.json.gz", b"stale")
    with pytest.raises(StorageError, match="cannot list .*listing refused"):
        storage.listdir(f"{bucket}/out")
    with pytest.raises(StorageError, match="listing refused"):
        clean_output.list_shard_files(f"{bucket}/out")  # was [] → stale shards kept
    with pytest.raises(StorageError):
        storage.rmtree(f"{bucket}/out")


def test_failed_read_of_stats_is_an_error_not_an_unfinished_run(bucket, tmp_path) -> None:
    path = f"{bucket}/out/stats.json"
    assert clean_stats.read_existing(path) is None  # confirmed absent: no finished run
    MemFileSystem.put(path, json.dumps({"format": CLEAN_STATS_FORMAT}).encode())
    with pytest.raises(StorageError, match="cannot read .*read refused"):
        clean_stats.read_existing(path)  # was None → the finished run was overwritten
    local = tmp_path / "stats.json"
    local.mkdir()  # exists, cannot be read as a file
    with pytest.raises(StorageError, match="cannot read"):
        clean_stats.read_existing(str(local))


def test_cli_stops_before_work_when_the_finished_run_cannot_be_read(bucket, capsys) -> None:
    from clean_fixtures import GENUINE_WET_DIR

    out = f"{bucket}/out"
    MemFileSystem.put(f"{out}/stats.json", b"{}")
    assert cli.main(["clean", GENUINE_WET_DIR, "-o", out, "--workers", "1", "--quiet"]) == 2
    assert "cannot read failbucket://b/out/stats.json" in capsys.readouterr().err
    assert MemFileSystem.under(out) == {"stats.json": b"{}"}  # nothing written or removed
