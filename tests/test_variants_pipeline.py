"""`c4forge clean --variant …` end to end on the bundled real samples: every variant
byte-identical on Beam and on the Spark engine, the funnel's conservation identities, the exact
RealNews survivors among the 1,000 real C4 documents, the URL-list join, mC4's per-language
shard sets, and the one-line errors for bad input. One Spark JVM for the module."""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from test_variants_rules import REALNEWS_SURVIVORS  # noqa: E402

from c4forge import cli  # noqa: E402
from c4forge.clean import cli as clean_cli  # noqa: E402
from c4forge.clean.driver import run_clean  # noqa: E402
from c4forge.clean.plan import recorded_plan  # noqa: E402
from c4forge.corpus.counting import conservation_errors  # noqa: E402
from c4forge.corpus.urls import normalize_url  # noqa: E402
from c4forge.engines.local import LocalEngine  # noqa: E402
from c4forge.engines.spark import SparkEngine  # noqa: E402
from c4forge.engines.spark_launch import make_context  # noqa: E402
from c4forge.samples import (  # noqa: E402
    c4_sample_as_wet,
    dolma_sample_as_wet,
    iter_c4_sample,
    sample_path,
)

DERIVED = sample_path("real-warc-html-to-wet.resiliparse.warc.wet.gz")
VARIANTS = ("en", "en.noclean", "en.noblocklist", "realnewslike", "webtextlike", "multilingual")


@pytest.fixture(scope="module")
def sc():
    context = make_context("local[2]", None, [])
    yield context
    context.stop()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> dict[str, Path]:
    """The real samples as WET files, and a URL list written the way OpenWebText writes it."""
    d = tmp_path_factory.mktemp("variant-inputs")
    c4 = Path(c4_sample_as_wet(str(d)))
    dolma = Path(dolma_sample_as_wet(str(d)))
    urls = [doc["url"] for doc in iter_c4_sample()]
    listed = ["http://www." + normalize_url(u) + "/" for u in urls[::4]]  # other spelling
    listed += listed[:5]  # repeated entries
    listed += [f"http://unlisted.example.org/{i}" for i in range(7)]  # no page
    lst = d / "owt-urls.txt.gz"
    with gzip.open(lst, "wt", encoding="utf-8") as f:
        f.write("\n".join(listed) + "\n\n")
    return {"c4": c4, "dolma": dolma, "urls": lst}


def job_args(variant: str, inputs: dict[str, Path], out: Path, *more: str) -> list[str]:
    files = [str(inputs["dolma"])] if variant == "multilingual" else [DERIVED, str(inputs["c4"])]
    argv = [*files, "-o", str(out), "--variant", variant, "--quiet", *more]
    if variant == "webtextlike":
        argv += ["--url-list", str(inputs["urls"])]
    return argv


def parse(argv: list[str]):
    parser = argparse.ArgumentParser()
    clean_cli.register(parser.add_subparsers())
    return clean_cli.job_from_args(parser.parse_args(["clean", *argv]), [])


def stats_of(out: Path) -> dict:
    return json.loads((out / "stats.json").read_text())


def docs_of(out: Path) -> dict[str, dict]:
    docs = {}
    for f in sorted(out.glob("c4-*.json.gz")):
        with gzip.open(f, "rt", encoding="utf-8") as fh:
            for line in fh:
                d = json.loads(line)
                docs[d["url"]] = d
    return docs


_RUNS: dict[str, Path] = {}


