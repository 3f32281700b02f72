"""``c4forge clean … --estimate`` the cost of a run before it starts, measured by
running the plan on a sample. On an input smaller than the sample the sample is the whole
input, so the projection must equal what a real run of it counts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from clean_fixtures import DERIVED_WET


def _clean(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "c4forge", "clean", *args], capture_output=True, text=True
    )


def test_estimate_writes_only_its_file_and_projects_a_whole_small_input(tmp_path: Path) -> None:
    out = tmp_path / "estimate"
    done = _clean(DERIVED_WET, "-o", str(out), "--estimate", "--workers", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert sorted(p.name for p in out.iterdir()) == ["estimate.json"]
    est = json.loads((out / "estimate.json").read_text())
    assert "c4forge clean --estimate" in done.stderr and "GB shuffled" in done.stderr
    assert "GiB on 2 worker(s)" in done.stderr  # peaks are 2**30 bytes, and say so

    real = tmp_path / "real"
    done = _clean(DERIVED_WET, "-o", str(real), "--quiet", "--engine", "local", "--workers", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    stats = json.loads((real / "stats.json").read_text())
    i = est["input"]
    # the whole file fits in the sample: pages and documents are the real run's, exactly
    size = Path(DERIVED_WET).stat().st_size
    assert i["compressed_bytes"] == est["sample"]["compressed_bytes"] == size
    assert i["pages"] == stats["counters"]["wet"]["pages"]
    assert i["documents_out"] == stats["totals"]["documents_out"]
    # every stage of the plan that shuffles is measured; memory from the sampled process tree
    for stage in ("wet", "url_dedup", "dedup", "output"):
        assert stage in est["stages"], sorted(est["stages"])
    assert est["stages"]["dedup"]["shuffle_bytes_per_1000_pages"] > 0
    assert i["shuffle_bytes"] > 0 and est["sample"]["cpu_s"] > 0
    assert i["workers"] == 2
    assert i["memory_sample_tree_gib"] > 0.05  # a driver and two workers with c4forge imported
    assert len(i["memory_cuts"]) == 2 and i["memory_gib_per_chunk_mb"] >= 0
    # the whole file is in both cuts: nothing to extrapolate
    assert i["memory_cuts"][0]["bytes_per_file"] == i["memory_cuts"][1]["bytes_per_file"] == size
    assert abs(i["peak_memory_gib"] - i["memory_sample_tree_gib"]) <= 0.006
    # GiB and decimal GB, each named for what it is
    assert abs(i["peak_memory_gb"] - i["peak_memory_gib"] * 2**30 / 1e9) <= 0.006


def test_cuts_of_whole_files_measure_no_slope() -> None:
    """Both cuts took the same whole files: their peaks differ by sampling noise only, so no
    slope is read from them (one through a zero gap projected terabytes)."""
    from c4forge.clean.estimate import DEFAULT_PEAK_PER_CHUNK_BYTE, memory_slope

    mb = 2**20
    assert memory_slope([1_066_184, 1_066_184], [300 * mb, 310 * mb]) == DEFAULT_PEAK_PER_CHUNK_BYTE
    assert memory_slope([4_000_000, 16_000_000], [500 * mb, 560 * mb]) == 60 * mb / 12_000_000
    assert memory_slope([4_000_000, 16_000_000], [500 * mb, 490 * mb]) == 0.0


def test_estimate_of_the_bundled_sample_is_near_its_measured_peak(tmp_path: Path) -> None:
    """The three bundled WET files (3.2 MB, each smaller than the sample): the projected peak
    is near the peak PSS of the real command's process tree, measured here."""
    import shutil

    from c4forge import proctree
    from c4forge.samples import demo_inputs

    if not proctree.available():
        import pytest

        pytest.skip("no /proc to measure the real run's memory")
    wet = tmp_path / "wet"
    wet.mkdir()
    for path in demo_inputs(str(tmp_path / "made")):
        shutil.copy(path, wet)
    sizes = sorted(p.stat().st_size for p in wet.iterdir())
    assert len(sizes) == 3 and sizes[0] < sizes[-1]  # files of unequal size, all under 16 MB
    out = tmp_path / "estimate"
    done = _clean(str(wet), "-o", str(out), "--estimate", "--workers", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    i = json.loads((out / "estimate.json").read_text())["input"]
    assert [c["bytes_per_file"] for c in i["memory_cuts"]] == [sizes[-1], sizes[-1]]
    assert i["startup_cpu_s"] > 0 and i["cpu_s"] > i["startup_cpu_s"]

    real = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "c4forge",
            "clean",
            str(wet),
            "-o",
            str(tmp_path / "real"),
            "--quiet",
            "--workers",
            "2",
        ]
    )
    with proctree.PeakSampler(real.pid, interval=0.05) as sampler:
        assert real.wait() == 0
    measured = sampler.peak / 2**30
    assert 0.7 * measured <= i["peak_memory_gib"] <= 1.3 * measured, (i, measured)


