"""The clean plan as data (issue 12): which stages a job gets, in which order, and that a
variant is a different plan run unchanged by an engine (here the in-process local engine)."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from clean_fixtures import DERIVED_WET, reference_clean

from c4forge.clean.config import CleanJob
from c4forge.clean.plan import MapStage, build_plan
from c4forge.engines.local import LocalEngine
from c4forge.errors import ConfigError
from c4forge.io.inputs import resolve_inputs


def _job(**kw) -> CleanJob:
    return CleanJob((DERIVED_WET,), "unused", input_format="wet", **kw)


@pytest.mark.parametrize(
    ("options", "stages", "funnel"),
    [
        (
            {},
            ["length", "url_dedup", "clean", "dedup", "langid", "badwords", "split"],
            ["wet", "length", "url_dedup", "clean", "dedup", "langid", "badwords", "split"],
        ),
        (
            {"dedup": "none", "near_dedup": "minhash"},
            ["length", "url_dedup", "clean", "near_dedup", "langid", "badwords", "split"],
            ["wet", "length", "url_dedup", "clean", "near_dedup", "langid", "badwords", "split"],
        ),
    ],
)
def test_stages_and_funnel_follow_the_job(options, stages, funnel) -> None:
    plan = build_plan(_job(**options))
    assert [s.name for s in plan.stages] == stages
    assert list(plan.funnel) == funnel
    described = plan.describe()
    assert described[0]["stage"] == "wet"
    assert {d["stage"]: d["shuffle_key"] for d in described}["url_dedup"] == "normalized URL"


def test_job_is_validated_and_frozen() -> None:
    with pytest.raises(ConfigError, match="--dedup"):
        _job(dedup="sentences")
    with pytest.raises(ConfigError, match="--train-shards"):
        _job(train_shards="zero")
    job = _job(train_shards="3")
    assert job.shard_options == {"train": 3, "validation": "auto"}
    assert job.record()["shards"] == {"train": "3", "validation": "auto"}  # verbatim
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.dedup = "lines"  # type: ignore[misc]
    assert CleanJob(("x",), "file:///tmp/out").output == "/tmp/out"


def _drop_host(page, count, *, host: str):
    """A page stage a variant might add (a domain filter): counted, like every rule."""
    if host in page.url:
        count("domain", "dropped")
        return
    count("domain", "passed")
    yield page


def test_a_variant_is_a_different_plan(tmp_path) -> None:
    """One more page stage, run by the same engine without touching it: the kept documents
    are the base plan's minus that domain's, and the new stage's counters add up."""
    job = _job(dedup="lines")
    files = resolve_inputs([DERIVED_WET], "wet")
    base = build_plan(job)
    host = "commoncrawl.org"
    variant = dataclasses.replace(
        base,
        page_stages=(
            MapStage("domain", functools.partial(_drop_host, host=host)),
            *base.page_stages,
        ),
    )

    def run(plan):
        engine = LocalEngine()
        docs = engine.documents(plan, job.replace(output=str(tmp_path)), files)
        return {d.url for _, d in docs}, engine.counters()

    base_urls, base_counts = run(base)
    urls, counts = run(variant)
    assert base_urls == {d["url"] for d in reference_clean([f.path for f in files], "lines")[1]}
    assert urls == {u for u in base_urls if host not in u} and urls != base_urls
    assert counts["domain"]["dropped"] + counts["domain"]["passed"] == counts["wet"]["pages"]
    length = counts["length"]
    assert length["passed"] + length.get("too_long_page", 0) == counts["domain"]["passed"]
    base_length = base_counts["length"]
    assert base_length["passed"] + base_length.get("too_long_page", 0) == counts["wet"]["pages"]
