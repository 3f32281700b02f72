"""Per-input progress of a long `clean` job, so a killed run can be resumed (``--resume``).

Why chunks of inputs and not single pages: the corpus-wide steps (URL dedup, span dedup,
near-dedup) need every page at once, so they cannot be resumed piecemeal. What *is* per input
is the expensive front of the job: parsing, the length cap and the line/page rules (Punkt).
The engine runs that front one chunk of input files at a time and persists each chunk's
post-clean records under ``OUTPUT/_work/``; then it runs URL dedup → dedup → langid → … over
all persisted chunks in a final step. The clean rules are per page, so cleaning before URL dedup
changes no decision; the clean counters are kept per page and counted only for the URL-dedup
survivors, so stats.json equals an uninterrupted run's.

Layout (all records written atomically, a chunk's record only after its data is complete)::

    OUTPUT/_work/job.json                 config + inputs + chunk size of the run
    OUTPUT/_work/chunk-00003/             the engine's data for chunk 3 (e.g. Spark pickle files)
    OUTPUT/_work/chunk-00003.json         "chunk 3 is done": its input files and counters

``--resume`` skips every chunk whose record exists and names the same input files; any other
leftover (a chunk cut mid-write) is removed and redone. Without ``--resume`` a stale ``_work``
is removed first. After the final step ``_work`` is deleted.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from c4forge.errors import ConfigError
from c4forge.fsutil import dumps_pretty
from c4forge.pipeline.clean_output import atomic_output, join_path
from c4forge.pipeline.inputs import InputFile

WORK_DIR = "_work"
FORMAT = "c4forge.clean.progress"
FORMAT_VERSION = 1
# Inputs per chunk: a Common Crawl WET file is ~100 MB, so 8 files keep two cores busy for a
# few minutes and lose at most that much work on a kill. Override with C4FORGE_CHUNK_FILES.
DEFAULT_CHUNK_FILES = 8


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


def _is_remote(path: str) -> bool:
    return "://" in path and not path.startswith("file://")


class WorkDir:
    """The ``_work`` folder of one output: job record, chunk data folders, chunk records."""

    def __init__(self, output: str) -> None:
        self.output = output
        self.root = join_path(output, WORK_DIR)

    # -- paths ---------------------------------------------------------------------------------
    def data_path(self, chunk: Chunk) -> str:
        return join_path(self.root, chunk.name)

    def record_path(self, chunk: Chunk) -> str:
        return join_path(self.root, chunk.name + ".json")

    @property
    def job_path(self) -> str:
        return join_path(self.root, "job.json")

    # -- small file helpers (local or Beam filesystems) ----------------------------------------
    def _read_json(self, path: str) -> Any | None:
        try:
            if _is_remote(path):
                from apache_beam.io.filesystems import FileSystems

                if not FileSystems.exists(path):
                    return None
                with FileSystems.open(path) as f:
                    return json.loads(f.read())
            with open(path, encoding="utf-8") as f:
                return json.load(f)
        except FileNotFoundError:
            return None
        except json.JSONDecodeError:
            return None  # a torn record cannot exist (atomic writes); treat as "not done"

    def _write_json(self, path: str, obj: Any) -> None:
        with atomic_output(path) as f:
            f.write(dumps_pretty(obj).encode("utf-8"))

    def remove(self, path: str | None = None) -> None:
        target = path or self.root
        if _is_remote(target):
            from apache_beam.io.filesystems import FileSystems

            if FileSystems.exists(target):
                FileSystems.delete([target])
            return
        if os.path.isdir(target):
            shutil.rmtree(target)
        elif os.path.exists(target):
            os.remove(target)

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
