"""The kinds of clean stage, and the read step's name: what every stage module builds.

A stage module (``c4forge.rules.*``, ``c4forge.dedup.*``, ``c4forge.langid.stage``,
``c4forge.contamination.stage``) returns one of these from its ``stage(job)``;
``c4forge.clean.plan`` lists them in order and ``c4forge.clean.passes`` runs them through the
engine primitives. They live here, below the stage rooms and the engines, so that a stage
module imports only base types and the rooms form a DAG (``tests/test_rooms.py``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from c4forge.corpus.counting import Count, Flow

Fn = Callable[..., Any]


def run_maps(stages: Iterable[Any], item: Any, count: Count) -> list[Any]:
    """``item`` through consecutive per-element stages (the one interpreter of map stages)."""
    items = [item]
    for stage in stages:
        fn = stage.fn
        if isinstance(stage, BroadcastMapStage):  # its resource travels with the plan
            fn = functools.partial(_with_resource, fn=stage.fn, resource=stage.resource)
        items = [out for it in items for out in fn(it, count)]
    return items


def _with_resource(item: Any, count: Count, *, fn: Fn, resource: Any) -> Any:
    return fn(item, count, resource)


@dataclass(frozen=True)
class MapStage:
    """Per element: ``fn(item, count) -> iterable`` (drops, keeps, re-keys). Runs inside the
    per-chunk passes (``c4forge.clean.passes``), so a new per-document stage (with module-level
    resources loaded on the worker, as the bad-words lists are) needs no engine work."""

    name: str
    fn: Fn
    shuffle_key: str | None = None
    flow: Flow | None = None  # what it counts (None: nothing, not a funnel row)


@dataclass(frozen=True)
class BroadcastMapStage:
    """Per element with a small read-only resource built on the driver (decontamination's
    n-gram index): ``fn(item, count, resource) -> iterable``. In the keys-only chunk passes it
    runs like any map stage (``run_maps``), its resource pickled with the plan into each chunk
    task; ``expand`` (``engine.broadcast``: a Beam side input, a Spark broadcast) remains for a
    stage applied to a collection directly."""

    name: str
    fn: Fn
    resource: Any = dataclasses.field(compare=False, repr=False)
    shuffle_key: str | None = None
    flow: Flow | None = None

    def expand(self, engine: Any, coll: Any) -> Any:
        side = engine.broadcast(self.name, self.resource)
        return engine.flat_map_with(coll, self.name, self.fn, side)


@dataclass(frozen=True)
class GroupStage:
    """Key every element (``key(item, count) -> (k, v)*``), then one call per key:
    ``reduce(k, values, count) -> iterable`` (URL dedup keeps one copy per URL)."""

    name: str
    key: Fn
    reduce: Fn
    shuffle_key: str
    flow: Flow | None = None


# Corpus-wide stages (keys only: the documents never cross a shuffle). Each has ``emit(loc, doc, count) -> (k, v)*``, run
# by the chunk pass over its documents (``loc = (chunk, record)``); ``decide(engine, emitted)``
# through the engine primitives → ``(loc, decision)`` pairs, sent back to the chunk; and
# ``apply(loc, doc, decisions, count) -> docs``, run by the next chunk pass. Only keys and small
# ids cross a shuffle; the documents never leave their chunk.


@dataclass(frozen=True)
class RouteCodec:
    """How a stage's decisions travel back to their chunk as one compact value each:
    ``pack(record, decision)`` → an int or bytes whose order sorts by record first, and
    ``unpack(value)`` → ``(record, decision)``. Why: a chunk pass holds every decision of its
    chunk at once; as ``(record, decision)`` tuples they took about three times the memory of
    one packed value (exact substrings at 1M pages: ~90 MB per worker), and sorted packed
    values are walked beside the documents with no per-record dict.

    A stage with a codec routes its decisions itself (``routing``: its resolve step yields
    ``(chunk, packed)``), so no map step re-reads and re-writes them on their way back."""

    pack: Fn
    unpack: Fn

    def routing(self, resolve: Fn) -> Fn:
        """``resolve`` (any signature, yielding ``(loc, decision)``) yielding ``(chunk,
        pack(record, decision))`` instead."""
        return functools.partial(_resolve_packed, resolve=resolve, pack=self.pack)

    def lookup(self, values: Iterable[Any]) -> Fn:
        """A chunk's packed decisions → ``of(record, default)``, its decisions, walked sorted
        (records are asked for in increasing order: the chunk's file order)."""
        packed = values if isinstance(values, list) else list(values)
        packed.sort()  # in place: no second copy of the chunk's decisions
        unpack = self.unpack
        at = 0

        def of(record: int, default: Any = ()) -> Any:
            nonlocal at
            found = []
            while at < len(packed):
                rec, decision = unpack(packed[at])
                if rec > record:
                    break
                if rec == record:
                    found.append(decision)
                at += 1  # a record below this one has no document left in the chunk
            return found or default

        return of


def _resolve_packed(*args: Any, resolve: Fn, pack: Fn) -> Iterator[Any]:
    for loc, decision in resolve(*args):
        yield loc[0], pack(loc[1], decision)


@dataclass(frozen=True)
class BatchCodec:
    """Decisions that ``decide`` yields as ``(chunk, batch)``: one batch holds many records'
    decisions (a columnar stage: exact substrings' candidate marks, tens of millions at 1M
    pages, where a value per decision cost more in pickling and shuffling than deciding
    them). ``lookup(batches)`` → ``of(record, default)``, as ``RouteCodec.lookup``."""

    lookup: Fn

    def routing(self, resolve: Fn) -> Fn:
        return resolve  # it yields ``(chunk, batch)`` already


@dataclass(frozen=True)
class JoinStage:
    """A corpus-wide decision joined back to the documents (exact dedup, both passes of exact
    substrings): ``emit`` → per key either ``resolve(k, values, count)`` or a ``combine``
    (``fn(values) -> value``, pre-combined before the shuffle) followed by
    ``resolve(item, count)`` as a map → ``(loc, decision)*``."""

    name: str
    emit: Fn
    resolve: Fn
    apply: Fn
    shuffle_key: str
    combine: Fn | None = None
    flow: Flow | None = None
    codec: RouteCodec | BatchCodec | None = None  # decisions routed back packed
    # ``emit`` over a chunk's ``(loc, doc)`` stream at once (columnar batches), instead of
    # ``emit`` per document (``emit_all``)
    emit_chunk: Fn | None = None
    # ``apply`` yields every document as it came (it may set a transient field, as exact
    # substrings' candidate marks): the chunk pass after it rewrites none, the next reads
    # them where they were written (``passes.docs_written_by``).
    keeps_documents: bool = False

    def decide(self, engine: Any, emitted: Any) -> Any:
        resolve = self.resolve if self.codec is None else self.codec.routing(self.resolve)
        if self.combine is not None:
            combined = engine.combine(emitted, f"{self.name}/combine", self.combine)
            return engine.flat_map(combined, f"{self.name}/resolve", resolve)
        return engine.group(emitted, f"{self.name}/resolve", resolve)


@dataclass(frozen=True)
class ListJoinStage:
    """Documents restricted to the keys of a second input (``--variant webtextlike``): the
    list files are read as a source (``read(path, count) -> (k, n)*``, streamed on the
    workers), each document emits ``(doc_key, loc)`` and one co-group per key decides
    (``join(k, locs, entries, count) -> loc*``, the kept ones). The list never sits in the
    driver's memory."""

    name: str
    paths: tuple[str, ...]
    read: Fn
    doc_key: Fn
    join: Fn
    shuffle_key: str
    flow: Flow | None = None
    codec: None = None  # its decisions are ``(loc, decision)``, routed by the chunk passes
    keeps_documents: bool = False  # it drops documents
    emit_chunk: Fn | None = None

    def emit(self, loc: Any, doc: Any, count: Count) -> Iterator[tuple[Any, Any]]:
        yield self.doc_key(doc), loc

    def decide(self, engine: Any, emitted: Any) -> Any:
        listed = engine.source(f"{self.name}/list", list(self.paths), self.read)
        kept = engine.cogroup(self.name, emitted, listed, self.join)
        return engine.flat_map(kept, f"{self.name}/kept", _kept)

    @staticmethod
    def apply(loc: Any, doc: Any, decisions: Iterable[Any], count: Count) -> Iterator[Any]:
        if any(True for _ in decisions):
            yield doc


def _kept(loc: Any, count: Count) -> Iterator[tuple[Any, bool]]:
    yield loc, True


@runtime_checkable
class CorpusStage(Protocol):
    """What a corpus-wide stage offers the chunk passes (``JoinStage``, ``ListJoinStage``,
    ``c4forge.dedup.minhash.NearDedupStage``): ``emit`` keys per document, ``decide`` through
    the engine primitives → ``(loc, decision)`` pairs (with a codec, ``(chunk, packed)``),
    ``apply`` the decisions per document;
    ``codec``: how the decisions travel back packed, ``decide`` then yielding them keyed by
    their chunk (``None``: ``(loc, decision)``, routed by ``clean.passes.to_chunk``);
    ``keeps_documents``: ``apply`` passes every document on as it came (no copy rewritten);
    ``emit_chunk``: ``emit`` over a chunk's whole ``(loc, doc)`` stream (``None``: per
    document; ``emit_all``)."""

    name: str
    shuffle_key: str
    flow: Flow | None
    codec: RouteCodec | BatchCodec | None
    keeps_documents: bool
    emit_chunk: Fn | None

    def emit(self, loc: Any, doc: Any, count: Count) -> Iterable[tuple[Any, Any]]: ...

    def decide(self, engine: Any, emitted: Any) -> Any: ...

    def apply(
        self, loc: Any, doc: Any, decisions: Iterable[Any], count: Count
    ) -> Iterable[Any]: ...


def emit_all(stage: CorpusStage, docs: Iterable[tuple[Any, Any]], count: Count) -> Iterator[Any]:
    """A corpus stage's keys for a chunk's ``(loc, doc)`` stream: its ``emit_chunk`` when it
    has one, else ``emit`` per document."""
    if stage.emit_chunk is not None:
        yield from stage.emit_chunk(docs, count)
        return
    for loc, doc in docs:
        yield from stage.emit(loc, doc, count)


READ_STAGE = "wet"  # the read step's counter namespace, WARC input too (c4_rules.md §13)


class StageJob(Protocol):
    """What the stage modules' ``stage(job)`` read of a clean job to decide whether and how they
    run (``clean.config.CleanJob`` is one; a recorded run's job, ``clean.plan.recorded_job``,
    too). Declared here, below the stage rooms, so they name the seam without importing
    ``clean``; a stage reading a new option adds it here and to ``CleanJob``."""

    language: str
    languages: Any  # the langid stage's target languages (variants may name several)
    badwords_fraction: float | None
    dedup: str | None
    near_dedup: str
    dedup_substrings: int
    substrings_keep: str
    decontaminate: tuple[str, ...]
    input_format: str
    max_record_bytes: int

    @property
    def spec(self) -> Any: ...  # the corpus variant's rules (``clean.variants.Variant``)

    @property
    def domains(self) -> Any: ...  # realnewslike's allowed domains (loaded once, cached)

    @property
    def benchmarks(self) -> Any: ...  # the decontaminate stage's n-gram index and its sources

    @property
    def url_list_files(self) -> tuple[str, ...]: ...  # webtextlike's URL lists

    def minhash_params(self) -> Any: ...  # --near-dedup minhash's parameters
