"""A run owns its output folder, deletes only what it wrote, and knows its inputs by content.

Real runs of `c4forge clean` (the local engine) on the bundled real WET sample and real
C4 pages, real second processes holding or racing for the folder, a real SIGKILLed holder
for the stale-lock takeover; nothing under test is mocked.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clean_fixtures import c4_docs, doc_records, wet_bytes, write

from c4forge import cli
from c4forge.clean import driver
from c4forge.io import fingerprint, ownership, storage

ROOT = Path(__file__).parent.parent
SAMPLE = ROOT / "c4forge" / "data" / "sample"
REAL_WET = SAMPLE / "real-warc-html-to-wet.resiliparse.warc.wet.gz"  # 606 KB, real pages
C4_SHARD = SAMPLE / "c4-sample.00000-of-00001.json.gz"


def env() -> dict[str, str]:
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(ROOT), e.get("PYTHONPATH", "")])
    return e


def clean(*argv: str) -> int:
    return cli.main(["clean", *argv, "--engine", "local", "--workers", "1"])


def listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


HOLDER = """
import sys, time
from c4forge.io import ownership
ownership.acquire(sys.argv[1], "holder", *sys.argv[2:])
print("held", flush=True)
time.sleep(600)
"""


def hold(folder: Path | str, *name: str) -> subprocess.Popen:
    """A second process that takes ``folder`` (its lock file ``name``, if given) and keeps it
    until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder), *name],
        env=env(),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


# --- clean deletes only what it wrote --------------------------------------------------------


