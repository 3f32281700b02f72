"""`clean --engine spark` on local[2]: byte-identical to the Beam job, WARC input, near-dedup,
Hadoop paths, bad masters. One Spark JVM for the module."""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

import pytest

pyspark = pytest.importorskip("pyspark")

from c4forge.clean import cli as clean_cli  # noqa: E402
from c4forge.clean.config import CleanJob  # noqa: E402
from c4forge.clean.driver import run_clean  # noqa: E402
from c4forge.corpus.documents import Doc  # noqa: E402
from c4forge.dedup.minhash import (  # noqa: E402
    MAX_ROUNDS,
    NearDedupStage,  # noqa: E402
    make_params,
)
from c4forge.engines.local import LocalEngine  # noqa: E402
from c4forge.engines.passthrough import spark_conf_pairs  # noqa: E402
from c4forge.engines.spark import SparkEngine, hadoop_list, resolve_all  # noqa: E402
from c4forge.engines.spark_launch import check_master, make_context  # noqa: E402
from c4forge.errors import ConfigError, InputError  # noqa: E402

ROOT = Path(__file__).parent.parent
SAMPLE = ROOT / "c4forge/data/sample/real-warc-html-to-wet.resiliparse.warc.wet.gz"
WET_DIR = ROOT / "tests/data/wet"
WARC_DIR = ROOT / "tests/data/warc"
C4_SAMPLE = ROOT / "c4forge/data/sample/c4-sample.00000-of-00001.json.gz"


def parse(argv: list[str]) -> CleanJob:
    """The typed job the CLI builds from ``argv`` (validated)."""
    parser = argparse.ArgumentParser()
    clean_cli.register(parser.add_subparsers())
    return clean_cli.job_from_args(parser.parse_args(["clean", *argv]), [])


@pytest.fixture(scope="module")
def sc():
    context = make_context("local[2]", None, [])
    yield context
    context.stop()


def _stats(out: Path) -> dict:
    return json.loads((out / "stats.json").read_text())


def test_spark_output_is_byte_identical_to_beam(sc, tmp_path: Path) -> None:
    inputs = [str(SAMPLE), str(WET_DIR)]
    beam_out, spark_out = tmp_path / "beam", tmp_path / "spark"
    assert run_clean(parse([*inputs, "-o", str(beam_out), "--workers", "1", "--quiet"])) == 0
    args = parse([*inputs, "-o", str(spark_out), "--engine", "spark", "--quiet"])
    assert run_clean(args, SparkEngine(spark_context=sc)) == 0

    beam, spark = _stats(beam_out), _stats(spark_out)
    assert spark["conservation_errors"] == []
    assert spark["counters"] == beam["counters"]
    assert spark["outputs"] == beam["outputs"]  # per shard: sha256 and content_sha256
    assert beam["outputs"]["train"]["documents"] > 20
    assert (spark_out / "stats.json").read_bytes() == (beam_out / "stats.json").read_bytes()
    for f in beam["outputs"]["train"]["files"] + beam["outputs"]["validation"]["files"]:
        assert (spark_out / f["file"]).read_bytes() == (beam_out / f["file"]).read_bytes()
    assert not (spark_out / "_work").exists()


def test_warc_input_near_dedup_and_hadoop_paths(sc, tmp_path: Path) -> None:
    """Real crawl WARCs given as a file:// URI glob (Hadoop FileSystem + sc.binaryFiles),
    auto-detected, plus a WET file as a plain path, near-dedup on: every counter adds up."""
    out = tmp_path / "out"
    warc_uri = WARC_DIR.resolve().as_uri() + "/*.warc.gz"
    wet_file = str(WET_DIR / "whirlwind.warc.wet.gz")
    argv = [wet_file, warc_uri, "-o", str(out), "--engine", "spark", "--quiet"]
    args = parse([*argv, "--near-dedup", "minhash"])
    assert run_clean(args, SparkEngine(spark_context=sc)) == 0
    stats = _stats(out)
    assert stats["conservation_errors"] == []
    wet = stats["counters"]["wet"]
    n_warc = len(list(WARC_DIR.glob("*.warc.gz")))
    assert wet["files"] == 1 + n_warc
    assert wet["non_response"] > 0 and wet["non_conversion"] == 1  # WARC and WET skips
    nd = stats["counters"]["near_dedup"]
    assert nd["removed"] + nd["passed"] == stats["counters"]["dedup"]["passed"]
    # whirlwind's page is both in the WET and (as HTML) in whirlwind.warc.gz: one URL group
    assert stats["counters"]["url_dedup"]["duplicate_url"] >= 1
    assert stats["outputs"]["train"]["documents"] > 5


