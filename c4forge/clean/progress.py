"""Per-input progress of a long `clean` job, so a killed run can be resumed (``--resume``).

Why chunks of inputs and not single pages: the corpus-wide steps (URL dedup, span dedup,
near-dedup) need every page at once, so they cannot be resumed piecemeal. What *is* per input
is the expensive front of the job: parsing, the length cap and the line/page rules (Punkt).
The engine runs that front one chunk of input files at a time and persists each chunk's
post-clean records (``FrontRecord``) under ``OUTPUT/_work/``; then it runs URL dedup → dedup →
langid → … over all persisted chunks in a final step. The clean rules are per page, so cleaning
before URL dedup changes no decision; each record keeps the clean counters of its page, and
``choose_front_copy`` counts them only for the URL-dedup survivor, so stats.json equals an
uninterrupted run's (same counters, same conservation identities).

The two engines share this module (records, URL-dedup choice, the ``_work`` protocol) and
differ only in how a chunk is run:

* Spark (``engines/spark.py``): one Spark job per chunk of ``C4FORGE_CHUNK_FILES`` inputs, saved as a
  pickle folder, always (a killed run can be resumed even if it was started without --resume).
* Beam (``engines/beam.py`` with ``--resume``): ONE pipeline, so it means the same on Dataflow as on
  the DirectRunner. A chunk is one input file; the ``front`` DoFn either runs read → length →
  clean on it, writing the records to ``chunk-NNNNN.pages.gz`` (gzip JSON lines, see
  ``write_records``) before the chunk's record, or — record present — re-emits the persisted
  records and the recorded counters without reading the input. A bundle retried by the runner
  finds the record of its own first attempt, so retries stay idempotent too.

Layout (all records written atomically, a chunk's record only after its data is complete)::

    OUTPUT/_work/job.json                 engine + config + inputs (+ chunk size) of the run
    OUTPUT/_work/chunk-00003/             Spark: the chunk's pickle files
    OUTPUT/_work/chunk-00003.pages.gz     Beam: the chunk's FrontRecords
    OUTPUT/_work/chunk-00003.json         "chunk 3 is done": its input files and counters

``--resume`` skips every chunk whose record exists and names the same input files; any other
leftover (a chunk cut mid-write) is removed and redone. Without ``--resume`` a stale ``_work``
is removed first. After the final step (stats.json written) ``_work`` is deleted.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from c4forge.errors import ConfigError
from c4forge.filters.counting import Count, CounterBag
from c4forge.filters.drop_samples import sample
from c4forge.io import storage
from c4forge.io.inputs import InputFile
from c4forge.io.storage import dumps_pretty

WORK_DIR = "_work"
FORMAT = "c4forge.clean.progress"
FORMAT_VERSION = 1
# Inputs per chunk: a Common Crawl WET file is ~100 MB, so 8 files keep two cores busy for a
# few minutes and lose at most that much work on a kill. Override with C4FORGE_CHUNK_FILES.
DEFAULT_CHUNK_FILES = 8
BEAM_DATA_SUFFIX = ".pages.gz"  # Beam: one gzip JSON-lines file of FrontRecords per chunk
# Beam counter namespace of the front's decisions (inputs skipped / processed): reported in the
# log, kept out of stats.json so a resumed run's stats equal an uninterrupted one's.
RESUME_NAMESPACE = "c4forge.resume"
RECORDS_GZIP_LEVEL = 1  # scratch data read once: speed over size


@dataclass(frozen=True)
class Chunk:
    index: int
    files: tuple[InputFile, ...]

    @property
    def name(self) -> str:
        return f"chunk-{self.index:05d}"

    def describe(self) -> list[dict[str, Any]]:
        return [{"path": f.path, "size": f.size} for f in self.files]


def chunk_files_setting(default: int = DEFAULT_CHUNK_FILES) -> int:
    raw = os.environ.get("C4FORGE_CHUNK_FILES")
    if raw is None:
        return default
    try:
        n = int(raw)
    except ValueError:
        raise ConfigError(f"C4FORGE_CHUNK_FILES must be a positive integer, got {raw!r}") from None
    if n < 1:
        raise ConfigError(f"C4FORGE_CHUNK_FILES must be >= 1, got {n}")
    return n


def plan_chunks(files: Sequence[InputFile], chunk_files: int) -> list[Chunk]:
    """Consecutive groups of the (sorted, unique) input files."""
    ordered = sorted(set(files))
    return [
        Chunk(i, tuple(ordered[start : start + chunk_files]))
        for i, start in enumerate(range(0, len(ordered), chunk_files))
    ]


class WorkDir:
    """The ``_work`` folder of one output: job record, chunk data, chunk records.

    ``data_suffix`` names the engine's chunk data: "" (a folder, Spark) or ``BEAM_DATA_SUFFIX``.
    """

    def __init__(self, output: str, data_suffix: str = "") -> None:
        self.output = output
        self.root = storage.join(output, WORK_DIR)
        self.data_suffix = data_suffix

    # -- paths ---------------------------------------------------------------------------------
    def data_path(self, chunk: Chunk) -> str:
        return storage.join(self.root, chunk.name + self.data_suffix)

    def record_path(self, chunk: Chunk) -> str:
        return storage.join(self.root, chunk.name + ".json")

    @property
    def job_path(self) -> str:
        return storage.join(self.root, "job.json")

    # -- small file helpers (local or Beam filesystems) ----------------------------------------
    def _read_json(self, path: str) -> Any | None:
        """The record, or None when it is confirmed absent; read errors propagate."""
        try:
            return storage.read_json_if_exists(path)
        except json.JSONDecodeError:
            return None  # a torn record cannot exist (atomic writes); treat as "not done"

    def _write_json(self, path: str, obj: Any) -> None:
        with storage.atomic_writer(path) as f:
            f.write(dumps_pretty(obj).encode("utf-8"))

    def exists(self, path: str) -> bool:
        return storage.exists(path)

    def remove(self, path: str | None = None) -> None:
        """Delete a file or a folder; on an object store a folder is a key prefix (no object),
        so the objects under it are deleted."""
        target = path or self.root
        storage.rmtree(target)
        storage.remove(target)

    # -- the protocol --------------------------------------------------------------------------
    def start(self, job: dict[str, Any], resume: bool) -> bool:
        """Prepare ``_work`` for ``job``; True when an earlier run of the same job is resumed.

        ``--resume`` with a ``_work`` of a *different* job is refused (its chunks would be
        mixed into this output); without ``--resume`` any old ``_work`` is discarded.
        """
        record = {"format": FORMAT, "format_version": FORMAT_VERSION, **job}
        record = json.loads(json.dumps(record))  # tuples → lists, as read back
        existing = self._read_json(self.job_path)
        if resume and existing is not None:
            if existing != record:
                raise ConfigError(
                    f"{self.root} belongs to a run with other options or inputs; "
                    "run without --resume to start over"
                )
            return True
        self.remove()
        self._write_json(self.job_path, record)
        return False

    def done(self, chunk: Chunk) -> dict[str, Any] | None:
        """The chunk's record if it finished (same input files), else ``None``."""
        rec = self._read_json(self.record_path(chunk))
        if rec is None or rec.get("inputs") != json.loads(json.dumps(chunk.describe())):
            return None
        return rec

    def mark_done(self, chunk: Chunk, counters: dict[str, dict[str, int]], **extra: Any) -> None:
        self._write_json(
            self.record_path(chunk), {"inputs": chunk.describe(), "counters": counters, **extra}
        )

    def reset(self, chunk: Chunk) -> None:
        """Remove a chunk's partial data (left by a killed run) before redoing it."""
        self.remove(self.record_path(chunk))
        self.remove(self.data_path(chunk))

    def finish(self) -> None:
        self.remove()


