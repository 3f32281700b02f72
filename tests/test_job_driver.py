"""The skeleton the clean and shards drivers share (``engines.job_driver``): the engine chosen
(the input size asked for only when it can matter), the job's own engine closed however the
run ends and a caller's left open, the log and ``--resume`` lines, the completion file
committed only by the folder's owner."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clean_fixtures import DERIVED_WET

from c4forge.clean.config import CleanJob
from c4forge.engines import job_driver
from c4forge.engines.local import LocalEngine
from c4forge.io import ownership


def _job(tmp_path: Path, **kw) -> CleanJob:
    return CleanJob(inputs=(DERIVED_WET,), output=str(tmp_path / "out"), **kw)


def _never() -> int:
    raise AssertionError("the input size was read although it cannot matter")


def test_choose_engine_reads_the_input_size_only_for_auto_on_this_machine(tmp_path: Path) -> None:
    named = _job(tmp_path, engine="local")
    assert job_driver.choose_engine(named, _never) == (named, "")
    beam, why = job_driver.choose_engine(_job(tmp_path, runner="DirectRunner"), _never)
    assert (beam.engine, why) == ("beam", "auto: a Beam runner or Beam options given")
    local, why = job_driver.choose_engine(_job(tmp_path), lambda: 2_500_000)
    assert (local.engine, why) == ("local", "auto: 2.5 MB of input on this machine")


def test_the_jobs_own_engine_is_closed_and_a_callers_left_open(tmp_path: Path, monkeypatch) -> None:
    """``LocalEngine.close`` writes ``C4FORGE_ENGINE_PROFILE``: the file says it was closed."""
    profile = tmp_path / "profile.json"
    monkeypatch.setenv("C4FORGE_ENGINE_PROFILE", str(profile))
    job = _job(tmp_path, workers=1)

    def choose(j: CleanJob) -> tuple[CleanJob, str]:
        return job_driver.choose_engine(j, lambda: 0)

    with pytest.raises(RuntimeError, match="the run failed"):
        with job_driver.job_engine(job, None, choose) as (chosen, engine, why):
            assert (chosen.engine, type(engine), why) == (
                "local",
                LocalEngine,
                "auto: 0.0 MB of input on this machine",
            )
            raise RuntimeError("the run failed")
    assert profile.exists()  # closed although the run raised
    profile.unlink()

    given = LocalEngine(job.replace(engine="local"), workers=1)
    try:
        with job_driver.job_engine(job, given, choose) as (same, engine, why):
            assert (same, engine, why) == (job, given, "")
        assert not profile.exists()  # the caller's engine: still open
    finally:
        given.close()
    assert profile.exists()


def test_log_lines_respect_quiet_and_resume(tmp_path: Path, capsys) -> None:
    job_driver.log(_job(tmp_path), "c4forge clean: a line")
    job_driver.log(_job(tmp_path, quiet=True), "not shown")
    job_driver.log_resume(_job(tmp_path), "not asked to resume")
    job_driver.log_resume(_job(tmp_path, resume=True), "3 chunk(s) done")
    job_driver.log_resume(_job(tmp_path, resume=True, quiet=True), "quiet")
    err = capsys.readouterr().err
    assert err == "c4forge clean: a line\n  --resume: 3 chunk(s) done\n"


def test_engine_label(tmp_path: Path) -> None:
    engine = LocalEngine(_job(tmp_path, engine="local"), workers=1)
    try:
        said = "engine=local (1 worker processes, shuffles spilled to disk)"
        assert job_driver.engine_label(engine, "") == said
        assert job_driver.engine_label(engine, "auto: x") == f"{said} (auto: x)"
    finally:
        engine.close()


def test_a_folder_taken_over_commits_nothing(tmp_path: Path) -> None:
    folder = str(tmp_path / "out")
    written = []
    with ownership.owned_output(folder, "clean"):
        assert job_driver.commit_last(folder, lambda: written.append("stats.json") or "ok") == "ok"
        os.remove(os.path.join(folder, ownership.LOCK_NAME))  # another run took the folder
        with pytest.raises(ownership.OutputBusyError, match="nothing was committed"):
            job_driver.commit_last(folder, lambda: written.append("again"))
    assert written == ["stats.json"]