def test_hadoop_listing_expands_globs_and_folders(sc) -> None:
    uri = WET_DIR.resolve().as_uri()
    files = hadoop_list(sc, [uri, uri + "/*.wet*"])  # the same two files twice: listed once
    names = [f.path.rsplit("/", 1)[-1] for f in files]
    assert names == sorted(p.name for p in WET_DIR.iterdir() if ".wet" in p.name)
    assert all(f.path.startswith("file:") and f.size > 0 for f in files)
    with pytest.raises(InputError, match="matches no file"):
        hadoop_list(sc, [uri + "/nothing-*.wet"])
    # A scheme this Spark has no connector for: a clear error naming the path, at once.
    with pytest.raises(InputError, match="cannot list 'nosuchfs://bucket/x.wet.gz'"):
        hadoop_list(sc, ["nosuchfs://bucket/x.wet.gz"])


def test_input_list_with_duplicates_lists_each_file_once(sc, tmp_path: Path) -> None:
    whirlwind = WET_DIR / "whirlwind.warc.wet.gz"
    listing = tmp_path / "paths.txt"
    listing.write_text(f"{whirlwind}\n{whirlwind}\n")
    files = resolve_all(
        sc, [str(WET_DIR), str(whirlwind), whirlwind.resolve().as_uri(), f"@{listing}"], "auto"
    )
    assert sorted(f.path.rsplit("/", 1)[-1] for f in files) == sorted(
        p.name for p in WET_DIR.iterdir() if ".wet" in p.name
    )


def test_warc_given_as_wet_is_a_clear_error(sc, tmp_path: Path) -> None:
    args = parse(
        [
            str(WARC_DIR / "whirlwind.warc.gz"),
            "-o",
            str(tmp_path / "o"),
            "--engine",
            "spark",
            "--input-format",
            "wet",
            "--quiet",
        ]
    )
    with pytest.raises(InputError, match="whirlwind.warc.gz.*crawl WARC"):
        run_clean(args, SparkEngine(spark_context=sc))


def test_near_dedup_on_spark_equals_local_engine(sc) -> None:
    """The plan's near-dedup stage through Spark's primitives decides what the local engine
    decides, with the same counters."""
    import gzip

    from clean_fixtures import corpus_stage, run_corpus_stage

    with gzip.open(C4_SAMPLE, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f][:60]
    rng = random.Random(5)
    pages = [(d["url"], d["text"]) for d in docs]
    for i, (_, text) in enumerate(pages[:15]):
        words = text.split(" ")
        words[rng.randrange(len(words))] = "CHANGED"
        pages.append((f"https://copy.example/{i}", " ".join(words)))
    stage = corpus_stage({"dedup": "none", "near_dedup": "minhash"}, "near_dedup")
    docs = [Doc(u, "t", u, t) for u, t in pages]
    spark = SparkEngine(spark_context=sc)
    kept, counts = run_corpus_stage(stage, docs, spark, lambda rdd: rdd.collect())
    local_kept, local_counts = run_corpus_stage(stage, docs)
    assert {u for u, d in kept.items() if d is None} == {
        u for u, d in local_kept.items() if d is None
    }
    assert counts == local_counts
    assert counts["near_dedup"]["removed"] >= 12


def test_masters() -> None:
    assert check_master(None) == "local[*]"
    assert check_master("local[2]") == "local[2]"
    for bad in ("local[two]", "mesos://x:5050", "spark://nohost", "http://x:7077"):
        with pytest.raises(ConfigError):
            check_master(bad)
    with pytest.raises(ConfigError, match="cannot reach the Spark master"):
        check_master("spark://127.0.0.1:1")  # refused at once
    with pytest.raises(ConfigError, match="cannot reach the Spark master"):
        check_master("spark://192.0.2.1:7077", timeout=0.5)  # TEST-NET-1: never answers


