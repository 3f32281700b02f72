"""The local engine (issue 19): shuffles spilled to disk, a worker pool, shards written by an
external merge sort. Its output equals the Beam engine's (the byte-identity matrix is
``benchmarks/identity.py``); here: small runs and buckets give the same bytes as the default
ones, so the spill paths (many sorted runs per shard, many buckets) are the ones exercised."""

from __future__ import annotations

from pathlib import Path

from clean_fixtures import DERIVED_WET

from c4forge.clean.config import CleanJob
from c4forge.clean.driver import run_clean
from c4forge.engines import local


def _run(out: Path, workers: int) -> dict[str, bytes]:
    job = CleanJob((DERIVED_WET,), str(out), quiet=True, engine="local", workers=workers)
    assert run_clean(job, local.LocalEngine(job)) == 0
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def test_tiny_runs_and_buckets_give_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    default = _run(tmp_path / "default", 1)
    monkeypatch.setattr(local, "RUN_DOCS", 3)  # every shard merged from many sorted runs
    monkeypatch.setattr(local, "MIN_BUCKETS", 64)
    monkeypatch.setattr(local, "BUCKET_BYTES", 1 << 10)
    spilled = _run(tmp_path / "spilled", 2)
    assert spilled == default
    assert any(n.startswith("c4-train") for n in default)
