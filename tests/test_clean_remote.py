"""`c4forge clean` with inputs and output on a bucket: Beam FileSystems paths end to end.

No cloud is reachable here, so the bucket is ``tests/memfs.py``'s in-memory Beam FileSystem
(scheme ``membucket://``, object-store semantics). Everything else is real: the CLI, input
resolution (``FileSystems.match``), the readers (``FileSystems.open``), the Beam pipeline on the
DirectRunner with one in-process worker (so it sees this process's memory), the atomic writes,
stats.json, --overwrite and --resume. A run on the same real files from local disk is the
reference: the bucket must receive byte-identical shards and stats.json. ``file://`` output
goes through Beam's own LocalFileSystem. The Spark-side fsspec fallback
(``warc_html.open_input``) is read from fsspec's ``memory://``.
"""

from __future__ import annotations

import json
import os
import socket

import pytest
from clean_fixtures import DERIVED_WET, GENUINE_WET_DIR
from memfs import SCHEME, MemFileSystem

from c4forge.clean.input_digests import SEEN_NAME
from c4forge.cli import main
from c4forge.corpus.counting import CounterBag
from c4forge.errors import InputError
from c4forge.io.inputs import resolve_inputs

BUCKET = f"{SCHEME}://bucket"
GENUINE = sorted(os.path.join(GENUINE_WET_DIR, n) for n in os.listdir(GENUINE_WET_DIR))
WHIRLWIND = next(p for p in GENUINE if p.endswith("whirlwind.warc.wet.gz"))
PLAIN_WET = next(p for p in GENUINE if p.endswith(".warc.wet"))
LICENSE = next(p for p in GENUINE if ".wet" not in p)
LOCAL_INPUTS = [WHIRLWIND, PLAIN_WET, DERIVED_WET]


def clean(*argv: str) -> int:
    return main(["clean", *argv, "--workers", "1", "--quiet"])


def read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def put_inputs() -> list[str]:
    """(Re)write the three real files in the bucket, reachable by the three INPUT forms (one each):

    * glob ``in/genuine/*.gz``  → whirlwind.warc.wet.gz (the LICENSE beside it is no match);
    * prefix ``in/derived``     → the derived WET (a "folder" is only a key prefix);
    * ``@lists/paths.txt``      → the plain .wet by a name relative to the list, plus the
      derived WET again by its full path (listed twice, read once), a comment and a blank.
    """
    b = BUCKET
    MemFileSystem.put(f"{b}/in/genuine/{os.path.basename(WHIRLWIND)}", read(WHIRLWIND))
    MemFileSystem.put(f"{b}/in/genuine/{os.path.basename(LICENSE)}", read(LICENSE))
    derived = f"{b}/in/derived/{os.path.basename(DERIVED_WET)}"
    MemFileSystem.put(derived, read(DERIVED_WET))
    MemFileSystem.put(f"{b}/lists/{os.path.basename(PLAIN_WET)}", read(PLAIN_WET))
    listing = f"# CC wet.paths style\n{os.path.basename(PLAIN_WET)}\n\n{derived}\n"
    MemFileSystem.put(f"{b}/lists/paths.txt", listing.encode())
    return [f"{b}/in/genuine/*.gz", f"{b}/in/derived", f"@{b}/lists/paths.txt"]


def setup_module() -> None:
    MemFileSystem.reset()


@pytest.fixture(scope="module")
def local_run(tmp_path_factory) -> dict[str, bytes]:
    """The reference: the same real files from local disk, local output."""
    out = str(tmp_path_factory.mktemp("local") / "out")
    assert clean(*LOCAL_INPUTS, "--output", out) == 0
    return {n: read(os.path.join(out, n)) for n in os.listdir(out) if n != SEEN_NAME}


def results(objects: dict[str, bytes]) -> dict[str, bytes]:
    """A folder's objects without the record of where its inputs were read from (paths and
    versions differ between a bucket and a local disk by nature)."""
    return {n: data for n, data in objects.items() if n != SEEN_NAME}


@pytest.fixture(scope="module")
def remote_run(local_run) -> dict:
    """Inputs in the bucket by glob + prefix + @list, output to the bucket."""
    specs = put_inputs()
    out = f"{BUCKET}/out"
    assert clean(*specs, "--output", out) == 0
    return {"specs": specs, "out": out, "objects": results(MemFileSystem.under(out))}