def beam_run(variant: str, inputs: dict[str, Path], root: Path) -> Path:
    """One Beam run per variant for the whole module (the other tests read it)."""
    if variant not in _RUNS:
        out = root / f"beam-{variant}"
        assert run_clean(parse(job_args(variant, inputs, out, "--workers", "1"))) == 0
        _RUNS[variant] = out
    return _RUNS[variant]


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("variant-runs")


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_beam_and_spark_are_byte_identical(variant, sc, inputs, runs_root) -> None:
    beam_out = beam_run(variant, inputs, runs_root)
    spark_out = runs_root / f"spark-{variant}"
    job = parse(job_args(variant, inputs, spark_out, "--engine", "spark"))
    assert run_clean(job, SparkEngine(spark_context=sc)) == 0
    beam, spark = stats_of(beam_out), stats_of(spark_out)
    assert beam["conservation_errors"] == [] and spark["conservation_errors"] == []
    assert (spark_out / "stats.json").read_bytes() == (beam_out / "stats.json").read_bytes()
    files = sorted(p.name for p in beam_out.glob("c4-*"))
    assert files == sorted(p.name for p in spark_out.glob("c4-*")) and files
    for name in files:
        assert (spark_out / name).read_bytes() == (beam_out / name).read_bytes()
    assert beam["config"]["variant"]["name"] == variant
    # the identities hold along the plan recorded in stats.json's config
    accounts = recorded_plan(beam["config"]).accounts
    assert set(beam["counters"]) == {s for s, _ in accounts}  # the plan's stages, no other
    assert conservation_errors(beam["counters"], accounts) == []
    assert beam["totals"]["documents_out"] > 0


@pytest.mark.slow
def test_realnewslike_survivors_and_counters(inputs, runs_root) -> None:
    out = beam_run("realnewslike", inputs, runs_root)
    en = docs_of(beam_run("en", inputs, runs_root))
    docs = docs_of(out)
    c = stats_of(out)["counters"]
    # every C4 document from a RealNews domain survives cleaning; no derived page is news
    assert set(docs) == REALNEWS_SURVIVORS
    assert all(docs[u]["text"] == en[u]["text"] for u in docs)
    # the 36 + 12 C4 pages of test_variants_rules, and one derived page (a wordpress.com
    # blog) from a domain whose list does not name its subdomain
    assert c["realnews"] == {
        "passed": 36,
        "bad_subdomain": 13,
        "bad_domain": c["length"]["passed"] - 49,
    }
    assert stats_of(out)["config"]["resources"]["realnews_domains"]["domains"] == 5036


@pytest.mark.slow
def test_webtextlike_keeps_exactly_the_listed_pages(inputs, runs_root) -> None:
    out = beam_run("webtextlike", inputs, runs_root)
    en = docs_of(beam_run("en", inputs, runs_root))
    stats = stats_of(out)
    listed = {normalize_url(d["url"]) for d in iter_c4_sample()[::4]}
    docs = docs_of(out)
    assert {normalize_url(u) for u in docs} == listed  # C4 pages all survive cleaning
    assert all(docs[u]["text"] == en[u]["text"] for u in docs)
    w = stats["counters"]["webtext"]
    assert w["passed"] == len(listed) == 250
    assert w["list_urls"] == 250 + 5 + 7 and w["blank_lines"] == 1
    assert w["missing_page"] == 7 and w["not_in_list"] == stats["counters"]["clean"]["passed"] - 250
    fp = stats["config"]["resources"]["url_list"]
    assert fp["urls"] == 262 and len(fp["sha256"]) == 64


@pytest.mark.slow
def test_noclean_and_noblocklist(inputs, runs_root) -> None:
    noclean = stats_of(beam_run("en.noclean", inputs, runs_root))
    assert noclean["config"]["dedup"] == "none"
    assert {"clean", "dedup", "badwords"}.isdisjoint(noclean["counters"])
    assert noclean["counters"]["langid"]["passed"] == noclean["totals"]["documents_out"]
    # unfiltered: the derived pages' navigation lines are still there
    en_docs = docs_of(beam_run("en", inputs, runs_root))
    raw_docs = docs_of(beam_run("en.noclean", inputs, runs_root))
    assert len(raw_docs) > len(en_docs)
    noblock = beam_run("en.noblocklist", inputs, runs_root)
    nb = stats_of(noblock)
    assert "badwords" not in nb["counters"] and "badwords" not in nb["config"]["resources"]
    assert nb["config"]["dedup"] == "spans"
    en_stats = stats_of(beam_run("en", inputs, runs_root))
    assert nb["totals"]["documents_out"] == en_stats["counters"]["langid"]["passed"]
    assert set(en_docs) <= set(docs_of(noblock))