# --------------------------------------------------------------------------------------------
# Records of the front (read → length → clean), shared by both engines


class FrontRecord(NamedTuple):
    """One page after read + length, with its clean outcome (``cleaned_text is None`` = dropped
    by clean) and the clean counters it produced, counted later only if the page wins URL
    dedup. With span dedup only the Punkt ``sentences`` are kept (span dedup rebuilds the text
    from them), so ``cleaned_text`` is then "" for a kept page."""

    page: Any  # c4forge.filters.wet.Page
    cleaned_text: str | None
    sentences: Any
    clean_counts: tuple[tuple[str, str, int], ...]
    clean_samples: tuple[tuple[str, str, str, str], ...] = ()  # (key, hash, text, url)


def _through(stages: Iterable[Any], page: Any, count: Count) -> list[Any]:
    items = [page]
    for stage in stages:
        items = [out for item in items for out in stage.fn(item, count)]
    return items


def front_records(pages: Iterable[Any], plan: Any, count: Count) -> Iterator[FrontRecord]:
    """The plan's page stages (counted into ``count`` now) → its clean stage (counted into the
    record, for later: only the URL-dedup survivor's clean counters count)."""
    keep = getattr(count, "keep", 0)
    for page in pages:
        for kept in _through(plan.page_stages, page, count):
            page_bag = CounterBag(keep)
            docs = _through([plan.clean], kept, page_bag)
            counts = tuple(
                (s, r, n)
                for s, reasons in sorted(page_bag.counts.items())
                for r, n in sorted(reasons.items())
            )
            samples = tuple(
                (key, *rec) for key, recs in page_bag.samples.items() for rec in recs
            )
            if not docs:
                yield FrontRecord(kept, None, None, counts, samples)
            else:
                (doc,) = docs
                yield FrontRecord(kept, doc.text, doc.sentences, counts, samples)