# --- (1) bucket in, bucket out == local ---------------------------------------------------------


def test_each_input_form_resolves_on_the_bucket():
    specs = put_inputs()
    names = [[f.name for f in resolve_inputs([s], "auto")] for s in specs]
    assert names == [
        [os.path.basename(WHIRLWIND)],
        [os.path.basename(DERIVED_WET)],
        [os.path.basename(DERIVED_WET), os.path.basename(PLAIN_WET)],  # by path: in/ < lists/
    ]
    every = resolve_inputs(specs, "auto")  # the duplicate across forms counts once
    assert [f.path for f in every] == sorted(f.path for f in every) and len(every) == 3
    assert [f.size for f in every] == [len(MemFileSystem.files[f.path]) for f in every]
    assert all(f.path.startswith(BUCKET) for f in every)


def test_bucket_run_is_byte_identical_to_the_local_run(remote_run, local_run):
    objects = remote_run["objects"]
    # Nothing but the results: no manifest, no temporary object, no _work, no funnel.
    assert sorted(objects) == sorted(local_run)
    stats = json.loads(objects["stats.json"])
    shards = [f for split in stats["outputs"].values() for f in split["files"]]
    assert shards and sum(f["documents"] for f in shards) > 0
    for f in shards:
        assert objects[f["file"]] == local_run[f["file"]], f["file"]
    local_stats = json.loads(local_run["stats.json"])
    assert stats["counters"] == local_stats["counters"]
    assert stats["inputs"]["count"] == 3 and stats["conservation_errors"] == []
    assert objects["stats.json"] == local_run["stats.json"]  # config, inputs, checksums too


def test_file_url_output_goes_through_beams_local_filesystem(local_run, tmp_path):
    out = tmp_path / "out"
    assert clean(*LOCAL_INPUTS, "--output", out.as_uri()) == 0
    assert results({n: read(str(out / n)) for n in os.listdir(out)}) == local_run


# --- (2) errors before the pipeline -------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (f"{BUCKET}/in/missing.warc.wet.gz", "does not exist"),
        (f"{BUCKET}/nothing-here", "does not exist"),
        (f"{BUCKET}/in/genuine/*.warc.wet.zst", "matches no file"),
        (f"@{BUCKET}/lists/missing.txt", "cannot read path list"),
    ],
)
def test_missing_remote_input_fails_before_the_pipeline(spec, message, capsys):
    put_inputs()
    before = dict(MemFileSystem.files)
    assert clean(spec, "--output", f"{BUCKET}/err-out") == 2
    err = capsys.readouterr().err
    assert err.startswith("c4forge clean: error: ") and message in err
    assert spec.lstrip("@") in err and "Traceback" not in err
    assert MemFileSystem.files == before  # nothing written: the pipeline never started


def test_missing_entry_of_a_remote_path_list(capsys):
    put_inputs()
    MemFileSystem.put(f"{BUCKET}/lists/bad.txt", b"gone.warc.wet.gz\n")
    assert clean(f"@{BUCKET}/lists/bad.txt", "--output", f"{BUCKET}/err-out") == 2
    assert f"{BUCKET}/lists/gone.warc.wet.gz" in capsys.readouterr().err


# --- (3) a finished run in a bucket folder ------------------------------------------------------


def test_finished_bucket_output_is_kept_refused_or_replaced(remote_run, capsys):
    specs, out = remote_run["specs"], remote_run["out"]
    reference = results(MemFileSystem.under(out))
    assert reference == remote_run["objects"]
    MemFileSystem.writes.clear()
    capsys.readouterr()
    assert main(["clean", *specs, "--output", out, "--workers", "1"]) == 0
    assert "already holds a complete run" in capsys.readouterr().out
    assert MemFileSystem.writes == [] and results(MemFileSystem.under(out)) == reference

    assert clean(*specs, "--output", out, "--dedup", "lines") == 2
    assert "--overwrite" in capsys.readouterr().err
    assert MemFileSystem.writes == [] and results(MemFileSystem.under(out)) == reference

    argv = [*specs, "--output", out, "--dedup", "lines", "--format", "parquet", "--overwrite"]
    assert clean(*argv) == 0
    objects = results(MemFileSystem.under(out))
    stats = json.loads(objects["stats.json"])
    assert stats["config"]["dedup"] == "lines"
    files = {f["file"] for split in stats["outputs"].values() for f in split["files"]}
    assert sorted(objects) == sorted(files | {"stats.json"})  # the old .json.gz shards gone


