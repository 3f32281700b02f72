"""Per-chunk state of a `clean` job under ``OUTPUT/_work/``, so a killed run can be resumed.

Every engine runs the plan keys-only (``c4forge.clean.passes``): a chunk of inputs (one file by
default) is read once, its records stay in ``_work/`` and the later passes over the chunk
apply the corpus-wide decisions to them. The front of a chunk (read → page stages → clean, the
expensive part) is recorded: ``--resume`` skips every chunk whose record exists and names the
same input files, re-emitting its recorded URL entries and counters (the recorded clean
counters of a page are counted only for its URL-dedup survivor), so stats.json equals an
uninterrupted run's. The later passes are recomputed from the records.

Layout (every file written atomically, a chunk's record only after its data is complete)::

    OUTPUT/_work/job.json                 engine + config + inputs (+ chunk size) of the run
    OUTPUT/_work/chunk-00003.pages.gz     the chunk's front records (gzip JSON lines)
    OUTPUT/_work/chunk-00003.keys.gz      its URL entries (normalized URL, timestamp, md5, url)
    OUTPUT/_work/chunk-00003.json         "chunk 3 is done": its input files and counters
    OUTPUT/_work/chunk-00003.docs0.gz     its documents before the next corpus-wide stage …

Without ``--resume`` a stale ``_work`` is removed first. After the final step (stats.json
written) ``_work`` is deleted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from c4forge.errors import ConfigError
from c4forge.io import storage
from c4forge.io.inputs import InputFile
from c4forge.io.storage import dumps_pretty

WORK_DIR = "_work"
FORMAT = "c4forge.clean.progress"  # on-disk format name (kept: earlier runs resume)
FORMAT_VERSION = 1
# Inputs per chunk: a Common Crawl WET file (~100 MB of text, ~40,000 pages) is a chunk: the unit
# of the passes (its records, its decisions) and of --resume. Override with C4FORGE_CHUNK_FILES.
DEFAULT_CHUNK_FILES = 1
BEAM_DATA_SUFFIX = ".pages.gz"  # a chunk's front records, one gzip JSON-lines file (every engine)
# Counter namespace of the front's decisions (inputs skipped / processed): reported in the
# log, kept out of stats.json so a resumed run's stats equal an uninterrupted one's.
RESUME_NAMESPACE = "c4forge.resume"


@dataclass(frozen=True)
class Chunk:
    index: int
    files: tuple[InputFile, ...]

    @property
    def name(self) -> str:
        return f"chunk-{self.index:05d}"

    def describe(self) -> list[dict[str, Any]]:
        """Its files as recorded in ``_work``: path, size and (where known) version, so a
        rewritten input of the same size is not taken for the one whose work is recorded."""
        return [
            {"path": f.path, "size": f.size, **({"version": f.version} if f.version else {})}
            for f in self.files
        ]


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


def is_clean_work(root: str) -> bool:
    """True when ``root`` holds a clean run's ``_work`` (its job record names this format):
    the proof that the shard files beside it are an earlier clean run's, and that the folder
    may be removed."""
    try:
        record = storage.read_json_if_exists(storage.join(root, "job.json"))
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(record, dict) and record.get("format") == FORMAT


def changed_input(old: Any, new: list[list[dict[str, Any]]]) -> str | None:
    """The path of an input recorded in ``old`` (a job record's chunks) whose size or version
    differs in ``new``; None when none does."""
    seen = {f.get("path"): f for chunk in old or [] for f in chunk or [] if isinstance(f, dict)}
    for chunk in new:
        for f in chunk:
            before = seen.get(f["path"])
            if before is not None and before != f:
                return str(f["path"])
    return None


class WorkDir:
    """The ``_work`` folder of one output: job record, chunk data, chunk records.

    ``data_suffix`` names a chunk's data file: ``BEAM_DATA_SUFFIX`` (its front records, as the
    chunk passes write them on every engine); "" for a caller that only reads and writes the
    job and chunk records.
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
            changed = changed_input(existing.get("inputs"), record["inputs"])
            if changed is not None:
                raise ConfigError(
                    f"--resume: input {changed} changed since the interrupted run in {self.root} "
                    "(another size or modification time); run without --resume to start over"
                )
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
