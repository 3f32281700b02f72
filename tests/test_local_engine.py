"""The local engine: shuffles spilled to disk, a worker pool, shards merged from sorted runs.
Its output equals the Beam engine's (the byte-identity matrix is ``benchmarks/identity.py``);
here: small run records and buckets give the same bytes as the default ones, so the spill
paths (many records per run, runs split across shards, many buckets) are the ones exercised."""

from __future__ import annotations

from pathlib import Path

from clean_fixtures import DERIVED_WET

from c4forge.clean import output as clean_output
from c4forge.clean.config import CleanJob
from c4forge.clean.driver import run_clean
from c4forge.engines import local


def _run(out: Path, workers: int, **kw) -> dict[str, bytes]:
    job = CleanJob((DERIVED_WET,), str(out), quiet=True, engine="local", workers=workers, **kw)
    assert run_clean(job, local.LocalEngine(job)) == 0
    return {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.is_file()}


def test_tiny_runs_and_buckets_give_the_same_bytes(tmp_path: Path, monkeypatch) -> None:
    default = _run(tmp_path / "default", 1, train_shards=3)
    monkeypatch.setattr(local, "MIN_BUCKETS", 64)
    monkeypatch.setattr(local, "BUCKET_BYTES", 1 << 10)
    monkeypatch.setattr(local, "SPILL_ITEMS", 7)  # many runs per spill file …
    monkeypatch.setattr(local, "SPILL_BYTES", 600)  # … of a few items each, after the first
    monkeypatch.setattr(local, "MIN_SPILL_ITEMS", 3)
    monkeypatch.setattr(local, "RUN_FANOUT", 2)  # merged over several levels
    monkeypatch.setattr(clean_output, "RUN_BATCH", 2)  # many pickle records per sorted run
    spilled = _run(tmp_path / "spilled", 2, train_shards=3)
    assert spilled == default
    assert sum(n.startswith("c4-train") for n in default) == 3
    assert any(n.startswith("c4-train") for n in default)


def test_bucket_count_is_not_bounded_by_the_open_file_limit(tmp_path: Path) -> None:
    """A map task writes one spill file whatever the bucket count: 2,000 buckets run under an
    open-file limit of 128 (a laptop's default is 256 to 1,024; the bucket count grows with the
    bytes shuffled)."""
    import subprocess
    import sys

    script = f"""
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (128, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
from c4forge.clean import output as clean_output
from c4forge.clean.config import CleanJob
from c4forge.clean.driver import run_clean
from c4forge.engines import local
local.MIN_BUCKETS = 2000
job = CleanJob(({str(DERIVED_WET)!r},), {str(tmp_path / "out")!r}, quiet=True, engine="local",
               workers=2)
raise SystemExit(run_clean(job, local.LocalEngine(job)))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    reference = _run(tmp_path / "reference", 1)
    out = {p.name: p.read_bytes() for p in sorted((tmp_path / "out").iterdir()) if p.is_file()}
    assert out == reference


def test_the_shards_of_a_split_take_different_buckets() -> None:
    """Output-shard keys (split, index, count) spread over the buckets, so their writers run on
    different workers; a hash of the whole tuple put both train shards of a two-shard split in
    one bucket (one worker wrote them one after the other)."""
    for count in (2, 3, 8, 16):
        for split in ("train", "validation", "en.noblocklist"):
            keys = [(split, i, count) for i in range(count)]
            buckets = {local.bucket_of(k, local.MIN_BUCKETS) for k in keys}
            assert len(buckets) == count, (split, count)
    # other keys keep their hash (strings, bytes) or round-robin (chunk indexes)
    assert local.bucket_of(7, 16) == 7
    assert local.bucket_of("abc", 16) == local.bucket_of("abc", 16)


def test_a_spill_of_many_runs_keeps_one_region_per_bucket_in_write_order(
    tmp_path: Path, monkeypatch
) -> None:
    """A map task that flushes many runs merges them (several levels here) into one region per
    bucket: each bucket reads back its items in the order they were put, no run file is left,
    and the index is one offset per bucket whatever the number of runs."""
    import random

    monkeypatch.setattr(local, "SPILL_ITEMS", 5)
    monkeypatch.setattr(local, "SPILL_BYTES", 300)
    monkeypatch.setattr(local, "MIN_SPILL_ITEMS", 2)
    monkeypatch.setattr(local, "RUN_FANOUT", 3)
    levels: list[int] = []
    merge = local._Runs._merge

    def counted(self, runs, dest, level):
        levels.append(level)
        return merge(self, runs, dest, level)

    monkeypatch.setattr(local._Runs, "_merge", counted)
    rng = random.Random(0)
    items = [(rng.randrange(1 << 40), bytes(rng.randrange(40))) for _ in range(2000)]
    items += [(b"k%d" % rng.randrange(50), i) for i in range(500)]
    source = tmp_path / "in"
    local.write_items(str(source), items, batch_size=97)
    spill = str(tmp_path / "spill")
    buckets = 13
    local._scatter_task([str(source)], spill, buckets, False, None)
    assert max(levels) >= 2  # runs merged into merged runs
    index = local.spill_index(spill)
    assert len(index) == buckets + 1 and index[-1] == Path(spill).stat().st_size
    for b in range(buckets):
        region = [(spill, int(index[b]), int(index[b + 1] - index[b]))]
        want = [item for item in items if local.bucket_of(item[0], buckets) == b]
        assert list(local.read_bucket(region)) == want
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in", "spill", "spill.idx"]
