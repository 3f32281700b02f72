"""Inputs and an independent in-memory driver for the `c4forge clean` tests.

WET files are written with warcio's own ``WARCWriter`` from real text: pages of the bundled
real C4 sample (c4forge/data/sample, 1,000 C4 documents) under their real URLs. Only the
defects under test are constructed (a cut gzip, bytes that are not UTF-8, a 50 MB line).

``reference_clean`` runs the clean plan on the in-process local engine (lists instead of
shuffles); the tests compare the Beam and Spark engines' counters and documents with it, so a
page lost or duplicated by an engine's wiring (a join, a group, a shard) shows up.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
from collections.abc import Iterable

from warcio.warcwriter import WARCWriter

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C4_SAMPLE = os.path.join(REPO, "c4forge", "data", "sample", "c4-sample.00000-of-00001.json.gz")
DERIVED_WET = os.path.join(
    REPO, "c4forge", "data", "sample", "real-warc-html-to-wet.resiliparse.warc.wet.gz"
)
GENUINE_WET_DIR = os.path.join(REPO, "tests", "data", "wet")
VALIDATION_URL = "https://news.example.com/story-151"  # c4_rules.md §11: lands in validation


def md5(s: str) -> str:
    return hashlib.md5(s.encode("utf-8")).hexdigest()


def c4_docs(start: int, count: int) -> list[dict]:
    """Real C4 documents (text, url, date) from the bundled sample, in file order."""
    with gzip.open(C4_SAMPLE, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f]
    return docs[start : start + count]


def wet_members(records: Iterable[tuple[str, str, bytes]], *, compress: bool = True) -> list[bytes]:
    """A WET file as its records' bytes (warcinfo first, then one conversion record per
    (url, date, payload)); with ``compress`` each record is its own gzip member, as in CC."""
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=compress)
    members = []

    def flush() -> None:
        members.append(buf.getvalue())
        buf.seek(0)
        buf.truncate()

    writer.write_record(
        writer.create_warcinfo_record("test.warc.wet.gz", {"software": "c4forge tests"})
    )
    flush()
    for url, date, payload in records:
        rec = writer.create_warc_record(
            url,
            "conversion",
            payload=io.BytesIO(payload),
            length=len(payload),
            warc_content_type="text/plain",
            warc_headers_dict={"WARC-Date": date},
        )
        writer.write_record(rec)
        flush()
    return members


def wet_bytes(records: Iterable[tuple[str, str, bytes]], *, compress: bool = True) -> bytes:
    return b"".join(wet_members(records, compress=compress))


def doc_records(docs: Iterable[dict]) -> list[tuple[str, str, bytes]]:
    return [(d["url"], d["date"], d["text"].encode("utf-8")) for d in docs]


def write(path: str, data: bytes) -> str:
    with open(path, "wb") as f:
        f.write(data)
    return path


# --- dedup scenario with a known kept copy ------------------------------------------------------


# Three real C4 pages each get the same real paragraph (a line of >= 3 sentences taken from a
# fourth C4 page). The page whose URL has the smallest md5 keeps it; the others lose it.
def span_scenario(docs: list[dict], donor: dict) -> tuple[list[dict], str, str]:
    """Returns (pages, shared line, owner url)."""
    from c4forge.rules.sentences import split_sentences

    shared = next(
        line
        for line in donor["text"].split("\n")
        if len(split_sentences(line)) >= 3 and len(line.split()) >= 30
    )
    pages = [dict(d, text=d["text"] + "\n" + shared) for d in docs]
    owner = min((p["url"] for p in pages), key=lambda u: (md5(u), u))
    return pages, shared, owner


# --- independent driver -------------------------------------------------------------------------


def documents_of(engine, plan, job, files) -> list:
    """The plan's ``(output key, OutDoc)`` pairs without writing shards, on an engine that
    computes eagerly (the local one): the chunk files go to ``job.output/_work`` and are
    removed afterwards."""
    from c4forge.clean import passes, resume_state

    chunks = resume_state.plan_chunks(files, resume_state.chunk_files_setting())
    work = resume_state.WorkDir(job.output)
    work.start({"engine": engine.name}, resume=False)
    try:
        return list(passes.documents(engine, plan, job, chunks))
    finally:
        work.finish()
        engine.counters().pop(
            resume_state.RESUME_NAMESPACE, None
        )  # the driver's business, not a stage


def reference_clean(paths: list[str], dedup: str = "spans") -> tuple[dict, list[dict]]:
    """(counters, documents) of the clean plan run by the in-process local engine (Python
    lists, no shuffles): the tests compare the Beam and Spark engines' counters and documents
    with it, so a page lost or duplicated by an engine's wiring (a join, a group, a shard)
    shows up."""
    import tempfile

    from c4forge.clean.config import CleanJob
    from c4forge.clean.plan import build_plan
    from c4forge.engines.local import LocalEngine
    from c4forge.io.inputs import InputFile

    with tempfile.TemporaryDirectory(prefix="c4forge-ref-") as work:
        job = CleanJob(tuple(paths), work, dedup=dedup, input_format="wet")
        plan, engine = build_plan(job), LocalEngine()
        docs = documents_of(engine, plan, job, [InputFile(p, 0) for p in sorted(paths)])
    out = [{"split": s, "text": d.text, "timestamp": d.timestamp, "url": d.url} for s, d in docs]
    return engine.bag.as_dict(plan.accounts if dedup != "none" else None), out


def corpus_stage(job_options: dict, name: str, **replace) -> object:
    """The plan's corpus-wide stage ``name`` (``dedup``, ``near_dedup``) for a job with
    ``job_options``; ``replace``: keyword arguments of its ``apply`` to override (a minimum)."""
    import dataclasses
    import functools

    from c4forge.clean.config import CleanJob
    from c4forge.clean.plan import build_plan

    plan = build_plan(CleanJob(("unused",), "unused", **job_options))
    stage = next(s for s in plan.doc_stages if s.name == name)
    if replace:
        apply = functools.partial(stage.apply.func, **{**stage.apply.keywords, **replace})
        stage = dataclasses.replace(stage, apply=apply)
    return stage


def run_corpus_stage(stage, docs: list, engine=None, collect=list) -> tuple[dict, dict]:
    """One corpus-wide plan stage through an engine's primitives, as the chunk passes run it:
    every document (``Doc``, at location ``(0, i)``) emits its keys, the engine decides, each
    document gets its decisions applied. Returns ``({url: Doc or None}, counters)``.
    ``collect(coll) -> list`` reads an engine collection (Spark: ``rdd.collect``); the
    emitted keys go in as ``engine.source`` over the documents."""
    import functools

    from c4forge.corpus.counting import CounterBag
    from c4forge.engines.local import LocalEngine

    engine = engine or LocalEngine()
    located = [((0, i), d) for i, d in enumerate(docs)]
    from c4forge.clean.passes import emit_located

    emit = functools.partial(emit_located, stage=stage)  # importable on every engine's workers
    emitted = engine.source(f"{stage.name}/docs", located, emit)
    by_loc: dict = {}
    for loc, decision in collect(stage.decide(engine, emitted)):
        by_loc.setdefault(tuple(loc), []).append(decision)
    counts = CounterBag()
    out = {}
    for loc, doc in located:
        kept = list(stage.apply(loc, doc, by_loc.get(loc, []), counts))
        out[doc.url] = kept[0] if kept else None
    counts.merge(engine.counters())
    return out, counts.counts


def read_shard(path: str) -> list[dict]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def subprocess_env(**extra: str) -> dict[str, str]:
    """The environment of a ``c4forge`` run in a process of its own: this checkout importable,
    one input file per chunk (a fault then hits one chunk), and no fault hook inherited
    (``C4FORGE_FAULT``/``…_MARKERS`` only where ``extra`` sets them)."""
    from c4forge import faults

    env = dict(os.environ, C4FORGE_CHUNK_FILES="1", **extra)
    env["PYTHONPATH"] = os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])
    for key in (faults.FAULT_ENV, faults.MARKERS_ENV):
        if key not in extra:
            env.pop(key, None)
    return env


def docs_by_url(out) -> dict[str, str]:
    """``{url: text}`` of a clean output's documents (every split)."""
    from pathlib import Path

    docs = {}
    for p in sorted(Path(out).glob("c4-*.json.gz")):
        with gzip.open(p, "rt", encoding="utf-8") as f:
            docs.update((d["url"], d["text"]) for d in map(json.loads, f))
    return docs
