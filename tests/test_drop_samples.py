"""``clean --keep-samples N``: the per-reason sample of dropped items is the N
smallest by md5, whatever the engine, the worker count, the bundle split or a resumed front.

Cross-engine byte identity (Beam 1/2 workers, Spark, local) is checked on the planted corpus in
``test_decontamination``; here: the merge itself, what the sample holds on real pages, and a
Spark run whose front was finished by an earlier run (its samples come back from the chunk
records, not from re-reading the inputs).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
from pathlib import Path

import pytest
from clean_fixtures import c4_docs, doc_records, wet_bytes

from c4forge.corpus import drop_samples as ds
from c4forge.corpus.counting import CounterBag


def _records(n: int) -> list[tuple[str, str, str]]:
    return [ds.record(f"line {i} of a page", f"https://example.org/{i % 7}") for i in range(n)]


def test_merge_is_the_smallest_n_whatever_the_split() -> None:
    recs = _records(200)
    want = tuple(sorted(recs)[:5])
    rng = random.Random(0)
    for _ in range(20):
        shuffled = recs[:]
        rng.shuffle(shuffled)
        cut = sorted(rng.sample(range(1, 200), 6))
        parts = [shuffled[a:b] for a, b in zip([0, *cut], [*cut, 200])]
        partial = [ds.merge([p], 5) for p in parts]  # per worker
        assert ds.merge(partial, 5) == want  # combined
        assert ds.merge([*partial, partial[0]], 5) == want  # a retried bundle: idempotent
    bag = CounterBag(5)
    for text, url in [(t, u) for _, t, u in recs]:
        bag.sample("clean", "too_short", text, url)
    assert tuple(bag.samples["clean/too_short"]) == want
    h, text, url = want[0]
    assert h == hashlib.md5(f"{text}\0{url}".encode()).hexdigest()


def test_default_bag_keeps_nothing() -> None:
    bag = CounterBag()
    bag.sample("clean", "too_short", "x", "u")
    ds.sample(lambda *a: None, "clean", "too_short", "x")  # a plain callback: ignored
    assert bag.samples == {}


def _corpus(tmp_path: Path) -> str:
    """Real C4 pages plus copies that the rules drop: a duplicate URL, a too-short page."""
    docs = c4_docs(0, 40)
    dup = dict(docs[0], date="2019-01-01T00:00:00Z")  # older copy: URL dedup drops it
    short = dict(docs[1], url="https://short.example.org/x", text="Too short to keep.")
    wet = tmp_path / "in.warc.wet.gz"
    wet.write_bytes(wet_bytes(doc_records([*docs, dup, short])))
    return str(wet)


def test_samples_hold_what_the_rules_dropped(tmp_path: Path) -> None:
    from c4forge.clean.config import CleanJob
    from c4forge.clean.driver import run_clean
    from c4forge.engines.local import LocalEngine

    out = tmp_path / "out"
    job = CleanJob((_corpus(tmp_path),), str(out), keep_samples=2, quiet=True)
    assert run_clean(job, LocalEngine()) == 0
    samples = ds.read_samples(str(out))
    stats = json.loads((out / "stats.json").read_text())
    assert stats["config"]["keep_samples"] == 2
    assert [r["url"] for r in samples["url_dedup/duplicate_url"]] == [c4_docs(0, 1)[0]["url"]]
    assert samples["clean/too_few_sentences"][0]["text"] == "Too short to keep."
    index = json.loads((out / "samples" / "index.json").read_text())
    for key, info in index["reasons"].items():
        stage, reason = key.split("/", 1)
        assert 1 <= info["kept"] <= 2
        counted = stats["counters"][stage].get(reason, 0)
        assert counted >= info["kept"], key  # never more samples than drops counted
    # a rerun without --keep-samples leaves no stale samples behind
    assert run_clean(job.replace(keep_samples=0, overwrite=True), LocalEngine()) == 0
    assert not (out / "samples").exists()


def test_spark_front_done_by_an_earlier_run(tmp_path: Path) -> None:
    pytest.importorskip("pyspark")
    from c4forge.clean import driver, passes
    from c4forge.clean.config import CleanJob
    from c4forge.clean.plan import build_plan
    from c4forge.engines.local import LocalEngine
    from c4forge.engines.spark import SparkEngine
    from c4forge.engines.spark_launch import make_context

    wet = _corpus(tmp_path)
    reference = tmp_path / "reference"
    job = CleanJob((wet,), str(reference), keep_samples=3, quiet=True)
    assert driver.run_clean(job, LocalEngine()) == 0

    sc = make_context("local[2]", None, [])
    try:
        out = tmp_path / "resumed"
        job = CleanJob((wet,), str(out), keep_samples=3, quiet=True, engine="spark")
        engine = SparkEngine(spark_context=sc)
        files = engine.list_inputs(list(job.inputs), job.input_format)
        driver.prepare_output(job)
        work, chunks = driver.start_work(engine, job, files, job.record())
        engine.keep_samples = 3
        front = functools.partial(passes.front, plan=build_plan(job), output=str(out))
        engine.source("wet", chunks, front).count()  # "the earlier run": its front only
        assert all(work.done(c) is not None for c in chunks)
        assert driver.run_clean(job.replace(resume=True), SparkEngine(spark_context=sc)) == 0
    finally:
        sc.stop()
    for name in ["stats.json", *(p.name for p in (reference / "samples").iterdir())]:
        sub = "" if name == "stats.json" else "samples/"
        assert (out / f"{sub}{name}").read_bytes() == (reference / f"{sub}{name}").read_bytes()
