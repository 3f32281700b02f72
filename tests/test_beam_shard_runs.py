"""Beam writes a shard from sorted runs (issue 19): documents are grouped by (shard, run) into
runs of ``RUN_DOCS``, written to files, and merged into the shard, so no GroupByKey group is a
whole shard (a ~600 MB element at 356,000 documents). Tiny runs must give the same bytes as
one run per shard, in both output formats, and leave no run file behind."""

from __future__ import annotations

from pathlib import Path

import pytest
from clean_fixtures import DERIVED_WET

from c4forge.clean.config import CleanJob
from c4forge.clean.driver import run_clean
from c4forge.engines import beam as beam_engine


def _run(out: Path, fmt: str) -> dict[str, bytes]:
    job = CleanJob(
        (DERIVED_WET,), str(out), quiet=True, engine="beam", workers=1, format=fmt,
        train_shards=2,
    )
    assert run_clean(job) == 0
    assert not (out / "_work").exists()
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_tiny_runs_give_the_same_shards(tmp_path: Path, monkeypatch, fmt: str) -> None:
    whole = _run(tmp_path / "whole", fmt)
    monkeypatch.setattr(beam_engine, "RUN_DOCS", 3)  # ~10 sorted runs merged per shard
    runs = _run(tmp_path / "runs", fmt)
    assert runs == whole
    assert sum(n.startswith("c4-train") for n in whole) == 2


def test_runs_spread_a_shard_by_other_bits_than_the_shard() -> None:
    """Two shards, runs of 3 over 60 documents: every run of a shard gets documents (a run
    chosen by the md5's low bits would leave half of them empty next to the shard's parity)."""
    from c4forge.io.storage import md5_hex

    docs = [(md5_hex(f"https://e.com/{i}"), f"https://e.com/{i}", b"") for i in range(60)]
    shards = {"train": 2}
    used: dict[int, set[int]] = {0: set(), 1: set()}
    for d in docs:
        (key, shard, run), _ = beam_engine._run_of(
            (("train", int(d[0], 16) % 2), d), {"train": 60}, shards, 3
        )
        used[shard].add(run)
    assert all(len(r) >= 8 for r in used.values()), used  # 10 runs per shard, ≥ 8 used
