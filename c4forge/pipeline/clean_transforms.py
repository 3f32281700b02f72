"""The Beam stages of `c4forge clean`, one DoFn/PTransform per rule of c4_rules.md §1.

The rules themselves live in ``c4forge.filters`` (plain functions, no Beam); this module only
wires them into Beam and binds their ``count`` callback to Beam counters (namespace = stage,
name = reason), so every drop is a counter on every runner. DoFns live in a module (not in
``__main__``), so Dataflow/Flink workers unpickle them from the installed package and
``save_main_session`` is not needed.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

import apache_beam as beam
from apache_beam.metrics import Metrics

from c4forge.filters import dedup as dd
from c4forge.formats import storage
from c4forge.pipeline import clean_output as co


class BeamCount:
    """The ``Count`` callback of the filters, backed by Beam counters (cached per name)."""

    def __init__(self) -> None:
        self._counters: dict[tuple[str, str], Any] = {}

    def __call__(self, stage: str, reason: str, n: int = 1) -> None:
        key = (stage, reason)
        c = self._counters.get(key)
        if c is None:
            c = self._counters[key] = Metrics.counter(stage, reason)
        c.inc(n)


class Doc(NamedTuple):
    """A page after cleaning. ``sentences`` (Punkt, per line) is kept only until span dedup."""

    url: str
    timestamp: str
    normalized_url: str
    text: str
    sentences: Any = None


class CountingDoFn(beam.DoFn):
    def setup(self) -> None:
        self.count = BeamCount()


# --- 1. wet -----------------------------------------------------------------------------------


def read_input(path: str, count: Any, max_record_bytes: int, input_format: str) -> Iterator[Any]:
    """One input path → its pages (c4_rules.md §3). The reader counts every ``wet.*`` reason."""
    name = path.rsplit("/", 1)[-1]
    if input_format == "wet":
        from c4forge.filters.wet import open_binary, read_wet

        with open_binary(path) as stream:
            yield from read_wet(stream, name, count, max_record_bytes=max_record_bytes)
    else:  # "warc" or "auto" (decided per file by sniffing its first records)
        from c4forge.filters.warc_html import read_path

        yield from read_path(
            path, count, input_format=input_format, max_record_bytes=max_record_bytes
        )


def mark_file_read(progress_dir: str | None, path: str) -> None:
    """An empty marker per finished input, counted by the driver's progress bar."""
    if progress_dir:
        import hashlib
        import os

        marker = hashlib.md5(path.encode("utf-8")).hexdigest()
        with open(os.path.join(progress_dir, marker), "wb"):
            pass


# --- 1–4: the front (read → length → clean), then URL dedup -------------------------------------


class PlainFrontFn(CountingDoFn):
    """One input path → its ``FrontRecord``s keyed by normalized URL: read → length → clean in
    one step, before the URL-dedup shuffle (issue 11 §4). Records are ``lean`` (the raw text's
    md5, not the raw text), so that shuffle carries cleaned text only; clean's counters ride
    with each record and count for the URL-dedup survivor only, as in the ``--resume`` front.

    ``progress_dir`` (local runners only): an empty marker file is created there per finished
    input, so the driver can show a progress bar across worker processes.
    """

    def __init__(
        self,
        max_record_bytes: int,
        progress_dir: str | None,
        input_format: str,
        keep_sentences: bool,
    ) -> None:
        self.max_record_bytes = max_record_bytes
        self.progress_dir = progress_dir
        self.input_format = input_format
        self.keep_sentences = keep_sentences

    def process(self, path: str) -> Iterator[tuple[str, Any]]:
        from c4forge.pipeline import progress as pg

        pages = read_input(path, self.count, self.max_record_bytes, self.input_format)
        for rec in pg.front_records(pages, self.keep_sentences, self.count, lean=True):
            yield rec.page.normalized_url, rec
        mark_file_read(self.progress_dir, path)


# --- the same front with --resume: persisted per input (progress.py) ----------------------------


class FrontFn(CountingDoFn):
    """One input (a one-file ``progress.Chunk``) → its ``FrontRecord``s keyed by normalized URL.

    Not done yet: read → length → clean, the records streamed to the chunk's data file, then
    the chunk's record (front counters) written, then those counters added to Beam's. Done by
    an earlier run (or an earlier attempt of this bundle): the persisted records and counters,
    the input itself is not read. Either way the counters and elements are the same.
    """

    def __init__(
        self,
        output: str,
        max_record_bytes: int,
        input_format: str,
        keep_sentences: bool,
        progress_dir: str | None = None,
    ) -> None:
        self.output = output
        self.max_record_bytes = max_record_bytes
        self.input_format = input_format
        self.keep_sentences = keep_sentences
        self.progress_dir = progress_dir

    def process(self, chunk: Any) -> Iterator[tuple[str, Any]]:
        from c4forge.filters.counting import CounterBag
        from c4forge.pipeline import progress as pg

        work = pg.WorkDir(self.output, pg.BEAM_DATA_SUFFIX)
        data = work.data_path(chunk)
        record = work.done(chunk)
        if record is not None and work.exists(data):
            records = pg.read_records(data)
            for rec in records:
                yield rec.page.normalized_url, rec
            self.count(pg.RESUME_NAMESPACE, "skipped")
        else:
            work.reset(chunk)
            bag = CounterBag()
            pages = (
                page
                for f in chunk.files
                for page in read_input(f.path, bag, self.max_record_bytes, self.input_format)
            )
            records = pg.front_records(pages, self.keep_sentences, bag)
            for rec in pg.write_records(data, records):
                yield rec.page.normalized_url, rec
            work.mark_done(chunk, bag.counts)
            record = {"counters": bag.counts}
            self.count(pg.RESUME_NAMESPACE, "processed")
        for stage, reasons in record["counters"].items():
            for reason, n in reasons.items():
                self.count(stage, reason, n)
        for f in chunk.files:
            mark_file_read(self.progress_dir, f.path)


