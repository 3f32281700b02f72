"""The clean plan run keys-only: page text stays in the chunk that read it.

Why: page text in every shuffle makes memory and shuffle bytes grow with the corpus
(measurements: benchmarks/RESULTS.md §11). Here a chunk (one input file, ``progress.Chunk``)
is read once; its records go to ``OUTPUT/_work/``; only keys and
small ids cross a shuffle; the decisions come back grouped by chunk, and the next pass over
the chunk applies them. Documents cross one shuffle: into the output shards, packed
(``output.pack_doc``: the sort key plain, text and timestamp zlib-compressed). Same plan, same
order, same rules, so the same output bytes as running the plan with documents in the shuffles.

Passes, each through the engine primitives only (``engines.base``), so Beam, Spark and the
local engine run this one function::

    front (per chunk): read → page stages → clean; records to chunk-N.pages.gz,
        (normalized URL, UrlEntry) out                                   [resumable per chunk]
    URL dedup: group by normalized URL → kept (chunk, record)
    pass k (per chunk, co-grouped with its decisions): the previous corpus stage's ``apply``
        (pass 0: the URL-dedup survivors and their clean counters) → the map stages up to the
        next corpus stage → the documents to chunk-N.docs<k>.gz, that stage's keys out; the
        corpus stage ``decide``s → (loc, decision) → back to chunk loc[0] for pass k+1
    last pass: … split → (output key, OutDoc) → ``write_shards``

A document's location ``loc = (chunk, record)`` is its id in every key: a decision goes back
to ``loc[0]`` without a join on the URL.
"""

from __future__ import annotations

import functools
import gzip
import json
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from c4forge.clean import output as clean_output
from c4forge.clean import resume_state
from c4forge.clean.plan import Plan
from c4forge.corpus.counting import Count, CounterBag
from c4forge.corpus.documents import Doc, UrlEntry
from c4forge.corpus.stages import READ_STAGE, emit_all, run_maps
from c4forge.errors import VerificationError
from c4forge.io import fingerprint, storage

KEYS_SUFFIX = ".keys.gz"  # a chunk's URL entries (re-emitted by a resumed run)
GZIP_LEVEL = 1  # scratch data read once: speed over size


def docs_suffix(k: int) -> str:
    return f".docs{k}.gz"


def _path(work: resume_state.WorkDir, chunk: resume_state.Chunk, suffix: str) -> str:
    return storage.join(work.root, chunk.name + suffix)


def _rewrites_nothing(segments: list[tuple[list[Any], Any]], k: int) -> bool:
    """Whether pass ``k`` would write the documents it read, unchanged: the stage it applies
    keeps every document as it came and no map stage runs before its own corpus stage."""
    maps, _corpus = segments[k]
    return k > 0 and not maps and segments[k - 1][1].keeps_documents


def docs_written_by(segments: list[tuple[list[Any], Any]], k: int) -> int:
    """The pass whose documents file holds pass ``k``'s documents: ``k``, or the pass before
    it that wrote what ``k`` would have rewritten (a scratch copy of the chunk's text saved:
    exact substrings' winnowing pass changes no document)."""
    while _rewrites_nothing(segments, k):
        k -= 1
    return k


# --- JSON-lines scratch files: plain data, read back by any engine's workers ------------------


class _LineWriter:
    def __init__(self, gz: Any) -> None:
        self.gz = gz

    def write(self, obj: Any) -> None:
        line = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        self.gz.write(line.encode("utf-8") + b"\n")