@pytest.mark.slow
def test_multilingual_layout_and_per_language_counts(inputs, runs_root) -> None:
    out = beam_run("multilingual", inputs, runs_root)
    stats = stats_of(out)
    langs = stats["languages"]
    assert "und" in langs and "en" in langs and len(langs) >= 20
    names = {p.name for p in out.glob("c4-*")}
    for lang in langs:  # both sets of every language, as the mC4 release
        assert f"c4-{lang}.00000-of-00001.json.gz" in names
        assert f"c4-{lang}-validation.00000-of-00001.json.gz" in names
    assert len(names) == 2 * len(langs) and not any(n.startswith("c4-train") for n in names)
    c = stats["counters"]
    assert sum(v["documents"] for v in langs.values()) == stats["totals"]["documents_out"]
    assert sum(v["identified"] for v in langs.values()) == c["langid"]["passed"]
    assert (
        c["paragraph"]["passed"] + c["paragraph"]["too_few_paragraphs"] == c["url_dedup"]["passed"]
    )
    assert c["dedup"]["too_few_sentences"] == 0  # no sentence minimum without the line rules
    assert stats["config"]["dedup"] == "lines" and stats["config"]["badwords_fraction"] == 0.999
    assert stats["config"]["resources"]["cld3"]["version"]
    assert set(stats["config"]["resources"]["badwords"]) >= {"de", "ja", "zh", "en"}
    # a document sits in the shard set of the language CLD3 gives its text
    from c4forge.corpus.counting import CounterBag
    from c4forge.langid.cld3_filter import MC4_LANGUAGES, cld3_language

    with gzip.open(out / "c4-es.00000-of-00001.json.gz", "rt", encoding="utf-8") as f:
        for line in f:
            text = json.loads(line)["text"]
            assert cld3_language(text, CounterBag(), frozenset(MC4_LANGUAGES)) == "es"


@pytest.mark.slow
def test_languages_option_restricts_the_sets(inputs, tmp_path) -> None:
    out = tmp_path / "mc4-de-fr"
    job = parse(job_args("multilingual", inputs, out, "--languages", "de,fr"))
    assert run_clean(job, LocalEngine()) == 0
    stats = stats_of(out)
    assert set(stats["languages"]) <= {"de", "fr", "und"} and "de" in stats["languages"]
    assert stats["counters"]["langid"]["ignored_language"] > 0
    assert stats["config"]["languages"] == ["de", "fr"]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--variant", "c4.en"], "unknown --variant 'c4.en'"),
        (["--variant", "webtextlike"], "needs --url-list"),
        (["--variant", "webtextlike", "--url-list", "/nonexistent/urls.txt"], "does not exist"),
        (["--variant", "webtextlike", "--url-list", "{empty}"], "holds no URL"),
        (["--variant", "realnewslike", "--domain-list", "{damaged}"], "is damaged"),
        (["--variant", "multilingual", "--languages", "de,xx"], "CLD3 does not know xx"),
        (["--variant", "multilingual", "--dedup", "spans"], "cannot use --dedup spans"),
        (
            ["--variant", "en", "--url-list", "x.txt"],
            "--url-list is an option of --variant webtextlike",
        ),
        (["--variant", "en.noblocklist", "--badwords-fraction", "0.5"], "has no bad-words filter"),
    ],
)
def test_bad_input_is_a_one_line_error_before_any_work(argv, message, tmp_path, capsys) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    damaged = tmp_path / "domains.json"
    damaged.write_text('{"nytimes.com": tru')
    argv = [a.format(empty=empty, damaged=damaged) for a in argv]
    out = tmp_path / "out"
    assert cli.main(["clean", str(DERIVED), "-o", str(out), "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not out.exists()  # nothing was started