class ChooseFrontCopyFn(CountingDoFn):
    """One normalized URL's FrontRecords → the kept copy as a Doc, if clean kept it."""

    def process(self, element: tuple[str, Iterable[Any]]) -> Iterator[Doc]:
        from c4forge.pipeline.progress import choose_front_copy

        rec = choose_front_copy(element[1], self.count)
        if rec is not None:
            p = rec.page
            yield Doc(p.url, p.timestamp, p.normalized_url, rec.cleaned_text, rec.sentences)


class FrontThenUrlDedup(beam.PTransform):
    """Stages 1–4 (wet → length → clean, then url_dedup) → Docs: ``fn`` (``PlainFrontFn`` on
    paths, or ``FrontFn`` on one-file chunks with per-input progress) keys FrontRecords by
    normalized URL. Clean runs before URL dedup, on every copy, but its counters count for the
    kept copy only, so counters and Docs equal the reference order's."""

    def __init__(self, fn: beam.DoFn) -> None:
        super().__init__()
        self.fn = fn

    def expand(self, chunks):
        return (
            chunks
            | "front" >> beam.ParDo(self.fn)
            | "GroupByNormalizedUrl" >> beam.GroupByKey()
            | "url_dedup" >> beam.ParDo(ChooseFrontCopyFn())
        )


# --- 5. dedup ---------------------------------------------------------------------------------


class SpanOccurrencesFn(beam.DoFn):
    def process(self, doc: Doc) -> Iterator[tuple[str, tuple]]:
        for key, occ in dd.span_occurrences(doc.url, doc.sentences):
            yield key, tuple(occ)


class SpanRemovalsFn(CountingDoFn):
    def process(self, element: tuple[str, Iterable[tuple]]) -> Iterator[tuple[str, tuple]]:
        _, occurrences = element  # re-iterable grouped values; never copied into a list
        repeated = False
        for url, removal in dd.iter_span_removals(occurrences):
            repeated = True
            yield url, tuple(removal)
        if repeated:
            self.count(dd.STAGE, "repeated_windows")


class ApplySpanRemovalsFn(CountingDoFn):
    def process(self, element: tuple[str, dict]) -> Iterator[Doc]:
        _, joined = element
        (doc,) = joined["doc"]  # URLs are unique after URL dedup
        removals = [dd.SpanRemoval(*r) for r in joined["removals"]]
        text = dd.apply_span_removals(doc.sentences, removals, self.count)
        if text is not None:
            yield doc._replace(text=text, sentences=None)


class DedupSpans(beam.PTransform):
    """§8.1 as a shuffle: occurrences grouped by window hash, removals joined to pages by url."""

    def expand(self, docs):
        removals = (
            docs
            | "EmitWindows" >> beam.ParDo(SpanOccurrencesFn())
            | "GroupByWindow" >> beam.GroupByKey()
            | "ChooseOwner" >> beam.ParDo(SpanRemovalsFn())
        )
        by_url = docs | "KeyByUrl" >> beam.Map(lambda d: (d.url, d))
        return (
            {"doc": by_url, "removals": removals}
            | "JoinRemovals" >> beam.CoGroupByKey()
            | "ApplyRemovals" >> beam.ParDo(ApplySpanRemovalsFn())
        )


class LineOccurrencesFn(beam.DoFn):
    def process(self, doc: Doc) -> Iterator[tuple[str, tuple]]:
        for key, cand in dd.line_occurrences(doc.url, doc.text):
            yield key, tuple(cand)


class ApplyLineDedupFn(CountingDoFn):
    def setup(self) -> None:
        super().setup()
        from c4forge.filters.sentences import split_sentences

        self.split_sentences = split_sentences

    def process(self, element: tuple[str, dict]) -> Iterator[Doc]:
        _, joined = element
        (doc,) = joined["doc"]
        text = dd.apply_line_dedup(doc.text, joined["owned"], self.count, self.split_sentences)
        if text is not None:
            yield doc._replace(text=text)