def test_unreachable_master_from_the_cli_exits_2(tmp_path: Path, capsys) -> None:
    from c4forge.cli import main

    code = main(
        [
            "clean",
            str(SAMPLE),
            "-o",
            str(tmp_path / "o"),
            "--engine",
            "spark",
            "--master",
            "spark://127.0.0.1:1",
        ]
    )
    assert code == 2
    assert "cannot reach the Spark master" in capsys.readouterr().err


def test_conf_pass_through() -> None:
    assert spark_conf_pairs(["--conf", "spark.executor.memory=4g", "--conf=spark.a.b=c"]) == [
        ("spark.executor.memory", "4g"),
        ("spark.a.b", "c"),
    ]
    with pytest.raises(ConfigError, match="unknown option for the Spark engine"):
        spark_conf_pairs(["--project", "p"])
    with pytest.raises(ConfigError, match="start with 'spark.'"):
        spark_conf_pairs(["--conf=a.b=c"])  # spark-submit would ignore it: an error here


def test_bad_near_dedup_parameters_fail_before_spark(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="threshold"):
        parse(
            [
                str(SAMPLE),
                "-o",
                str(tmp_path),
                "--engine",
                "spark",
                "--near-dedup",
                "minhash",
                "--threshold",
                "1.5",
            ]
        )


# --- where the engines once diverged: now one driver and one plan ---------------------------


def _engine(name: str, sc):
    return SparkEngine(spark_context=sc) if name == "spark" else None  # None: the job's Beam


@pytest.mark.parametrize("engine", ["beam", "spark"])
def test_output_rules_are_the_same_on_both_engines(engine, sc, tmp_path: Path) -> None:
    """A ``file://`` output is the local folder it names, a stale funnel.png of an older run
    is removed, and an output path that is a file is refused — on Beam and on Spark."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "funnel.png").write_bytes(b"a chart of an older run")
    job = parse([str(WET_DIR), "-o", out.as_uri(), "--engine", engine, "--workers", "1", "--quiet"])
    assert job.output == str(out)
    assert run_clean(job, _engine(engine, sc)) == 0
    assert (out / "stats.json").exists() and not (out / "funnel.png").exists()
    a_file = tmp_path / "a-file"
    a_file.write_text("not a folder")
    job = parse([str(WET_DIR), "-o", str(a_file), "--engine", engine, "--workers", "1", "--quiet"])
    with pytest.raises(ConfigError, match="exists and is not a folder"):
        run_clean(job, _engine(engine, sc))
    assert a_file.read_text() == "not a folder"


def _path_graph(n: int) -> list[tuple[str, str]]:
    """A chain of ``n`` near-duplicates with shuffled node names: the worst case for star
    rounds (about log n rounds to converge)."""
    rng = random.Random(7)
    nodes = [f"{rng.getrandbits(64):016x}" for _ in range(n)]
    return list(zip(nodes, nodes[1:]))


@pytest.mark.parametrize("rounds", [2, MAX_ROUNDS])
def test_near_dedup_loop_is_the_same_on_every_engine(sc, rounds: int) -> None:
    """The bounded loop of star rounds: every engine stops at the same fixed point within the
    same bound, and counts the same unconverged nodes when the bound is hit (Beam once ran
    a fixed 10 rounds and Spark looped up to 16)."""
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    from c4forge.engines.beam import BeamEngine

    edges = _path_graph(64)
    stage = NearDedupStage("near_dedup", make_params(), rounds)
    local = LocalEngine()
    expected = sorted(stage.components(local, edges))
    unconverged = local.counters().get("near_dedup", {}).get("unconverged", 0)
    assert (unconverged > 0) == (rounds == 2)  # 2 rounds cannot finish a 64-node chain
    if rounds == MAX_ROUNDS:
        assert {v for _, v in expected} == {min(n for e in edges for n in e)}  # one star

    spark = SparkEngine(spark_context=sc)
    assert sorted(stage.components(spark, sc.parallelize(edges, 4)).collect()) == expected
    assert spark.counters().get("near_dedup", {}) == local.counters().get("near_dedup", {})

    beam_engine = BeamEngine()
    stars = stage.components(beam_engine, beam_engine.pipeline | beam.Create(edges))
    assert_that(stars, equal_to(expected))
    beam_engine.execute()
    assert beam_engine.counters().get("near_dedup", {}) == local.counters().get("near_dedup", {})