def test_clean_refuses_a_foreign_c4_file_and_keeps_it(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(C4_SHARD, out / C4_SHARD.name)  # the bundled C4 sample, not clean's
    before = listing(out)
    assert clean(str(REAL_WET), "-o", str(out), "--quiet") == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and C4_SHARD.name in err and "Traceback" not in err
    assert listing(out) == before  # nothing deleted, nothing written
    # --overwrite does not make it clean's either
    assert clean(str(REAL_WET), "-o", str(out), "--quiet", "--overwrite") == 2
    assert listing(out) == before


def test_clean_replaces_only_its_own_earlier_shards(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert clean(str(REAL_WET), "-o", str(out), "--quiet", "--train-shards", "2") == 0
    old = sorted(n for n in os.listdir(out) if n.startswith("c4-"))
    assert "c4-train.00001-of-00002.json.gz" in old
    # its stats.json proves the old shards are clean's: a new shard count replaces them
    assert clean(str(REAL_WET), "-o", str(out), "--quiet", "--overwrite") == 0
    names = sorted(os.listdir(out))
    assert "c4-train.00000-of-00001.json.gz" in names
    assert not [n for n in names if n.endswith("-of-00002.json.gz")]
    assert ownership.LOCK_NAME not in names  # a finished folder holds no lock


def test_finished_folder_has_no_debris(tmp_path: Path) -> None:
    """The leftovers of a killed run (temporary siblings of its writes, ``_work/`` left after
    stats.json) go when the next run finds the folder finished; a stranger's file stays."""
    out = tmp_path / "out"
    assert clean(str(REAL_WET), "-o", str(out), "--quiet") == 0
    before = listing(out)
    (out / "c4-train.00000-of-00001.json.gz.tmp-4242-0a1b2c3d").write_bytes(b"partial")
    (out / "stats.json.tmp-4242-deadbeef").write_bytes(b"{")
    (out / "notes.txt.tmp-4242-deadbeef").write_bytes(b"not clean's")
    work = out / "_work"
    work.mkdir()
    (work / "job.json").write_text(json.dumps({"format": "c4forge.clean.progress"}))
    assert clean(str(REAL_WET), "-o", str(out), "--quiet") == 0
    assert listing(out) == {**before, "notes.txt.tmp-4242-deadbeef": b"not clean's"}
    assert not work.exists()


# --- one run at a time -----------------------------------------------------------------------


def test_a_second_run_is_refused_naming_the_holder(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    proc = hold(out)
    try:
        assert clean(str(REAL_WET), "-o", str(out), "--quiet") == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"pid {proc.pid}" in err and "holder" in err
        assert sorted(os.listdir(out)) == [ownership.LOCK_NAME]  # nothing written
    finally:
        proc.kill()
        proc.wait()


def test_two_concurrent_clean_runs(tmp_path: Path) -> None:
    """The real race of the report: a run started while another writes the folder."""
    out = tmp_path / "out"
    first = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "c4forge",
            "clean",
            str(REAL_WET),
            "-o",
            str(out),
            "--quiet",
            "--engine",
            "local",
            "--workers",
            "1",
        ],
        env=env(),
        stderr=subprocess.PIPE,
        text=True,
    )
    lock = out / ownership.LOCK_NAME
    deadline = time.monotonic() + 120
    while not lock.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    second = subprocess.run(
        [
            sys.executable,
            "-m",
            "c4forge",
            "clean",
            str(REAL_WET),
            "-o",
            str(out),
            "--quiet",
            "--engine",
            "local",
            "--workers",
            "1",
            "--dedup",
            "lines",
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    _, first_err = first.communicate(timeout=300)
    assert first.returncode == 0, first_err
    # the second either found the folder busy or (had the first already ended) refused the
    # first's finished run of another configuration: never both writing, never a replacement
    assert second.returncode == 2, second.stderr
    assert "Traceback" not in second.stderr and len(second.stderr.strip().splitlines()) == 1
    stats = json.loads((out / "stats.json").read_text())
    assert stats["config"]["dedup"] == "spans"
    for block in stats["outputs"].values():
        for f in block["files"]:
            data = (out / f["file"]).read_bytes()
            assert hashlib.sha256(data).hexdigest() == f["sha256"]


def test_stale_lock_of_a_killed_run_is_taken_over(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    proc = hold(out)
    proc.send_signal(signal.SIGKILL)  # as the OOM killer would: the lock file stays
    proc.wait()
    assert (out / ownership.LOCK_NAME).exists()
    assert clean(str(REAL_WET), "-o", str(out), "--quiet") == 0
    err = capsys.readouterr().err
    assert f"taking over the lock of c4forge holder (pid {proc.pid}" in err
    assert (out / "stats.json").exists() and not (out / ownership.LOCK_NAME).exists()


def test_lock_of_another_host_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    holder = {"command": "train", "host": "elsewhere", "pid": 1, "started": "x", "run_id": "r"}
    (out / ownership.LOCK_NAME).write_text(json.dumps(holder))
    with pytest.raises(ownership.OutputBusyError, match="on another machine.*delete"):
        ownership.acquire(str(out), "clean")


def test_other_commands_hold_their_folders(tmp_path: Path, capsys) -> None:
    """report, vocab and train refuse a folder another run holds, before any work."""
    clean_dir = tmp_path / "clean"
    assert clean(str(REAL_WET), "-o", str(clean_dir), "--quiet") == 0
    for argv in (
        ["report", str(clean_dir), "-o", "{out}", "--quiet"],
        ["vocab", str(clean_dir), "-o", "{out}", "--vocab-size", "300", "--quiet"],
    ):
        out = tmp_path / argv[0]
        proc = hold(out)
        try:
            assert cli.main([a.format(out=out) for a in argv]) == 2
            err = capsys.readouterr().err
            assert f"pid {proc.pid}" in err and "Traceback" not in err
            assert sorted(os.listdir(out)) == [ownership.LOCK_NAME]
        finally:
            proc.kill()
            proc.wait()


def test_object_store_run_marker(tmp_path: Path) -> None:
    """On the tests' in-memory bucket: a marker created only if absent, a live holder refused,
    a marker replaced meanwhile fails the final check, the marker gone after release."""
    memfs = pytest.importorskip("memfs")
    memfs.MemFileSystem.reset()
    folder = f"{memfs.SCHEME}://bucket/out"
    marker = f"{folder}/{ownership.MARKER_NAME}"
    ownership.acquire(folder, "clean")
    try:
        ownership.check_owner(folder)
        other = {"command": "shards", "host": "elsewhere", "pid": 7, "run_id": "other"}
        memfs.MemFileSystem.put(marker, json.dumps(other).encode())
        with pytest.raises(ownership.OutputBusyError, match="taken over by c4forge shards"):
            ownership.check_owner(folder)
    finally:
        ownership.release(folder)
    assert storage.exists(marker)  # another run's marker is not ours to delete
    with pytest.raises(ownership.OutputBusyError, match="pid 7 on host elsewhere"):
        ownership.acquire(folder, "clean")
    storage.remove(marker)
    ownership.acquire(folder, "clean")
    ownership.release(folder)
    assert not storage.exists(marker)


# --- inputs known by content -----------------------------------------------------------------


def rewrite_same_size(path: Path) -> None:
    """Another file of the same name and size (a re-download), with a newer mtime."""
    data = bytearray(path.read_bytes())
    st = path.stat()
    i = len(data) // 2
    data[i] ^= 0x01
    path.write_bytes(bytes(data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 2_000_000_000))


def test_the_read_itself_hashes_the_input(tmp_path: Path) -> None:
    from c4forge.corpus.counting import CounterBag
    from c4forge.readers import read_input

    path = str(REAL_WET)
    with fingerprint.digesting(path) as digest:
        pages = list(read_input(path, CounterBag(), max_record_bytes=1 << 24, input_format="wet"))
    assert pages and digest.upto == os.path.getsize(path)  # no second pass needed
    assert digest.hexdigest() == storage.sha256(path)


def test_finished_folder_with_a_changed_input_is_refused(tmp_path: Path, capsys) -> None:
    wet = tmp_path / "in.warc.wet.gz"
    shutil.copy(REAL_WET, wet)
    out = tmp_path / "out"
    assert clean(str(wet), "-o", str(out), "--quiet") == 0
    stats = json.loads((out / "stats.json").read_text())
    assert stats["inputs"]["files"] == [
        {"name": wet.name, "sha256": hashlib.sha256(wet.read_bytes()).hexdigest()}
    ]
    before = listing(out)

    os.utime(wet)  # touched, same bytes: still the same run
    capsys.readouterr()
    assert clean(str(wet), "-o", str(out)) == 0
    assert "already" in capsys.readouterr().out
    rewrite_same_size(wet)  # same name and size, other bytes
    assert clean(str(wet), "-o", str(out), "--quiet") == 2
    err = capsys.readouterr().err
    assert "another version of input in.warc.wet.gz" in err and len(err.strip().splitlines()) == 1
    assert {k: v for k, v in listing(out).items() if not k.startswith(".")} == {
        k: v for k, v in before.items() if not k.startswith(".")
    }


def test_resume_with_a_changed_input_is_refused(tmp_path: Path, monkeypatch, capsys) -> None:
    """A run interrupted just before stats.json (its chunks recorded in ``_work``); one input
    re-downloaded meanwhile: --resume names it instead of keeping the old file's work."""
    docs = c4_docs(0, 8)
    a = Path(write(str(tmp_path / "a.warc.wet.gz"), wet_bytes(doc_records(docs[:4]))))
    b = Path(write(str(tmp_path / "b.warc.wet.gz"), wet_bytes(doc_records(docs[4:]))))
    out = tmp_path / "out"
    monkeypatch.setenv("C4FORGE_CHUNK_FILES", "1")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies here: _work stays, no stats.json

    with monkeypatch.context() as m:
        m.setattr(driver, "finish", killed)
        assert clean(str(a), str(b), "-o", str(out), "--quiet") == 130
    records = json.loads((out / "_work" / "chunk-00001.json").read_text())
    assert records["sha256"] == {str(b): hashlib.sha256(b.read_bytes()).hexdigest()}
    rewrite_same_size(b)
    assert clean(str(a), str(b), "-o", str(out), "--quiet", "--resume") == 2
    err = capsys.readouterr().err
    assert f"input {b} changed since the interrupted run" in err
    assert not (out / "stats.json").exists()
    # started over, it is the new file's corpus
    assert clean(str(a), str(b), "-o", str(out), "--quiet") == 0
    stats = json.loads((out / "stats.json").read_text())
    files = {f["name"]: f["sha256"] for f in stats["inputs"]["files"]}
    assert files[b.name] == hashlib.sha256(b.read_bytes()).hexdigest()


def test_shards_source_of_a_c4_release_is_bound_by_content(tmp_path: Path) -> None:
    """Clean files without stats.json (AllenAI's layout): index.json's source, and with it the
    dataset fingerprint a finished or resumed build is matched on, changes with a file's bytes."""
    from c4forge.corpus import clean_docs
    from c4forge.shards.build import source_block

    docs = tmp_path / "c4"
    docs.mkdir()
    train = docs / "c4-train.00000-of-00001.json.gz"
    shutil.copy(C4_SHARD, train)
    files = {"train": clean_docs.list_clean_shards(str(docs), "train")}
    first = source_block(str(docs), files, None)
    assert first["clean_files_sha256"] == {
        "train": {train.name: hashlib.sha256(train.read_bytes()).hexdigest()}
    }
    data = bytearray(train.read_bytes())
    data[4:8] = (int.from_bytes(data[4:8], "little") + 1).to_bytes(4, "little")  # gzip mtime
    train.write_bytes(bytes(data))  # a re-compressed download: same size and lines, other bytes
    second = source_block(str(docs), files, None)
    assert second["documents"] == first["documents"] and second != first


def test_spills_of_a_killed_run_are_removed_by_the_next(tmp_path: Path, monkeypatch) -> None:
    """A run SIGKILLed mid-job leaves its local-engine spill folder in the temporary
    directory; the next run removes it (its pid is gone) and leaves a live run's alone."""
    import tempfile

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    out = tmp_path / "out"
    victim = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "c4forge",
            "clean",
            str(REAL_WET),
            "-o",
            str(out),
            "--quiet",
            "--engine",
            "local",
            "--workers",
            "1",
        ],
        env={**env(), "TMPDIR": str(scratch)},
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    spill = []
    while not spill and victim.poll() is None and time.monotonic() < deadline:
        spill = [p for p in scratch.iterdir() if p.name.startswith(f"c4forge-local-{victim.pid}-")]
        time.sleep(0.005)
    victim.kill()
    victim.wait()
    assert spill and spill[0].exists(), "the run ended before its spill folder was seen"
    live = scratch / f"c4forge-local-{os.getpid()}-live"
    live.mkdir()
    stranger = scratch / "c4forge-local-notapid"
    stranger.mkdir()
    assert clean(str(REAL_WET), "-o", str(out), "--quiet") == 0
    assert not spill[0].exists() and live.exists() and stranger.exists()
    assert not [
        p
        for p in scratch.iterdir()
        if p.name.startswith(f"c4forge-local-{os.getpid()}-") and p != live
    ]


@pytest.mark.parametrize("command", ["vocab", "report"])
def test_output_naming_a_file_is_one_line_before_work(tmp_path: Path, capsys, command) -> None:
    clean_dir = tmp_path / "clean"
    assert clean(str(REAL_WET), "-o", str(clean_dir), "--quiet") == 0
    target = tmp_path / "a-file"
    target.write_text("mine")
    assert cli.main([command, str(clean_dir), "-o", str(target), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "exists and is not a folder" in err and len(err.strip().splitlines()) == 1
    assert target.read_text() == "mine"


def test_shards_over_a_replaced_c4_release_file_is_refused(tmp_path: Path, capsys) -> None:
    """A real vocab + shards build over C4-release files (no stats.json); one file replaced by
    a re-compressed copy of the same size: the rerun is refused, not "already complete"."""
    docs = tmp_path / "c4"
    docs.mkdir()
    train = docs / "c4-train.00000-of-00001.json.gz"
    shutil.copy(C4_SHARD, train)
    vocab, out = tmp_path / "vocab", tmp_path / "shards"
    assert cli.main(["vocab", str(docs), "-o", str(vocab), "--vocab-size", "300", "--quiet"]) == 0
    argv = ["shards", str(docs), "--vocab", str(vocab), "-o", str(out), "--inputs-length", "64"]
    argv += ["--workers", "1", "--quiet"]
    assert cli.main(argv) == 0
    index = json.loads((out / "index.json").read_text())
    digest = hashlib.sha256(train.read_bytes()).hexdigest()
    assert index["source"]["clean_files_sha256"] == {"train": {train.name: digest}}
    data = bytearray(train.read_bytes())
    data[4:8] = (int.from_bytes(data[4:8], "little") + 1).to_bytes(4, "little")  # gzip mtime
    train.write_bytes(bytes(data))
    capsys.readouterr()
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "built differently" in err and "--overwrite" in err
    assert json.loads((out / "index.json").read_text()) == index  # the old set untouched