class DedupLines(beam.PTransform):
    """§8.2 (TFDS c4/en 3.1.0): smallest md5(url) owns each line key, a combine per key."""

    def expand(self, docs):
        owned = (
            docs
            | "EmitLines" >> beam.ParDo(LineOccurrencesFn())
            | "OwnerPerLine" >> beam.CombinePerKey(min)
            | "OwnerToUrl" >> beam.Map(lambda kv: (kv[1][1], kv[0]))
        )
        by_url = docs | "KeyByUrl" >> beam.Map(lambda d: (d.url, d))
        return (
            {"doc": by_url, "owned": owned}
            | "JoinOwnedLines" >> beam.CoGroupByKey()
            | "ApplyLineDedup" >> beam.ParDo(ApplyLineDedupFn())
        )


# --- 6–8. langid, badwords, split -------------------------------------------------------------


class LangidFn(CountingDoFn):
    def __init__(self, language: str) -> None:
        self.language = language

    def process(self, doc: Doc) -> Iterator[Doc]:
        from c4forge.filters.langid import langid_filter

        if langid_filter(doc.text, self.count, self.language):
            yield doc


class BadwordsFn(CountingDoFn):
    def __init__(self, language: str, fraction: float) -> None:
        self.language = language
        self.fraction = fraction

    def process(self, doc: Doc) -> Iterator[Doc]:
        from c4forge.filters.badwords import badwords_filter

        if badwords_filter(doc.text, self.language, doc.normalized_url, self.count, self.fraction):
            yield doc


class SplitFn(CountingDoFn):
    def process(self, doc: Doc) -> Iterator[tuple[str, co.OutDoc]]:
        from c4forge.filters.split import split_of

        split = split_of(doc.normalized_url)
        self.count("split", split)
        yield split, co.make_out_doc(doc.url, doc.text, doc.timestamp)


# --- 9. output --------------------------------------------------------------------------------


class CountSplitsFn(beam.CombineFn):
    """Documents per split, zeros included (so an empty corpus still gets its empty shards)."""

    def create_accumulator(self) -> dict[str, int]:
        return dict.fromkeys(co.SPLITS, 0)

    def add_input(self, acc: dict[str, int], element: tuple[str, Any]) -> dict[str, int]:
        acc[element[0]] += 1
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, int]]) -> dict[str, int]:
        out = dict.fromkeys(co.SPLITS, 0)
        for a in accs:
            for k, v in a.items():
                out[k] += v
        return out

    def extract_output(self, acc: dict[str, int]) -> dict[str, int]:
        return acc


def shard_counts(split_docs: dict[str, int], options: dict[str, Any]) -> dict[str, int]:
    return {s: co.resolve_shards(options[s], split_docs.get(s, 0)) for s in co.SPLITS}


def _assign_shard(element: tuple[str, co.OutDoc], counts: dict, options: dict):
    split, doc = element
    n = shard_counts(counts, options)[split]
    return (split, co.shard_of(doc.url_md5, n)), doc


class WriteShardFn(beam.DoFn):
    """One (split, shard) group → one file, written whole by this worker (atomic rename)."""

    def __init__(self, directory: str, fmt: str) -> None:
        self.directory = directory
        self.fmt = fmt

    def process(self, element, counts: dict, options: dict) -> Iterator[dict]:
        (split, index), values = element
        n = shard_counts(counts, options)[split]
        yield co.write_shard(self.directory, split, index, n, values, self.fmt)


class WriteShards(beam.PTransform):
    """(split, OutDoc) → shard files; returns the PCollection of per-shard stats dicts.

    The shard count may depend on the document count (``auto``), so it is computed first and
    read as a side input. A shard no document falls into is written by the driver
    (``write_empty_shards``): no marker elements flattened in here, because the local
    FnApiRunner materialises every multi-input Flatten, i.e. every document would cross the
    process boundary once more (issue 11 §4).
    """

    def __init__(self, directory: str, fmt: str, shard_options: dict[str, Any]) -> None:
        super().__init__()
        self.directory = directory
        self.fmt = fmt
        self.shard_options = shard_options

    def expand(self, split_docs):
        counts = split_docs | "CountPerSplit" >> beam.CombineGlobally(CountSplitsFn())
        counts_si = beam.pvalue.AsSingleton(counts)
        return (
            split_docs
            | "AssignShard" >> beam.Map(_assign_shard, counts_si, self.shard_options)
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard"
            >> beam.ParDo(WriteShardFn(self.directory, self.fmt), counts_si, self.shard_options)
        )


def write_empty_shards(
    directory: str, fmt: str, shards: list[dict], split_docs: dict[str, int], options: dict
) -> list[dict]:
    """The shards no document fell into (an empty split, a small corpus in many shards),
    written empty; returns every shard's stats. Called by the driver after the pipeline."""
    have = {(x["split"], x["index"]) for x in shards}
    out = list(shards)
    for split, n in shard_counts(split_docs, options).items():
        out += [
            co.write_shard(directory, split, i, n, [], fmt)
            for i in range(n)
            if (split, i) not in have
        ]
    return sorted(out, key=lambda x: (x["split"], x["index"]))


def write_manifest(shards: list[dict], path: str) -> None:
    """Hand the per-shard stats to the driver through a file (works on every runner)."""
    import json

    data = json.dumps(sorted(shards, key=lambda s: (s["split"], s["index"]))).encode("utf-8")
    with storage.atomic_writer(path) as f:
        f.write(data)
