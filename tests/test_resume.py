"""Resumable runs: the ``_work`` protocol both engines share (progress.py), and the Spark
engine killed after its first chunk, resumed, giving the same output. The Beam engine's
kill-and-resume test is tests/test_beam_resume.py."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from c4forge.clean.resume_state import BEAM_DATA_SUFFIX, WorkDir, plan_chunks
from c4forge.errors import ConfigError
from c4forge.io.inputs import InputFile

ROOT = Path(__file__).parent.parent
# Three chunks of one file each (C4FORGE_CHUNK_FILES=1): a real crawl WARC, two real WETs.
INPUTS = [str(ROOT / "tests/data/warc/sample-0000.warc.gz"), str(ROOT / "tests/data/wet")]


def test_plan_chunks_lists_each_file_once() -> None:
    a, b, c = (InputFile(f"/d/{n}", 10) for n in "abc")
    chunks = plan_chunks([c, a, b, a], 2)
    assert [[f.path for f in ch.files] for ch in chunks] == [["/d/a", "/d/b"], ["/d/c"]]
    assert [ch.name for ch in chunks] == ["chunk-00000", "chunk-00001"]


def test_workdir_protocol(tmp_path: Path) -> None:
    work = WorkDir(str(tmp_path))
    chunks = plan_chunks([InputFile("/d/a", 1), InputFile("/d/b", 2)], 1)
    job = {"config": {"dedup": "spans"}, "inputs": [c.describe() for c in chunks]}
    assert work.start(job, resume=False) is False
    assert work.done(chunks[0]) is None
    work.mark_done(chunks[0], {"wet": {"pages": 3}})
    assert work.done(chunks[0])["counters"] == {"wet": {"pages": 3}}
    assert work.start(job, resume=True) is True  # same job: chunk 0 stays done
    assert work.done(chunks[0]) is not None and work.done(chunks[1]) is None
    other = {**job, "config": {"dedup": "lines"}}
    with pytest.raises(ConfigError, match="without --resume"):
        work.start(other, resume=True)
    assert work.start(other, resume=False) is False  # a fresh run discards the old chunks
    assert work.done(chunks[0]) is None
    work.finish()
    assert not (tmp_path / "_work").exists()


def test_engines_do_not_mix_their_chunks(tmp_path: Path) -> None:
    """A Beam run's ``_work`` (JSON-lines chunk files) is refused by a Spark --resume of the
    same inputs and options (pickle folders), and the other way round; reset() removes a
    chunk's data whether it is a file (Beam) or a folder (Spark)."""
    chunks = plan_chunks([InputFile("/d/a", 1), InputFile("/d/b", 2)], 1)
    inputs = [c.describe() for c in chunks]
    beam_job = {"engine": "beam", "config": {"dedup": "spans"}, "inputs": inputs}
    spark_job = {**beam_job, "engine": "spark", "chunk_files": 1}
    beam = WorkDir(str(tmp_path), BEAM_DATA_SUFFIX)
    assert beam.start(beam_job, resume=True) is False  # --resume on a first run: fresh
    data = Path(beam.data_path(chunks[0]))
    assert data.name == "chunk-00000.pages.gz"
    data.write_bytes(b"partial")
    beam.mark_done(chunks[0], {"wet": {"files": 1}})
    with pytest.raises(ConfigError, match="other options or inputs"):
        WorkDir(str(tmp_path)).start(spark_job, resume=True)
    assert beam.start(beam_job, resume=True) is True and beam.done(chunks[0]) is not None
    beam.reset(chunks[0])
    assert not data.exists() and beam.done(chunks[0]) is None

    spark = WorkDir(str(tmp_path))
    assert spark.start(spark_job, resume=False) is False
    folder = Path(spark.data_path(chunks[1]))
    folder.mkdir()
    (folder / "part-00000").write_bytes(b"x")
    with pytest.raises(ConfigError):
        beam.start(beam_job, resume=True)
    spark.reset(chunks[1])
    assert not folder.exists()


def _cmd(out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "c4forge",
        "clean",
        *INPUTS,
        "-o",
        str(out),
        "--engine",
        "spark",
        "--master",
        "local[2]",
        *extra,
    ]


def _env() -> dict[str, str]:
    env = dict(os.environ, C4FORGE_CHUNK_FILES="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def test_killed_run_resumes_to_the_same_output(tmp_path: Path) -> None:
    out = tmp_path / "resumed"
    proc = subprocess.Popen(
        _cmd(out),
        env=_env(),
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    first = out / "_work" / "chunk-00000.json"
    deadline = time.monotonic() + 400
    while not first.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, mid-run
    proc.wait()
    assert first.exists(), "the run never finished its first chunk"
    assert not (out / "stats.json").exists(), "the run finished before it could be killed"

    resumed = subprocess.run(
        _cmd(out, "--resume"), env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=500
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert re.search(
        r"--resume: [1-9]\d* chunk\(s\) done by an earlier run, skipped", resumed.stderr
    )

    ref = tmp_path / "uninterrupted"
    fresh = subprocess.run(
        _cmd(ref, "--quiet"), env=_env(), cwd=ROOT, capture_output=True, text=True, timeout=500
    )
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert (out / "stats.json").read_bytes() == (ref / "stats.json").read_bytes()
    stats = json.loads((ref / "stats.json").read_text())
    assert stats["outputs"]["train"]["documents"] >= 3
    for split in stats["outputs"].values():
        for f in split["files"]:
            assert (out / f["file"]).read_bytes() == (ref / f["file"]).read_bytes()
    assert not (out / "_work").exists()
