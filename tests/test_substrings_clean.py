"""`clean --dedup-substrings` end to end on real crawl text (the bundled WET derived from real
WARC HTML, ``c4forge/data/sample``): the documents equal the oracle applied to the corpus the
same job writes without the stage, on the local engine with 1 and 2 workers, on Spark
(local[2]) and on Beam (DirectRunner) with the same bytes; the option off changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clean_fixtures import DERIVED_WET, docs_by_url
from substring_oracle import oracle

from c4forge.clean.config import CleanJob
from c4forge.clean.driver import run_clean
from c4forge.dedup import substrings as sub
from c4forge.engines import local

N = 60  # bytes: small enough that the sample's real boilerplate repeats


def _run(out: Path, engine=None, **kw) -> Path:
    job = CleanJob((DERIVED_WET,), str(out), quiet=True, engine="local", workers=1, **kw)
    assert run_clean(job, engine or local.LocalEngine(job)) == 0
    return out


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def _stats(out: Path) -> dict:
    return json.loads((out / "stats.json").read_text())


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> Path:
    return _run(tmp_path_factory.mktemp("plain"))


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> Path:
    return _run(tmp_path_factory.mktemp("first"), dedup_substrings=N, substrings_keep="first")


@pytest.mark.parametrize("keep", sub.KEEP_MODES)
def test_documents_equal_the_oracle_on_the_corpus_without_the_stage(
    plain, first, tmp_path: Path, keep: str
) -> None:
    out = first if keep == "first" else _run(tmp_path, dedup_substrings=N, substrings_keep=keep)
    corpus = sorted(docs_by_url(plain).items())
    want, struck = oracle(corpus, N, keep)
    assert struck > 0 and any(v is not None and v != t for (_, t), v in zip(corpus, want.values()))
    assert docs_by_url(out) == {u: t for u, t in want.items() if t is not None}
    stats = _stats(out)
    assert stats["conservation_errors"] == []
    counters = stats["counters"][sub.STAGE]
    assert counters["bytes_struck"] == struck
    assert counters["empty"] == sum(t is None for t in want.values())
    assert stats["config"]["dedup_substrings"] == {"bytes": N, "keep": keep}


def test_two_workers_give_the_same_bytes(first, tmp_path: Path) -> None:
    job = CleanJob(
        (DERIVED_WET,),
        str(tmp_path),
        quiet=True,
        engine="local",
        workers=2,
        dedup_substrings=N,
        substrings_keep="first",
    )
    assert run_clean(job, local.LocalEngine(job)) == 0
    assert _files(tmp_path) == _files(first)


def test_option_off_is_the_run_without_the_stage(plain) -> None:
    stats = _stats(plain)
    assert sub.STAGE not in stats["counters"] and "dedup_substrings" not in stats["config"]


def test_composes_with_line_dedup(tmp_path: Path) -> None:
    lines = _run(tmp_path / "lines", dedup="lines")
    out = _run(tmp_path / "both", dedup="lines", dedup_substrings=N)
    want, _ = oracle(sorted(docs_by_url(lines).items()), N, "none")
    assert docs_by_url(out) == {u: t for u, t in want.items() if t is not None}


def test_spark_gives_the_same_bytes(first, tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from c4forge.engines.spark import SparkEngine
    from c4forge.engines.spark_launch import make_context

    sc = make_context("local[2]", None, [])
    try:
        job = CleanJob(
            (DERIVED_WET,),
            str(tmp_path),
            quiet=True,
            engine="spark",
            dedup_substrings=N,
            substrings_keep="first",
        )
        assert run_clean(job, SparkEngine(spark_context=sc)) == 0
    finally:
        sc.stop()
    assert _files(tmp_path) == _files(first)


@pytest.mark.parametrize("workers", [1, 2])
def test_beam_gives_the_same_bytes(first, tmp_path: Path, workers: int) -> None:
    """One in-process DirectRunner worker, and two worker processes."""
    from c4forge.engines.beam import BeamEngine

    job = CleanJob(
        (DERIVED_WET,),
        str(tmp_path),
        quiet=True,
        engine="beam",
        workers=workers,
        dedup_substrings=N,
        substrings_keep="first",
    )
    assert run_clean(job, BeamEngine(job if workers > 1 else None)) == 0
    assert _files(tmp_path) == _files(first)


def test_killed_inside_the_stage_resumes_to_the_same_bytes(tmp_path: Path) -> None:
    """SIGKILL once a chunk has fed the winnowing pass (its ``docs1`` scratch file: the
    substring shuffles still to come), then ``--resume``: the bytes of an uninterrupted run."""
    import os
    import signal
    import subprocess
    import sys
    import time

    root = Path(__file__).parent.parent
    inputs = [DERIVED_WET, *sorted(str(p) for p in (root / "tests/data/wet").glob("*.wet*"))]
    env = dict(os.environ, C4FORGE_CHUNK_FILES="1")
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])

    def cmd(out: Path, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "c4forge",
            "clean",
            *inputs,
            "-o",
            str(out),
            "--engine",
            "local",
            "--workers",
            "2",
            "--dedup-substrings",
            str(N),
            "--quiet",
            *extra,
        ]

    out = tmp_path / "resumed"
    proc = subprocess.Popen(cmd(out), env=env, start_new_session=True)
    work = out / "_work"
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline:
        if work.exists() and any(work.glob("chunk-*.docs1.gz")):
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert any(work.glob("chunk-*.docs1.gz")), "the run never reached the stage"
    assert not (out / "stats.json").exists(), "the run finished before it could be killed"
    resumed = subprocess.run(cmd(out, "--resume"), env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    fresh = subprocess.run(cmd(tmp_path / "fresh"), env=env, capture_output=True, text=True)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert _files(out) == _files(tmp_path / "fresh")
    assert _stats(out)["counters"][sub.STAGE]["trimmed"] > 0


# --- over an existing corpus folder (--input-format c4) ----------------------------------------


def test_a_clean_output_folder_gives_the_in_pipeline_documents(
    plain, first, tmp_path: Path
) -> None:
    """A c4forge output read back (its shards; stats.json and the rest ignored) with the stage
    on: the documents the one-pass run wrote; with it off: the same documents again."""
    (plain / "notes.txt").write_text("not a shard")
    again = CleanJob(
        (str(plain),),
        str(tmp_path / "again"),
        quiet=True,
        input_format="c4",
        engine="local",
        workers=2,
        dedup_substrings=N,
        substrings_keep="first",
    )
    assert run_clean(again, local.LocalEngine(again)) == 0
    assert docs_by_url(tmp_path / "again") == docs_by_url(first)
    same = again.replace(output=str(tmp_path / "same"), dedup_substrings=0)
    assert run_clean(same, local.LocalEngine(same)) == 0
    assert docs_by_url(tmp_path / "same") == docs_by_url(plain)
    stats = _stats(tmp_path / "again")
    assert stats["conservation_errors"] == [] and stats["config"]["input_format"] == "c4"
    assert "clean" not in stats["counters"] and "langid" not in stats["counters"]


def test_the_released_c4_sample_equals_the_oracle(tmp_path: Path) -> None:
    """1,000 real C4 validation documents (AllenAI's release as copied in OLMo's fixtures, a
    ``date`` field for the timestamp): struck as the oracle says, and still validation (the
    release's split is §11's URL hash)."""
    from clean_fixtures import C4_SAMPLE, c4_docs

    job = CleanJob(
        (C4_SAMPLE,),
        str(tmp_path),
        quiet=True,
        input_format="c4",
        engine="local",
        workers=1,
        dedup_substrings=100,
    )
    assert run_clean(job, local.LocalEngine(job)) == 0
    pages = sorted((d["url"], d["text"]) for d in c4_docs(0, 1000))
    want, struck = oracle(pages, 100, "none")
    assert struck > 0
    assert docs_by_url(tmp_path) == {u: t for u, t in want.items() if t is not None}
    assert _stats(tmp_path)["outputs"]["validation"]["documents"] == len(docs_by_url(tmp_path))


def test_c4_input_refuses_crawl_variants() -> None:
    from c4forge.errors import ConfigError

    with pytest.raises(ConfigError, match="clean corpus"):
        CleanJob(("in",), "out", input_format="c4", variant="realnewslike")
    assert CleanJob(("in",), "out", input_format="c4").dedup == "none"


def test_the_datasheet_knows_the_stage(first, tmp_path: Path) -> None:
    from c4forge.cli import main

    assert main(["report", str(first), "-o", str(tmp_path), "--quiet"]) == 0
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["config"]["dedup_substrings"] == {"bytes": N, "keep": "first"}
    row = next(r for r in report["funnel"] if r["stage"] == sub.STAGE)
    counters = _stats(first)["counters"][sub.STAGE]
    assert row["dropped"] == counters["empty"]
    assert row["pages_out"] == counters["passed"] + counters["trimmed"] == len(docs_by_url(first))
    assert "exact substrings 60 bytes (keep first)" in (tmp_path / "index.html").read_text()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--dedup-substrings", "-5"], "--dedup-substrings must be an integer >= 0"),
        (["--dedup-substrings", "100", "--substrings-keep", "all"], "--substrings-keep"),
        (["--input-format", "c4", "--variant", "realnewslike"], "--input-format c4"),
    ],
)
def test_bad_options_are_one_line_errors(tmp_path: Path, capsys, option, message) -> None:
    from c4forge import cli

    try:  # argparse's own choices end in SystemExit(2), c4forge's checks in a return of 2
        code = cli.main(["clean", DERIVED_WET, "-o", str(tmp_path / "out"), *option])
    except SystemExit as stop:
        code = stop.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "Traceback" not in err
