"""The stage profile on Beam and Spark (``C4FORGE_ENGINE_PROFILE``): shuffle bytes
per stage, as ``benchmarks/scale.py`` reads them, and the same output with and without it.

Beam (DirectRunner): the encoded bytes entering each shuffle, from the pipeline's metrics; no
step is added without the variable. Spark (``local[2]``, a context of the job's own): the bytes
written to Spark's shuffle files, from its event log, by stage label."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clean_fixtures import DERIVED_WET, GENUINE_WET_DIR

from c4forge.clean.config import CleanJob
from c4forge.clean.driver import run_clean
from c4forge.engines.base import PROFILE_ENV
from c4forge.engines.beam import BeamEngine

INPUTS = (DERIVED_WET, GENUINE_WET_DIR)
STAGES = {"url_dedup", "dedup", "output"}  # shuffles every run of the default plan has


def _outputs(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def _steps(engine: BeamEngine) -> list[str]:
    proto = engine.pipeline.to_runner_api()
    return [t.unique_name for t in proto.components.transforms.values()]


def _check_profile(path: Path, largest: bool = False) -> dict[str, int]:
    prof = json.loads(path.read_text())
    extra = {"largest_element"} if largest else set()
    assert set(prof) == {"seconds", "shuffle_bytes", "out_bytes", *extra}
    shuffled = prof["shuffle_bytes"]
    assert STAGES <= set(shuffled) and all(shuffled[s] > 0 for s in STAGES), shuffled
    assert "other" not in shuffled  # every shuffle is attributed to a stage of the plan
    return shuffled


def test_beam_and_spark_profiles_with_the_same_outputs(tmp_path: Path, monkeypatch) -> None:
    plain_job = CleanJob(INPUTS, str(tmp_path / "plain"), quiet=True, engine="beam", workers=1)
    plain_engine = BeamEngine(plain_job)
    assert run_clean(plain_job, plain_engine) == 0
    assert not any("shuffle_bytes" in s for s in _steps(plain_engine))  # no extra step
    plain_engine.close()
    plain = _outputs(tmp_path / "plain")
    assert any(n.startswith("c4-train") for n in plain) and "stats.json" in plain

    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "beam.json"))
    beam_job = plain_job.replace(output=str(tmp_path / "beam"))
    beam_engine = BeamEngine(beam_job)
    assert run_clean(beam_job, beam_engine) == 0
    assert any("shuffle_bytes" in s for s in _steps(beam_engine))
    beam_engine.close()
    assert _outputs(tmp_path / "beam") == plain
    beam = _check_profile(tmp_path / "beam.json", largest=True)
    # the largest element of every collection: the wet source, the passes, the output groups
    largest = json.loads((tmp_path / "beam.json").read_text())["largest_element"]
    assert {"wet", "pass0/join", "output/split", "output/write/group"} <= set(largest)
    assert all(n > 0 for n in largest.values()), largest
    # documents reach the shard writers through sorted runs on storage: what a writer's group
    # holds is run paths, far smaller than one page of text
    assert largest["output/write/group"] < 2000, largest

    pytest.importorskip("pyspark")
    monkeypatch.setenv(PROFILE_ENV, str(tmp_path / "spark.json"))
    spark_job = CleanJob(
        INPUTS, str(tmp_path / "spark"), quiet=True, engine="spark", master="local[2]", workers=2
    )
    assert run_clean(spark_job) == 0  # the job's own context: stopped, event log read
    assert _outputs(tmp_path / "spark") == plain
    spark = _check_profile(tmp_path / "spark.json")
    # no document crosses the output shuffles on either engine: run paths and counts only
    shard_bytes = sum(len(v) for n, v in plain.items() if n.startswith("c4-"))
    assert beam["output"] < shard_bytes / 4 and spark["output"] < shard_bytes / 4

    # a later context of the process (PySpark reuses the JVM) does not inherit the event log
    from c4forge.engines.spark_launch import make_context

    monkeypatch.delenv(PROFILE_ENV)
    sc = make_context("local[1]", None, [])
    try:
        assert sc.getConf().get("spark.eventLog.enabled", "false") == "false"
    finally:
        sc.stop()