# --- (4) the fsspec fallback of the Spark side --------------------------------------------------


def test_fsspec_memory_input_reads_the_same_pages_as_the_local_file():
    fsspec = pytest.importorskip("fsspec")
    from c4forge.readers.warc_html import open_input, read_path

    url = "memory://c4forge-remote-test/" + os.path.basename(DERIVED_WET)
    with fsspec.open(url, "wb") as f:
        f.write(read(DERIVED_WET))
    try:
        with open_input(url) as f:
            assert f.read() == read(DERIVED_WET)
        remote_bag, local_bag = CounterBag(), CounterBag()
        remote = list(read_path(url, remote_bag, input_format="auto"))
        local = list(read_path(DERIVED_WET, local_bag, input_format="auto"))
        assert len(local) > 100 and remote == local
        assert remote_bag.counts == local_bag.counts
        with pytest.raises(InputError, match="memory://c4forge-remote-test/absent"):
            open_input("memory://c4forge-remote-test/absent.warc.wet.gz")
    finally:
        fsspec.filesystem("memory").rm("/c4forge-remote-test", recursive=True)


# --- (5) --resume with the progress records in the bucket ---------------------------------------


def test_resume_after_a_failed_run_on_the_bucket(local_run, capsys):
    specs = put_inputs()
    out = f"{BUCKET}/resumed"
    # The bucket refuses the second input's records: the run dies after the first input's
    # progress may have been recorded, as a killed job would.
    MemFileSystem.fail_create = "/_work/chunk-00001"
    with pytest.raises(Exception, match="injected write failure"):
        clean(*specs, "--output", out, "--resume")
    capsys.readouterr()
    MemFileSystem.fail_create = None
    work = MemFileSystem.under(f"{out}/_work")
    assert "job.json" in work and "stats.json" not in MemFileSystem.under(out)
    recorded = sorted(n for n in work if n.startswith("chunk-") and n.endswith(".json"))
    assert "chunk-00001.json" not in recorded

    assert main(["clean", *specs, "--output", out, "--resume", "--workers", "1"]) == 0
    err = capsys.readouterr().err
    skipped = len(recorded)
    print(f"resume: {skipped} of 3 inputs recorded before the failure")
    assert f"{skipped} chunk(s) done by an earlier run, skipped; {3 - skipped} processed" in err
    objects = results(MemFileSystem.under(out))
    assert sorted(objects) == sorted(local_run)  # _work removed once stats.json is written
    assert objects == local_run


def test_stale_bucket_work_folder_is_removed_by_a_plain_run(local_run, capsys):
    """A --resume run of other options left _work behind; a plain run discards it, and a later
    --resume of this configuration is not refused for that stale record."""
    specs = put_inputs()
    out = f"{BUCKET}/stale"
    MemFileSystem.fail_create = "/_work/chunk-00000"
    with pytest.raises(Exception, match="injected write failure"):
        clean(*specs, "--output", out, "--resume", "--dedup", "lines")
    MemFileSystem.fail_create = None
    assert "job.json" in MemFileSystem.under(f"{out}/_work")
    assert clean(*specs, "--output", out) == 0
    assert results(MemFileSystem.under(out)) == local_run
    assert clean(*specs, "--output", out, "--resume", "--overwrite") == 0, capsys.readouterr().err
    assert results(MemFileSystem.under(out)) == local_run


# --- Dataflow needs a remote output -------------------------------------------------------------


@pytest.mark.parametrize("runner", ["DataflowRunner", "dataflow"])
@pytest.mark.parametrize("kind", ["path", "file-url"])
def test_dataflow_with_a_local_output_fails_before_contacting_anything(
    runner, kind, tmp_path, capsys, monkeypatch
):
    def no_network(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    out = tmp_path / "out"
    target = str(out) if kind == "path" else out.as_uri()
    argv = ["clean", DERIVED_WET, "--output", target, "--runner", runner]
    argv += ["--project", "p", "--region", "europe-west1", "--temp_location", "gs://b/tmp"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("c4forge clean: error: ") and "gs://" in err and target in err
    assert "Traceback" not in err and not out.exists()


def teardown_module() -> None:
    MemFileSystem.reset()
