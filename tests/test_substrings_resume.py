"""`clean --dedup-substrings` on Spark and Beam killed inside the stage, then ``--resume``:
the documents equal the brute-force oracle (``substring_oracle``) applied to the corpus the
same job writes without the stage — keep ``none`` on Spark (the whole run SIGKILLed), keep
``first`` on Beam (one SDK worker SIGKILLed: the run ends in one line, exit 2). The point is
set through the writers' fault hook (``c4forge.faults``): a worker writing a chunk's
``docs1`` scratch file, i.e. the stage's fingerprint pass, the last scratch copy of the
documents the stage writes (the window pass after the fingerprint shuffle reads that file
again and rewrites nothing: ``passes.docs_written_by``), so both shuffles run after the
resume. Inputs: the WET derived from real WARC HTML and the genuine Common Crawl
WETs (``tests/data/wet``), one chunk per file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from clean_fixtures import DERIVED_WET, REPO, docs_by_url, subprocess_env
from substring_oracle import oracle

from c4forge import faults
from c4forge.dedup import substrings as sub

N = 60  # bytes: small enough that the real boilerplate repeats
INPUTS = [DERIVED_WET, *sorted(str(p) for p in (Path(REPO) / "tests/data/wet").glob("*.wet*"))]
FP_PASS = "chunk-*.docs1.gz"  # written by the substring stage's fingerprint pass


def _cmd(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "c4forge", "clean", *INPUTS, "-o", str(out), "--quiet", *args]


def clean(out: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``c4forge clean`` of the inputs in a process of its own (a fault kills its workers)."""
    return subprocess.run(
        _cmd(out, *args),
        env=subprocess_env(**env),
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[tuple[str, str]]:
    """What the stage sees: the documents of the same job without it (local engine)."""
    out = tmp_path_factory.mktemp("plain") / "out"
    done = clean(out, "--engine", "local", "--workers", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted(docs_by_url(out).items())


def _killed_then_resumed(out: Path, markers: Path, engine: list[str], keep: str) -> None:
    """A worker SIGKILLed once as it writes a fingerprint-pass scratch file ends the run in
    one line (exit 2); ``--resume`` finishes it."""
    stage = ["--dedup-substrings", str(N), "--substrings-keep", keep]
    failed = clean(
        out,
        *engine,
        *stage,
        C4FORGE_FAULT=f"{FP_PASS}:kill",
        C4FORGE_FAULT_MARKERS=str(markers),
    )
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert faults.fired(str(markers)) == 1, "the run never reached the stage"
    assert failed.stderr.strip().splitlines()[-1].startswith("c4forge clean: error:")
    assert not (out / "stats.json").exists()
    resumed = clean(out, *engine, *stage, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def _check(out: Path, corpus: list[tuple[str, str]], keep: str) -> None:
    want, struck = oracle(corpus, N, keep)
    assert struck > 0 and any(t is None or t != dict(corpus)[u] for u, t in want.items())
    assert docs_by_url(out) == {u: t for u, t in want.items() if t is not None}
    stats = json.loads((out / "stats.json").read_text())
    assert stats["conservation_errors"] == []
    assert stats["counters"][sub.STAGE]["bytes_struck"] == struck


@pytest.mark.slow
def test_spark_run_killed_in_the_fingerprint_pass_resumes_to_the_oracle(
    corpus, tmp_path: Path
) -> None:
    """``local[2]``: a worker stalls while it writes a fingerprint-pass scratch file, and the whole
    run (driver, JVM, Python workers) is SIGKILLed there; ``--resume`` on Spark gives the
    oracle's documents (keep ``none``)."""
    pytest.importorskip("pyspark")
    out, markers = tmp_path / "out", tmp_path / "markers"
    args = ["--engine", "spark", "--master", "local[2]", "--dedup-substrings", str(N)]
    env = subprocess_env(
        C4FORGE_FAULT=f"{FP_PASS}:stall:once",
        C4FORGE_FAULT_MARKERS=str(markers),
        C4FORGE_FAULT_STALL_S="600",
    )
    proc = subprocess.Popen(
        _cmd(out, *args),
        env=env,
        cwd=REPO,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 400
    while proc.poll() is None and not faults.fired(str(markers)) and time.monotonic() < deadline:
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert faults.fired(str(markers)) >= 1, "the run never reached the fingerprint pass"
    assert not (out / "stats.json").exists()
    resumed = clean(out, *args, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _check(out, corpus, "none")


def test_beam_worker_killed_in_the_fingerprint_pass_resumes_to_the_oracle(
    corpus, tmp_path: Path
) -> None:
    """Two SDK worker processes (the FnApiRunner never retries a bundle): one killed while it
    writes a fingerprint-pass scratch file ends the run; ``--resume`` on Beam gives the oracle's
    documents (keep ``first``)."""
    out = tmp_path / "out"
    beam = ["--engine", "beam", "--workers", "2"]
    _killed_then_resumed(out, tmp_path / "markers", beam, "first")
    _check(out, corpus, "first")
