"""`clean --dedup-substrings` on Spark and Beam when a worker dies inside the stage: the run
ends in one line (exit 2), ``--resume`` finishes it, and the documents equal the brute-force
oracle (``substring_oracle``) applied to the corpus the same job writes without the stage —
keep ``none`` on Spark, keep ``first`` on Beam. The worker is SIGKILLed through the writers'
fault hook (``c4forge.faults``) while it writes a chunk's ``docs2`` scratch file: the window
pass, after the fingerprint shuffle, before the window shuffle. Inputs: the WET derived from
real WARC HTML and the genuine Common Crawl WETs (``tests/data/wet``), one chunk per file."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from clean_fixtures import DERIVED_WET, REPO
from substring_oracle import oracle

from c4forge import faults
from c4forge.dedup import substrings as sub

N = 60  # bytes: small enough that the real boilerplate repeats
INPUTS = [DERIVED_WET, *sorted(str(p) for p in (Path(REPO) / "tests/data/wet").glob("*.wet*"))]
WINDOW_PASS = "chunk-*.docs2.gz"  # written by the substring stage's window pass


def clean(out: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``c4forge clean`` of the inputs in a process of its own (a fault kills its workers)."""
    run_env = dict(os.environ, C4FORGE_CHUNK_FILES="1", **env)
    run_env["PYTHONPATH"] = os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])
    for key in (faults.FAULT_ENV, faults.MARKERS_ENV):
        if key not in env:
            run_env.pop(key, None)
    cmd = [sys.executable, "-m", "c4forge", "clean", *INPUTS, "-o", str(out), "--quiet", *args]
    return subprocess.run(cmd, env=run_env, cwd=REPO, capture_output=True, text=True, timeout=600)


def _docs(out: Path) -> dict[str, str]:
    docs = {}
    for p in sorted(out.glob("c4-*.json.gz")):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            docs.update((d["url"], d["text"]) for d in map(json.loads, f))
    return docs


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> list[tuple[str, str]]:
    """What the stage sees: the documents of the same job without it (local engine)."""
    out = tmp_path_factory.mktemp("plain") / "out"
    done = clean(out, "--engine", "local", "--workers", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted(_docs(out).items())


def _killed_then_resumed(
    out: Path, markers: Path, engine: list[str], keep: str, times: str
) -> None:
    stage = ["--dedup-substrings", str(N), "--substrings-keep", keep]
    failed = clean(
        out, *engine, *stage,
        C4FORGE_FAULT=f"{WINDOW_PASS}:kill:{times}", C4FORGE_FAULT_MARKERS=str(markers),
    )  # fmt: skip
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert any((out / "_work").glob("chunk-*.docs1.gz")), "the run never reached the stage"
    assert times == "always" or faults.fired(str(markers)) == 1
    assert failed.stderr.strip().splitlines()[-1].startswith("c4forge clean: error:")
    assert not (out / "stats.json").exists()
    resumed = clean(out, *engine, *stage, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]


def _check(out: Path, corpus: list[tuple[str, str]], keep: str) -> None:
    want, struck = oracle(corpus, N, keep)
    assert struck > 0 and any(t is None or t != dict(corpus)[u] for u, t in want.items())
    assert _docs(out) == {u: t for u, t in want.items() if t is not None}
    stats = json.loads((out / "stats.json").read_text())
    assert stats["conservation_errors"] == []
    assert stats["counters"][sub.STAGE]["bytes_struck"] == struck


@pytest.mark.slow
def test_spark_killed_in_the_window_pass_resumes_to_the_oracle(corpus, tmp_path: Path) -> None:
    """``local[2]`` (four attempts per task): every attempt of a window-pass task is killed,
    so the job fails; ``--resume`` on Spark gives the oracle's documents (keep ``none``)."""
    pytest.importorskip("pyspark")
    out = tmp_path / "out"
    spark = ["--engine", "spark", "--master", "local[2]"]
    _killed_then_resumed(out, tmp_path / "markers", spark, "none", "always")
    _check(out, corpus, "none")


def test_beam_worker_killed_in_the_window_pass_resumes_to_the_oracle(
    corpus, tmp_path: Path
) -> None:
    """Two SDK worker processes (the FnApiRunner never retries a bundle): one killed while it
    writes a window-pass scratch file ends the run; ``--resume`` on Beam gives the oracle's
    documents (keep ``first``)."""
    out = tmp_path / "out"
    beam = ["--engine", "beam", "--workers", "2"]
    _killed_then_resumed(out, tmp_path / "markers", beam, "first", "once")
    _check(out, corpus, "first")
