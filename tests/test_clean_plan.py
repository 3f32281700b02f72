"""The clean plan as data: which stages a job gets, in which order, and that a
variant is a different plan run unchanged by an engine (here the in-process local engine)."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from clean_fixtures import DERIVED_WET, documents_of, reference_clean

from c4forge.clean import summary
from c4forge.clean.config import CleanJob
from c4forge.clean.plan import all_accounts, build_plan, recorded_plan
from c4forge.clean.variants import VARIANTS
from c4forge.corpus.counting import Flow, conservation_errors, full_counters
from c4forge.corpus.stages import MapStage
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
        docs = documents_of(engine, plan, job.replace(output=str(tmp_path)), files)
        return {d.url for _, d in docs}, engine.counters()

    base_urls, base_counts = run(base)
    urls, counts = run(variant)
    # nothing in the accounting knows the new stage: it carries no flow, so it is no funnel row
    assert "domain" not in variant.funnel
    assert base_urls == {d["url"] for d in reference_clean([f.path for f in files], "lines")[1]}
    assert urls == {u for u in base_urls if host not in u} and urls != base_urls
    assert counts["domain"]["dropped"] + counts["domain"]["passed"] == counts["wet"]["pages"]
    length = counts["length"]
    assert length["passed"] + length.get("too_long_page", 0) == counts["domain"]["passed"]
    base_length = base_counts["length"]
    assert base_length["passed"] + base_length.get("too_long_page", 0) == counts["wet"]["pages"]


DOMAIN_FLOW = Flow(("dropped",), ("passed",), title="domain filter", detail="")


def _with_domain_stage(base, host: str):
    """``base`` with one more page stage that carries its own flow (nothing else touched)."""
    stage = MapStage("domain", functools.partial(_drop_host, host=host), flow=DOMAIN_FLOW)
    return dataclasses.replace(base, page_stages=(stage, *base.page_stages))


def test_a_new_stage_with_a_flow_is_accounted_for_by_the_plan(tmp_path) -> None:
    """A stage added to a plan with its own ``Flow`` shows up in the funnel,
    in stats.json's zero-filled reasons, in the conservation identities and in the summary,
    with no table elsewhere to update; and a stage that miscounts (a page it neither kept nor
    dropped) is reported by the conservation check."""
    job = _job(dedup="lines")
    files = resolve_inputs([DERIVED_WET], "wet")
    plan = _with_domain_stage(build_plan(job), "commoncrawl.org")
    assert plan.funnel[:3] == ("wet", "domain", "length")
    assert dict(plan.accounts)["domain"] is DOMAIN_FLOW

    engine = LocalEngine()
    list(documents_of(engine, plan, job.replace(output=str(tmp_path)), files))
    counters = full_counters(engine.counters(), plan.accounts)
    assert counters["domain"]["dropped"] > 0
    assert conservation_errors(counters, plan.accounts) == []
    rows = summary.funnel(counters, "wet", plan.accounts)
    row = next(r for r in rows if r.stage == "domain")
    assert row.title == "domain filter" and row.drops == {"dropped": counters["domain"]["dropped"]}
    assert rows[0].pages_out == row.pages_in and row.pages_out == rows[2].pages_in

    # the identities follow the stage: one page lost in it, or one too many, is reported
    lost = {
        **counters,
        "domain": {**counters["domain"], "passed": counters["domain"]["passed"] - 1},
    }
    assert conservation_errors(lost, plan.accounts) == [
        f"wet.pages: {counters['wet']['pages']} != domain total {counters['wet']['pages'] - 1}",
        f"domain.passed: {counters['domain']['passed'] - 1} != length total "
        f"{counters['length']['passed'] + counters['length']['too_long_page']}",
    ]
    # without the stage in the plan, its counters are not part of any identity
    base = build_plan(job).accounts
    assert conservation_errors(counters, base) == [
        f"wet.pages: {counters['wet']['pages']} != length total {counters['domain']['passed']}"
    ]


def test_a_stage_that_miscounts_fails_conservation() -> None:
    """A stage that keeps a page without counting it breaks the identity at its boundary."""
    plan = build_plan(_job(dedup="none"))
    counters = full_counters(
        {
            "wet": {"records": 5, "pages": 4, "no_content": 1},
            "length": {"passed": 4},
            "url_dedup": {"passed": 3, "duplicate_url": 1},
            "clean": {"passed": 3},
            "langid": {"passed": 2},  # one page received, never counted
            "badwords": {"passed": 2},
            "split": {"train": 2},
        },
        plan.accounts,
    )
    assert conservation_errors(counters, plan.accounts) == ["clean.passed: 3 != langid total 2"]


@pytest.mark.parametrize("name", list(VARIANTS))
def test_accounting_is_the_plans_own(name) -> None:
    """Every variant and dedup mode: a recorded plan (stats.json's config) has the accounts of
    the job's plan, every stage's flow is its stage's, and all_accounts covers them in order."""
    catalog = [s for s, _ in all_accounts()]
    variant = VARIANTS[name]
    for mode in variant.dedup_modes:
        options = {"variant": name, "dedup": mode, "near_dedup": "minhash"}
        if name == "en" and mode == "lines":
            options["decontaminate"] = ("glue",)
        if variant.webtext:
            options["url_list"] = str(DERIVED_WET)
        job = _job(**options)
        plan = build_plan(job)
        assert recorded_plan(job.record()).accounts == plan.accounts
        assert [s for s in catalog if s in plan.funnel] == list(plan.funnel)
        assert plan.funnel[0] == "wet" and plan.funnel[-1] == "split"
        assert ("clean" in plan.funnel) == variant.clean


def test_a_recorded_plan_reads_every_job_field_a_stage_may_read(monkeypatch) -> None:
    """A stage reading any ``CleanJob`` field, even one stats.json does not record, builds its
    recorded plan: the job read back is a ``CleanJob``, unrecorded fields at their defaults."""
    from c4forge.clean.plan import recorded_job
    from c4forge.rules import paragraphs

    job = _job(near_dedup="minhash", ngram=3, keep_samples=2)
    fields = [f.name for f in dataclasses.fields(CleanJob)]
    seen: dict[str, object] = {}
    real_stage = paragraphs.stage

    def reading_stage(j):  # a stage that reads every field of its job
        seen.update({name: getattr(j, name) for name in fields})
        return real_stage(j)

    monkeypatch.setattr(paragraphs, "stage", reading_stage)
    assert recorded_plan(job.record()).accounts == build_plan(job).accounts
    assert seen["ngram"] == 3 and seen["keep_samples"] == 2 and seen["near_dedup"] == "minhash"
    assert seen["decontaminate_ngram"] == 13 and seen["resume"] is False  # not recorded: default
    back = recorded_job(job.record())
    assert isinstance(back, CleanJob) and back.minhash_params() == job.minhash_params()
