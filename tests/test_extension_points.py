"""The two extension points of `c4forge clean` hold as docs/ARCHITECTURE.md says ("Where a new
piece goes"): a new engine is one class implementing the primitives of ``engines.base.Engine``
(no stage changes), and a new clean stage is one module-level function with its ``Flow``, placed
in the plan (stats.json's reasons, the conservation check and the funnel follow).

Both are built here, in the test, and run through a real clean of real crawl text (the bundled
WET made from real WARC HTML and the genuine Common Crawl WET excerpts of tests/data/wet).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import types
from collections.abc import Iterator
from typing import Any

from clean_fixtures import DERIVED_WET, GENUINE_WET_DIR, documents_of

from c4forge.clean.config import CleanJob
from c4forge.clean.driver import run_clean
from c4forge.clean.plan import build_plan
from c4forge.corpus.counting import Count, CounterBag, Flow, conservation_errors
from c4forge.corpus.documents import Doc
from c4forge.corpus.stages import MapStage
from c4forge.engines.base import Engine, Fn
from c4forge.engines.local import LocalEngine
from c4forge.io.inputs import InputFile

INPUTS = (DERIVED_WET, GENUINE_WET_DIR)


class ListEngine(Engine):
    """The smallest engine: every collection a Python list, every step run at once in this
    process. It knows no stage; only the primitives."""

    name = "lists"
    tag = "engine"
    description = "Python lists (a test engine)"

    def __init__(self, job: Any = None) -> None:
        self.bag = CounterBag()

    def _grouped(self, pairs: Any) -> dict[Any, list[Any]]:
        groups: dict[Any, list[Any]] = {}
        for k, v in pairs:
            groups.setdefault(k, []).append(v)
        return groups

    def source(self, label: str, items: list[Any], fn: Fn) -> list[Any]:
        return [out for item in items for out in fn(item, self.bag)]

    def flat_map(self, coll: Any, label: str, fn: Fn) -> list[Any]:
        return [out for item in coll for out in fn(item, self.bag)]

    def group(self, coll: Any, label: str, fn: Fn) -> list[Any]:
        groups = self._grouped(coll)
        return [out for k, vs in groups.items() for out in fn(k, vs, self.bag)]

    def combine(self, coll: Any, label: str, fn: Fn) -> list[Any]:
        return [(k, fn(vs)) for k, vs in self._grouped(coll).items()]

    def cogroup(self, label: str, left: Any, right: Any, fn: Fn) -> list[Any]:
        lefts, rights = self._grouped(left), self._grouped(right)
        keys = list(dict.fromkeys([*lefts, *rights]))
        return [o for k in keys for o in fn(k, lefts.get(k, []), rights.get(k, []), self.bag)]

    def distinct(self, coll: Any, label: str) -> list[Any]:
        return list(dict.fromkeys(coll))

    def loop(self, coll: Any, label: str, body: Fn, rounds: int) -> list[Any]:
        for r in range(rounds):
            nxt = body(self, coll, f"{label}{r}")
            if set(nxt) == set(coll):
                return nxt
            coll = nxt
        return coll

    def drain(self, coll: Any, label: str) -> None:
        return None  # computed eagerly: the counters are already in the bag

    def counters(self) -> dict[str, dict[str, int]]:
        return self.bag.counts


def test_a_new_engine_is_one_registration_line(monkeypatch):
    """Registered under a name (one line in ``ENGINE_CLASSES``, which also makes the
    ``--engine`` choices), the engine is what ``make_engine`` builds for a job naming it."""
    from c4forge.engines import choose

    monkeypatch.setitem(choose.ENGINE_CLASSES, "lists", f"{__name__}:ListEngine")
    job = types.SimpleNamespace(engine="lists")  # what make_engine reads of a request
    assert isinstance(choose.make_engine(job), ListEngine)
    local = choose.make_engine(types.SimpleNamespace(engine="local", workers=1))
    assert type(local) is LocalEngine


def _job(out: str, **options: Any) -> CleanJob:
    return CleanJob(INPUTS, out, quiet=True, engine="local", workers=1, **options)


def _tree(root: str) -> dict[str, bytes]:
    """Every output file's bytes, by relative path (stats.json without its timings)."""
    out = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = os.path.join(directory, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    stats = json.loads(out.pop("stats.json"))
    out["stats.json counters"] = json.dumps(stats["counters"], sort_keys=True).encode()
    out["stats.json outputs"] = json.dumps(stats["outputs"], sort_keys=True).encode()
    return out


def test_a_new_engine_runs_a_real_clean_to_the_local_engines_bytes(tmp_path):
    """An engine written against the primitives alone runs the whole clean plan (URL dedup,
    span dedup, langid, bad words, split, the shard writer) to the same shards and counters
    as the local engine: no stage and no clean module had to learn about it."""
    ref, mine = str(tmp_path / "local"), str(tmp_path / "lists")
    assert run_clean(_job(ref)) == 0
    engine = ListEngine()
    assert run_clean(_job(mine), engine=engine) == 0
    got, want = _tree(mine), _tree(ref)
    assert sorted(got) == sorted(want)
    assert [p for p in want if got[p] != want[p]] == []
    assert any(p.endswith(".json.gz") for p in got)
    assert engine.counters()["wet"]["pages"] > 0


# --- a new clean stage: one function, its Flow, its place in the plan --------------------------

SHORT_STAGE = "short_docs"
SHORT_FLOW = Flow(("too_few_words",), ("passed",), title="at least 50 words")


def drop_short(doc: Doc, count: Count, *, words: int = 50) -> Iterator[Doc]:
    """A toy per-document rule: drop documents of fewer than ``words`` words."""
    if len(doc.text.split()) < words:
        count(SHORT_STAGE, "too_few_words")
        return
    count(SHORT_STAGE, "passed")
    yield doc


def test_a_new_clean_stage_is_counted_conserved_and_funnelled(tmp_path):
    """A stage added to the plan in this test (where ``build_plan`` would list it) runs on a
    real clean's documents; its counters balance against the stage before it, and it shows up
    in the plan's accounts and funnel, which stats.json and the summary are read from."""
    job = _job(str(tmp_path / "out"))
    plan = build_plan(job)
    stage = MapStage(SHORT_STAGE, functools.partial(drop_short, words=50), flow=SHORT_FLOW)
    *before, last = plan.doc_stages
    plan = dataclasses.replace(plan, doc_stages=(*before, stage, last))  # just before split
    assert SHORT_STAGE in plan.funnel and plan.funnel[-1] == "split"

    engine = LocalEngine(workers=1)
    files = sorted(
        [InputFile(DERIVED_WET, 0)]
        + [
            InputFile(os.path.join(GENUINE_WET_DIR, f), 0)
            for f in os.listdir(GENUINE_WET_DIR)
            if ".wet" in f
        ]
    )
    docs = documents_of(engine, plan, job, files)
    counters = engine.counters()
    dropped = counters[SHORT_STAGE].get("too_few_words", 0)
    passed = counters[SHORT_STAGE]["passed"]
    assert dropped > 0 and passed == len(docs) > 0  # it ran, and decided both ways
    assert all(len(d.text.split()) >= 50 for _, d in docs)
    assert conservation_errors(counters, plan.accounts) == []
    broken = {**counters, SHORT_STAGE: {"passed": passed}}  # a drop no longer counted
    assert conservation_errors(broken, plan.accounts) != []