class _lines_to:  # noqa: N801 - a context manager used as a function
    """``with _lines_to(path) as w: w.write(obj)``: gzip JSON lines, atomic (appears when
    complete)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> _LineWriter:
        self._raw_cm = storage.atomic_writer(self.path)
        raw = self._raw_cm.__enter__()
        self._gz = gzip.GzipFile(
            filename="", mode="wb", compresslevel=GZIP_LEVEL, fileobj=raw, mtime=0
        )
        return _LineWriter(self._gz)

    def __exit__(self, *exc: Any) -> bool:
        try:
            self._gz.close()
        finally:
            self._raw_cm.__exit__(*exc)
        return False


def _lines_of(path: str) -> Iterator[Any]:
    """The objects of one of the run's own gzip JSON-lines files. Written atomically, so damage
    (a disk error, a hand edit, a copy cut short) is a one-line error naming the file, never a
    shorter list of records read as if complete."""
    raw = storage.open_read(path)
    try:
        with raw, gzip.GzipFile(fileobj=raw, mode="rb") as gz:
            for line in gz:
                yield json.loads(line)
    except (gzip.BadGzipFile, EOFError, zlib.error, ValueError) as err:
        raise VerificationError(
            f"{path} is damaged ({type(err).__name__}: {err}); run again without --resume "
            "to start over"
        ) from None


# --- front: read → page stages → clean, per chunk ----------------------------------------------


def front(chunk: resume_state.Chunk, count: Count, *, plan: Plan, output: str) -> Iterator[tuple]:
    """One chunk → its ``(URL-dedup key, UrlEntry)`` pairs. Not done yet: read → page stages
    → clean, records (cleaned text, clean counters of the page) and URL entries written, then
    the chunk's done-record with its counters. Done by an earlier run (``--resume``) or an
    earlier attempt of this bundle: the recorded entries and counters, the input not read."""
    from c4forge.corpus.drop_samples import MAX_TEXT

    keep = getattr(count, "keep", 0)  # --keep-samples
    work = resume_state.WorkDir(output, resume_state.BEAM_DATA_SUFFIX)
    keys = _path(work, chunk, KEYS_SUFFIX)
    record = work.done(chunk)
    if record is not None and work.exists(work.data_path(chunk)) and work.exists(keys):
        entries = [UrlEntry(*e[:4], (e[4][0], e[4][1]), *e[5:]) for e in _lines_of(keys)]
        count(resume_state.RESUME_NAMESPACE, "skipped")
    else:
        work.reset(chunk)
        work.remove(keys)
        bag = CounterBag(keep)
        entries = []
        digests: dict[str, str] = {}  # sha256 of each input, from this read
        with _lines_to(work.data_path(chunk)) as out:
            for f in chunk.files:
                for page in fingerprint.read_hashed(plan.read, f.path, bag, digests):
                    for kept in run_maps(plan.page_stages, page, bag):
                        page_bag = CounterBag(keep)
                        docs = run_maps([plan.clean], kept, page_bag)
                        counts = [
                            (s, r, n)
                            for s, reasons in sorted(page_bag.counts.items())
                            for r, n in sorted(reasons.items())
                        ]
                        doc = docs[0] if docs else None
                        line = (
                            [None, None, counts]
                            if doc is None
                            else [doc.text, doc.sentences, counts]
                        )
                        if keep and page_bag.samples:
                            line.append(page_bag.samples)  # the survivor's only, as its counts
                        out.write(line)
                        loc = (chunk.index, len(entries))
                        entry = UrlEntry(
                            kept.normalized_url, kept.timestamp, kept.text_md5, kept.url, loc
                        )
                        if keep:  # a dropped copy's duplicate_url sample needs its text
                            entry = entry._replace(text=kept.text[:MAX_TEXT])
                        entries.append(entry)
        with _lines_to(keys) as out:
            for e in entries:
                out.write(list(e))
        extra = {"samples": bag.samples} if keep else {}
        work.mark_done(chunk, bag.counts, sha256=digests, **extra)
        record = {"counters": bag.counts, **extra}
        count(resume_state.RESUME_NAMESPACE, "processed")
    for stage, reasons in record["counters"].items():
        for reason, n in reasons.items():
            count(stage, reason, n)
    add_samples(count, record.get("samples", {}))
    for e in entries:
        yield from plan.url_dedup.key(e, count)


def add_samples(count: Count, samples: dict[str, list]) -> None:
    """Recorded samples (``{stage/reason: [(hash, text, url)…]}``) into ``count``'s sample."""
    from c4forge.corpus.drop_samples import add_records

    add_records(count, samples)