def doc_of(rec: FrontRecord) -> Any:
    """The cleaned document of a kept record."""
    from c4forge.clean.steps import Doc

    p = rec.page
    return Doc(p.url, p.timestamp, p.normalized_url, rec.cleaned_text, rec.sentences)


def choose_front_copy(records: Iterable[FrontRecord], count: Count) -> FrontRecord | None:
    """URL dedup (§4.2) over one normalized URL's records; counts ``url_dedup`` and the kept
    copy's clean counters. Returns the kept record, or ``None`` when clean dropped it."""
    from c4forge.filters.urls import choose_url_copy_counted

    recs = list(records)
    kept = choose_url_copy_counted([r.page for r in recs], count)
    rec = next(r for r in recs if r.page is kept)
    for stage, reason, n in rec.clean_counts:
        count(stage, reason, n)
    for key, _, text, url in rec.clean_samples:  # --keep-samples: the kept copy's only
        stage, reason = key.split("/", 1)
        sample(count, stage, reason, text, url)
    return rec if rec.cleaned_text is not None else None


def _record_line(rec: FrontRecord) -> bytes:
    obj = {
        "page": dataclasses.asdict(rec.page),
        "text": rec.cleaned_text,
        "sentences": rec.sentences,
        "counts": rec.clean_counts,
    }
    if rec.clean_samples:
        obj["samples"] = rec.clean_samples
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"


def _record_of(line: bytes) -> FrontRecord:
    from c4forge.filters.wet import Page

    obj = json.loads(line)
    return FrontRecord(
        Page(**obj["page"]),
        obj["text"],
        obj["sentences"],
        tuple((s, r, int(n)) for s, r, n in obj["counts"]),
        tuple(tuple(x) for x in obj.get("samples", ())),
    )


def write_records(path: str, records: Iterable[FrontRecord]) -> Iterator[FrontRecord]:
    """Stream ``records`` into ``path`` (gzip JSON lines, appears only when complete), passing
    each one through. Why JSON and not pickle: the file outlives the process that wrote it
    (a resumed run may use another Python or c4forge build), and stays inspectable."""
    with storage.atomic_writer(path) as raw:
        with gzip.GzipFile(
            filename="", mode="wb", compresslevel=RECORDS_GZIP_LEVEL, fileobj=raw, mtime=0
        ) as gz:
            for rec in records:
                gz.write(_record_line(rec))
                yield rec


def read_records(path: str) -> Iterator[FrontRecord]:
    raw = storage.open_read(path)
    with raw, gzip.GzipFile(fileobj=raw, mode="rb") as gz:
        for line in gz:
            yield _record_of(line)
