"""``run(job) -> CleanResult``: `c4forge clean` for a program (``c4forge.commands``).

The driver prints its own summary as it goes (unless ``--quiet``), so the result's ``text()``
is empty; its figures are stats.json's, read back from the finished folder (a run served as
already complete returns the same result as the run that wrote it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from c4forge.clean.config import CleanJob

REQUESTS = (CleanJob,)


@dataclass(frozen=True)
class CleanResult:
    """A finished clean output: its folder and stats.json's content."""

    output: str
    stats: dict[str, Any]

    @property
    def stats_path(self) -> str:
        return _stats_path(self.output)

    @property
    def documents(self) -> dict[str, int]:
        """Documents written per output split (``train``, ``validation``; mC4: per language)."""
        return {split: o["documents"] for split, o in self.stats["outputs"].items()}

    @property
    def files(self) -> list[str]:
        """The document shards written, by file name, split after split."""
        return [f["file"] for o in self.stats["outputs"].values() for f in o["files"]]

    def text(self) -> str:
        return ""

    def fingerprint(self) -> str:
        """sha256 of stats.json: the counters, the shard checksums and the configuration."""
        from c4forge.io.storage import sha256

        return sha256(self.stats_path)


def run(job: CleanJob) -> CleanResult:
    """Clean ``job``'s inputs into ``job.output`` on the job's own engine (Beam's import-time
    log noise silenced, as the command line does); raises on failure."""
    from c4forge.clean.driver import run_clean
    from c4forge.engines.beam_options import quiet_beam_logging
    from c4forge.io import storage

    quiet_beam_logging()
    run_clean(job)
    return CleanResult(job.output, storage.read_json(_stats_path(job.output)))


def _stats_path(output: str) -> str:
    from c4forge.corpus.clean_docs import STATS_NAME
    from c4forge.io import storage

    return storage.join(output, STATS_NAME)