def url_survivor(entry: UrlEntry, count: Count) -> Iterator[tuple[int, int]]:
    """The kept copy of a URL → ``(chunk, record)``: back to its chunk."""
    yield entry.loc[0], entry.loc[1]


def to_chunk(item: tuple[tuple[int, int], Any], count: Count) -> Iterator[tuple[int, Any]]:
    """``(loc, decision)`` → ``(chunk, (record, decision))``: the route of a stage without a
    codec."""
    loc, decision = item
    yield loc[0], (loc[1], decision)


def _decisions_by_record(decisions: Iterable[Any], codec: Any) -> Any:
    """``record → its decisions``: a dict of lists, or the codec's lookup of its packed
    decisions (``RouteCodec.lookup``, ``BatchCodec.lookup``)."""
    if codec is None:
        by_record: dict[int, list[Any]] = {}
        for record, decision in decisions:
            by_record.setdefault(record, []).append(decision)
        return by_record.get
    return codec.lookup(decisions)


def routed(engine: Any, corpus: Any, decided: Any) -> Any:
    """A corpus stage's decisions keyed by their chunk: a stage with a codec yields them so
    (``RouteCodec.routing``), the others' ``(loc, decision)`` are mapped by ``to_chunk``."""
    if corpus.codec is not None:
        return decided
    return engine.flat_map(decided, f"{corpus.name}/route", to_chunk)


def emit_located(item: tuple[tuple[int, int], Doc], count: Count, *, stage: Any) -> Iterator:
    """A corpus stage's ``emit`` over ``(loc, doc)`` items: a stage run on its own, by the tests
    (``tests/clean_fixtures.corpus_stage``). It lives here, not under ``tests/``, because the
    Beam and Spark workers that run it import it by module path, and ``tests/`` is not on
    their path."""
    loc, doc = item
    yield from stage.emit(loc, doc, count)


def key_chunk(chunk: resume_state.Chunk, count: Count) -> Iterator[tuple[int, resume_state.Chunk]]:
    yield chunk.index, chunk


# --- the chunk passes --------------------------------------------------------------------------


def _survivor_docs(
    work: resume_state.WorkDir, chunk: resume_state.Chunk, survivors: Iterable[int], count: Count
) -> Iterator[tuple[int, Doc]]:
    """Pass 0's input: the URL-dedup survivors of the chunk (their clean counters counted now,
    as the survivor's only), as documents where clean kept them."""
    keep = set(survivors)
    keys = _lines_of(_path(work, chunk, KEYS_SUFFIX))
    for i, (rec, (nurl, ts, _md5, url, *_)) in enumerate(
        zip(_lines_of(work.data_path(chunk)), keys, strict=True)
    ):
        if i not in keep:
            continue
        text, sentences, counts = rec[:3]
        for stage, reason, n in counts:
            count(stage, reason, n)
        if len(rec) > 3:
            add_samples(count, rec[3])
        if text is not None:
            yield i, Doc(url, ts, nurl, text, sentences)


def _state_docs(path: str) -> Iterator[tuple[int, Doc]]:
    for i, url, ts, nurl, text, sentences, language in _lines_of(path):
        yield i, Doc(url, ts, nurl, text, sentences, language)