def _cut(bytes_per_file: int, files: int, pages: int, peak_mib: int) -> object:
    from c4forge.clean.estimate import MemoryCut

    return MemoryCut(bytes_per_file, files, pages, peak_mib * 2**20, 100 * 2**20)


def test_projected_peak_grows_with_the_files_and_pages_beyond_the_cut() -> None:
    """What the sample cannot hold: the output writers' buffers grow with the number of input
    files, a worker's peak with the pages it goes through (to a plateau); an input that is
    the cut itself is its measured peak."""
    from c4forge.clean.estimate import (
        VOLUME_GROWTH_BYTES,
        VOLUME_PLATEAU_PAGES,
        project_peak,
        volume_growth,
    )
    from c4forge.clean.output import RUN_BATCH

    cuts = [_cut(4_000_000, 4, 6_000, 330), _cut(16_000_000, 4, 24_000, 350)]
    kw = {"largest": 16_000_000, "workers": 2, "doc_bytes": 1_800.0}
    same = project_peak(cuts, files=4, pages=24_000, **kw)
    assert same["total"] == 350 * 2**20 and same["files"] == same["volume"] == same["chunk"] == 0
    per_run = RUN_BATCH * (1_800 + 200)
    by_files = [project_peak(cuts, files=n, pages=24_000, **kw)["files"] for n in (4, 8, 16, 32)]
    assert by_files == [2 * per_run * (n - 4) for n in (4, 8, 16, 32)]
    grown = [
        project_peak(cuts, files=4, pages=p, **kw)["volume"]
        for p in (24_000, 48_000, 2 * VOLUME_PLATEAU_PAGES)
    ]
    assert grown[0] == 0 < grown[1] < grown[2] == 2 * (VOLUME_GROWTH_BYTES - volume_growth(12_000))
    plateau = project_peak(cuts, files=4, pages=4 * VOLUME_PLATEAU_PAGES, **kw)["volume"]
    assert plateau == grown[2]  # a worker past the plateau grows no more
    big = project_peak(cuts, files=32, pages=1_000_000, **{**kw, "largest": 80_000_000})
    assert big["total"] == sum(big[k] for k in ("measured", "chunk", "files", "buckets", "volume"))
    assert big["chunk"] > 0 and big["buckets"] == 0  # no shuffle measured: no bucket growth
    # a shuffle of 500 bytes a page: 16 buckets of 0.75 MB at the cut, capped at 4 MiB
    from c4forge.engines.local import BUCKET_BYTES

    shuffled = project_peak(cuts, files=4, pages=1_000_000, shuffle_per_page=500.0, **kw)
    assert shuffled["buckets"] == 2 * 5 * (BUCKET_BYTES - 500.0 * 24_000 / 16)


def test_estimate_of_copies_grows_with_their_number(tmp_path: Path) -> None:
    """One real WET file, then six copies of it: the sample (four of them) is the same, but the
    projection for six files holds the writers' buffers of six runs and the pages of six."""
    import shutil

    runs = {}
    for n in (1, 6):
        wet = tmp_path / f"wet{n}"
        wet.mkdir()
        for k in range(n):
            shutil.copy(DERIVED_WET, wet / f"copy-{k}.warc.wet.gz")
        out = tmp_path / f"estimate{n}"
        done = _clean(str(wet), "-o", str(out), "--estimate", "--workers", "2")
        assert done.returncode == 0, done.stderr[-2000:]
        runs[n] = json.loads((out / "estimate.json").read_text())["input"]
    one, six = runs[1], runs[6]
    assert one["memory_parts_gib"]["files"] == one["memory_parts_gib"]["volume"] == 0
    assert [c["files"] for c in six["memory_cuts"]] == [4, 4]
    assert six["memory_parts_gib"]["files"] > 0 and six["memory_parts_gib"]["buckets"] >= 0
    # the pages of six files, two workers, beyond the cut's pages of four: the model's ramp
    from c4forge.clean.estimate import volume_growth

    cut_pages = six["memory_cuts"][-1]["pages"]
    ramp = 2 * (volume_growth(six["pages"] / 2) - volume_growth(cut_pages / 2)) / 2**30
    assert six["memory_parts_gib"]["volume"] > 0
    assert abs(six["memory_parts_gib"]["volume"] - ramp) <= 1e-4
    assert 0 < six["memory_cuts"][-1]["driver_gib"] < six["memory_cuts"][-1]["tree_gib"]
    assert six["pages"] == 6 * one["pages"]
    parts = six["memory_parts_gib"]
    assert parts["total"] > parts["measured"]
    assert abs(six["peak_memory_gib"] - parts["total"]) <= 0.006  # rounded to 0.01 GiB