def chunk_pass(
    index: int,
    chunks: Iterable[resume_state.Chunk],
    decisions: Iterable[Any],
    count: Count,
    *,
    plan: Plan,
    output: str,
    k: int,
    runs: bool = False,
) -> Iterator[Any]:
    """Pass ``k`` over one chunk (see the module docstring); yields the next corpus stage's
    keys, or on the last pass the output pairs (``runs``: the chunk's documents written as
    one sorted run per output key instead, ``output.chunk_runs``; yields ``(key, run)``)."""
    (chunk,) = list(chunks)
    work = resume_state.WorkDir(output, resume_state.BEAM_DATA_SUFFIX)
    segments = plan.segments()
    maps, corpus = segments[k]
    if k == 0:
        docs = _survivor_docs(work, chunk, decisions, count)
    else:
        previous = segments[k - 1][1]
        decisions_of = _decisions_by_record(decisions, previous.codec)
        docs = (
            (i, out)
            for i, doc in _state_docs(
                _path(work, chunk, docs_suffix(docs_written_by(segments, k - 1)))
            )
            for out in previous.apply((chunk.index, i), doc, decisions_of(i, ()), count)
        )
    if corpus is None:
        pairs = (pair for _, doc in docs for pair in run_maps(maps, doc, count))
        yield from clean_output.chunk_runs(pairs, work.root, chunk.name) if runs else pairs
        return
    if _rewrites_nothing(segments, k):
        yield from emit_all(corpus, (((chunk.index, i), doc) for i, doc in docs), count)
        return
    with _lines_to(_path(work, chunk, docs_suffix(k))) as out:

        def written() -> Iterator[tuple[tuple[int, int], Doc]]:
            for i, doc in docs:
                for d in run_maps(maps, doc, count):
                    out.write(
                        [i, d.url, d.timestamp, d.normalized_url, d.text, d.sentences, d.language]
                    )
                    yield (chunk.index, i), d

        yield from emit_all(corpus, written(), count)


def progress_plan(plan: Plan, files: int, chunks: int) -> Any:
    """What the engine's progress displays call each stage of this plan (the step labels of
    ``documents`` and ``output.write_shards``) and the pages-read counter they show."""
    from c4forge.engines.stage_progress import ProgressPlan

    front = ["read", *(s.name for s in plan.page_stages), plan.clean.name]
    titles = {
        READ_STAGE: " → ".join(front),
        "chunks": "chunks to their decisions",
        "output": "sorted runs → shards",
    }
    previous = plan.url_dedup.name
    for k, (maps, corpus) in enumerate(plan.segments()):
        steps = [f"{previous} applied", *(m.name for m in maps)]
        titles[f"pass{k}"] = " → ".join(steps + ([f"{corpus.name} keys"] if corpus else []))
        if corpus is not None:
            previous = corpus.name
    units = {READ_STAGE: "file" if files == chunks else "chunk"}
    return ProgressPlan("clean", titles, units, (READ_STAGE, "pages"))


def run_plan(
    engine: Any, plan: Plan, files: list[Any], job: Any, chunks: list[resume_state.Chunk]
) -> list[dict]:
    """The clean job on ``engine`` (its progress displays over ``files``); the per-shard stats."""
    engine.start(job.keep_samples, len(chunks))
    with engine.progress(len(files), job.quiet, progress_plan(plan, len(files), len(chunks))):
        return run(engine, plan, job, chunks)


def run(engine: Any, plan: Plan, job: Any, chunks: list[resume_state.Chunk]) -> list[dict]:
    """The whole plan keys-only on ``engine``; returns the per-shard stats. The documents
    reach the shard writers as sorted runs on storage (``output.chunk_runs``)."""
    return clean_output.write_shards(engine, documents(engine, plan, job, chunks, runs=True), job)


def documents(
    engine: Any, plan: Plan, job: Any, chunks: list[resume_state.Chunk], runs: bool = False
) -> Any:
    """The plan's ``(output key, OutDoc)`` collection (chunk files under ``job.output``);
    ``runs``: ``(output key, run)`` of each chunk's sorted runs instead."""
    read = functools.partial(front, plan=plan, output=job.output)
    entries = engine.source(READ_STAGE, chunks, read)
    kept = engine.group(entries, plan.url_dedup.name, plan.url_dedup.reduce)
    decisions = engine.flat_map(kept, f"{plan.url_dedup.name}/route", url_survivor)
    keyed = engine.source("chunks", chunks, key_chunk)
    for k, (_maps, corpus) in enumerate(plan.segments()):
        step = functools.partial(chunk_pass, plan=plan, output=job.output, k=k, runs=runs)
        out = engine.cogroup(f"pass{k}", keyed, decisions, step)
        if corpus is None:
            return out
        decisions = routed(engine, corpus, corpus.decide(engine, out))
    raise AssertionError("unreachable: the last segment has no corpus stage")
