"""`c4forge clean INPUT… -o OUT --estimate`: the cost of a run before it starts.

Why: a crawl is ~90,000 WET files; a user should know the CPU-hours, shuffle volume and memory
of a job before paying for it. The plan itself is run, so every stage (and every variant's
extra stages) is measured, not modelled.

How: after a warm-up on a sliver of one input (model loads are a per-worker start-up cost), a
deterministic sample, the first ``--estimate-mb`` MB (compressed) of up to
``SAMPLE_FILES`` input files evenly spaced in sorted order, is copied to a temporary folder (a
cut gzip stream ends in a counted ``truncated_file``, one page at most is lost). The job runs
on it with the local engine, one worker, in this process: CPU seconds and output bytes per
stage, bytes scattered by each shuffle. The whole input is projected by its compressed size:
pages = sample pages × input bytes / sample bytes; CPU and shuffle bytes per page stay as
measured. A run's fixed CPU (interpreter, imports, worker processes, model loads) is added
once: what the first memory run below spent beyond the warm in-process run of the same
sample (it dominates inputs of a few MB and vanishes at crawl scale).

Memory is measured, not modelled from the in-process run (a driver that forks W workers shares
its pages with them; one process does not): the sample runs again as the real command would,
a fresh interpreter (``spawn``) with the local engine and the job's worker count, and the PSS
of that process tree is sampled (``c4forge.proctree``, as ``benchmarks/scale.py`` measures a
run). It runs twice, on cuts of ``MEMORY_CUTS`` times the sample per file, because a worker's
memory does not grow with the corpus on the local engine (it holds one chunk, one shuffle
bucket or one sorted run) but does grow with its chunk, one input file: the peak is
extrapolated linearly in the cut size to the largest input file (measured on the scale
benchmark: 4 MB cuts 0.50 GB, 32 MB cuts 0.60 GB, whole 80 MB files 0.79 GB). The larger cut
also has larger shuffle buckets and sorted runs, so the slope covers their growth up to full
size (``BUCKET_BYTES``, ``RUN_DOCS``) too. A cut's size is the most it took from one file
(a worker holds one chunk); a file smaller than the sample is whole in both cuts, which then
measure no slope (``memory_slope``).

What the sample's files cannot show is added (``project_peak``): the output writers merge one
sorted run per input file (their buffers grow with the file count), a shuffle's buckets grow
with the pages up to the engine's cap, and a worker's peak rises with the pages it goes
through, to a plateau (measured: 16 files of the 100k-page corpus peaked 0.05–0.16 GiB
above 4 of them, each file the same size). Every peak is in GiB (2**30 bytes)
and named so; ``peak_memory_gb`` is the same peak in decimal GB, under format 1's name.
Only ``OUT/estimate.json`` is written.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import tempfile
import time
from typing import Any, NamedTuple

from c4forge.corpus.stages import READ_STAGE
from c4forge.io import storage

ESTIMATE_NAME = "estimate.json"
SAMPLE_FILES = 4
DEFAULT_SAMPLE_MB = 16.0
DEFAULT_PRICE = (
    0.04  # USD per vCPU-hour (on-demand cloud order of magnitude; --price-per-vcpu-hour)
)
CRAWL_WORKERS = (1, 2, 16, 64, 450)
MEMORY_CUTS = (1, 4)  # the memory runs: the sample, and cuts 4× as large of the same files
MIN_CUT_GAP = 0.5  # the larger cut must exceed the smaller by half to measure a slope
# Peak bytes per byte of chunk where the cuts cannot measure it: the scale benchmark's
# 0.10 GB from 4 MB to 32 MB cuts (RESULTS §11).
DEFAULT_PEAK_PER_CHUNK_BYTE = 0.10 * 2**30 / 28e6
# What a worker gains with the pages it goes through, whatever its chunk: measured on the
# 100,000-page corpus's files (16 MB each, 2 workers, RESULTS §24), the tree's peak was 0.359
# GiB through 4 of them, 0.373 through 8 and 0.411 / 0.468 / 0.514 (three runs) through all
# 16, the workers' shares rising from 0.13 to 0.15–0.18 GiB while the driver's stayed at
# 0.10–0.12; at 250k and 1M pages (RESULTS §11) it no longer grew. What the files and
# buckets terms of ``project_peak`` do not explain of it, as a linear ramp to a plateau: up to
# ``VOLUME_GROWTH_BYTES`` per worker, reached at ``VOLUME_PLATEAU_PAGES`` pages per worker;
# the sample's own share is subtracted (it was measured).
VOLUME_GROWTH_BYTES = int(0.044 * 2**30)
VOLUME_PLATEAU_PAGES = 50_000
# A packed document in memory beyond its compressed text: the tuple, the URL and md5 strings.
DOC_OVERHEAD_BYTES = 200
BUCKET_MEMORY = 5  # a reducing worker holds ~5× its bucket's pickled bytes (engines/local.py)


class Cut(NamedTuple):
    """A sample copied locally: its files, the bytes taken, the most taken from one file."""

    paths: list[str]
    taken: int
    largest: int


def _sample(files: list[Any], sample_bytes: int, directory: str, prefix: str = "sample") -> Cut:
    """The first bytes of up to ``SAMPLE_FILES`` evenly spaced inputs, copied locally."""
    step = max(1, len(files) // SAMPLE_FILES)
    picked = files[::step][:SAMPLE_FILES]
    per_file = max(1, sample_bytes // len(picked))
    paths, taken, largest = [], 0, 0
    for i, f in enumerate(picked):
        with storage.open_read(f.path) as src:
            data = src.read(per_file)
        name = f.path.rstrip("/").rsplit("/", 1)[-1]
        path = f"{directory}/{prefix}-{i:02d}-{name}"
        with open(path, "wb") as out:
            out.write(data)
        paths.append(path)
        taken += len(data)
        largest = max(largest, len(data))
    return Cut(paths, taken, largest)


def memory_slope(cuts: list[int], peaks: list[int]) -> float:
    """Bytes of peak per byte of the largest chunk, from the two memory cuts.

    Why the gap test: a cut's size is the most it took from one file, and a file smaller than
    the sample is taken whole by both cuts; two runs of the same bytes differ only by PSS
    sampling noise, and a slope through them (once divided by a one-byte gap) projected
    8,678 GB for 3.2 MB of WET. Cuts closer than ``MIN_CUT_GAP`` of the smaller one leave the
    slope unmeasured: the benchmark's figure (``DEFAULT_PEAK_PER_CHUNK_BYTE``) stands in,
    used only where the largest input file is longer than the cut."""
    gap = cuts[-1] - cuts[0]
    if gap < MIN_CUT_GAP * max(cuts[0], 1):
        return DEFAULT_PEAK_PER_CHUNK_BYTE
    return max(0.0, (peaks[-1] - peaks[0]) / gap)  # never negative: sampling noise


def volume_growth(pages_per_worker: float) -> float:
    """Bytes a worker's peak gains after ``pages_per_worker`` pages (the ramp to its plateau)."""
    return VOLUME_GROWTH_BYTES * min(1.0, max(0.0, pages_per_worker) / VOLUME_PLATEAU_PAGES)


class MemoryCut(NamedTuple):
    """One memory run: the most it took from one file, its files and pages, and the peak PSS
    of its process tree (with the driver's share at that sample)."""

    bytes_per_file: int
    files: int
    pages: int
    peak: int
    driver: int


def bucket_bytes(shuffled: float) -> float:
    """Pickled bytes of one bucket of a shuffle of ``shuffled`` bytes on the local engine: the
    bucket count follows the bytes (``BUCKET_BYTES`` each, at least ``MIN_BUCKETS``), so a
    bucket grows with the input until it reaches ``BUCKET_BYTES``."""
    from c4forge.engines.local import BUCKET_BYTES, MIN_BUCKETS

    return min(float(BUCKET_BYTES), shuffled / MIN_BUCKETS)


def project_peak(
    cuts: list[MemoryCut],
    *,
    largest: int,
    files: int,
    pages: float,
    workers: int,
    doc_bytes: float,
    shuffle_per_page: float = 0.0,
) -> dict[str, float]:
    """The peak PSS of the whole run's process tree (bytes), from the memory runs, as the sum of
    what was measured and four terms for what the sample cannot hold:

    * ``chunk``: a worker holds one chunk (one input file) in the read and the passes over it,
      so the peak grows with the largest file (``memory_slope`` between the cuts);
    * ``files``: each shard's writer merges one sorted run per chunk, holding ``RUN_BATCH``
      packed documents of each (``clean.output.write_run_shard``), so with W workers writing
      at once the output write grows with the number of input files;
    * ``buckets``: a reducing worker holds one bucket of the largest shuffle
      (``shuffle_per_page``: its pickled bytes per page), whose size grows with the pages
      until the engine's cap (``bucket_bytes``);
    * ``volume``: beyond these, a worker's peak rises with the pages it has gone through, to
      a plateau (``volume_growth``), measured on the scale benchmark.

    Each term counts only what the whole input has beyond the largest cut, so an input that
    fits in the sample is its measured peak."""
    from c4forge.clean.output import RUN_BATCH

    big = cuts[-1]
    chunk = memory_slope([c.bytes_per_file for c in cuts], [c.peak for c in cuts]) * max(
        0, largest - big.bytes_per_file
    )
    per_run = RUN_BATCH * (doc_bytes + DOC_OVERHEAD_BYTES)
    files_term = min(workers, max(files, 1)) * per_run * max(0, files - big.files)
    buckets = (
        workers
        * BUCKET_MEMORY
        * max(
            0.0,
            bucket_bytes(shuffle_per_page * pages) - bucket_bytes(shuffle_per_page * big.pages),
        )
    )
    volume = workers * max(0.0, volume_growth(pages / workers) - volume_growth(big.pages / workers))
    return {
        "measured": float(big.peak),
        "driver": float(big.driver),
        "chunk": float(chunk),
        "files": float(files_term),
        "buckets": float(buckets),
        "volume": float(volume),
        "total": float(big.peak + chunk + files_term + buckets + volume),
    }


def _sample_job(job: Any, paths: list[str], output: str, workers: int) -> Any:
    """``job`` on the sample files, on the local engine, quiet, into a scratch folder."""
    return job.replace(
        inputs=tuple(paths),
        output=output,
        engine="local",
        quiet=True,
        resume=False,
        report=False,
        overwrite=True,
        workers=workers,
    )


def _run_local(job: Any, workers: int) -> Any:
    """Run ``job`` on the local engine; returns the (closed) engine with its measurements.
    Also the target of the spawned memory run."""
    from c4forge.clean.driver import run_clean
    from c4forge.engines.local import LocalEngine

    engine = LocalEngine(job, workers=workers)
    try:
        run_clean(job, engine)
    finally:
        engine.close()
    return engine


def _run_sample(job: Any, paths: list[str], output: str) -> Any:
    return _run_local(_sample_job(job, paths, output, 1), 1)


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _tree_peak(
    job: Any, paths: list[str], output: str, workers: int
) -> tuple[int | None, int, float]:
    """Peak PSS (bytes) of the local engine's process tree on the sample, or None where
    /proc cannot be read (then the in-process ``ru_maxrss`` model is used); the driver's PSS
    at that sample; and the CPU seconds of that tree: a run as the command makes it, start-up
    (interpreter, imports, worker processes, model loads) included."""
    import multiprocessing

    from c4forge import proctree

    if not proctree.available():
        return None, 0, 0.0
    child = multiprocessing.get_context("spawn").Process(
        target=_run_local, args=(_sample_job(job, paths, output, workers), workers)
    )
    cpu0 = _children_cpu()
    child.start()
    with proctree.PeakSampler(child.pid) as sampler:
        child.join()
    if child.exitcode != 0:
        raise RuntimeError(f"--estimate: the memory run of the sample failed ({child.exitcode})")
    return sampler.peak, sampler.root_at_peak, _children_cpu() - cpu0


def _doc_bytes(output: str, documents: int) -> float:
    """Compressed bytes per document of a finished sample run (its shard files): the size of
    a packed document's text, near enough (both are deflate of the document)."""
    from c4forge.clean.output import list_shard_files

    size = sum(os.path.getsize(os.path.join(output, n)) for n in list_shard_files(output))
    return size / max(documents, 1)


def estimate(job: Any, sample_mb: float = DEFAULT_SAMPLE_MB, price: float = DEFAULT_PRICE) -> dict:
    """Run the plan on a sample of ``job``'s inputs; the projection for all of them."""
    from c4forge.io.inputs import resolve_inputs

    files = resolve_inputs(list(job.inputs), job.input_format)
    total = sum(f.size for f in files)
    with tempfile.TemporaryDirectory(prefix="c4forge-estimate-") as tmp:
        # a warm-up on a sliver first: model loads (Punkt, langdetect, numba) are a per-worker
        # start-up cost, not a per-page one, so the measured run below is warm
        warm = _sample(files[:1], 200_000, f"{tmp}", prefix="warm")
        _run_sample(job, warm.paths, f"{tmp}/warm-out")
        sample = _sample(files, int(sample_mb * 1e6), tmp)
        paths, sampled = sample.paths, sample.taken
        cpu0 = time.process_time()
        engine = _run_sample(job, paths, f"{tmp}/out")
        cpu = time.process_time() - cpu0
        stats = json.loads(open(f"{tmp}/out/stats.json").read())
        workers = job.workers or os.cpu_count() or 1
        doc_bytes = _doc_bytes(f"{tmp}/out", stats["totals"]["documents_out"])
        cuts, peaks, memory_cuts, tree_cpu = [], [], [], []
        for factor in MEMORY_CUTS:
            cut = (
                sample
                if factor == 1
                else _sample(files, int(sample_mb * 1e6) * factor, tmp, prefix=f"memory{factor}")
            )
            cuts.append(cut.largest)
            out = f"{tmp}/memory{factor}-out"
            found, driver, used = _tree_peak(job, cut.paths, out, workers)
            peaks.append(found)
            tree_cpu.append(used)
            if found is not None:
                cut_pages = json.loads(open(f"{out}/stats.json").read())["counters"][READ_STAGE][
                    "pages"
                ]
                memory_cuts.append(MemoryCut(cut.largest, len(cut.paths), cut_pages, found, driver))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    largest = max((f.size for f in files), default=0)
    tree_peak = peaks[-1]
    # a run's fixed CPU (interpreter, imports, workers, model loads): what the memory run of
    # the sample, started as the command starts, spent beyond the warm in-process run of it
    startup_cpu = max(0.0, tree_cpu[0] - cpu)
    pages = stats["counters"][READ_STAGE]["pages"]
    scale = total / max(sampled, 1)
    parts: dict[str, float] = {}
    if tree_peak is None or peaks[0] is None:  # no /proc: a driver plus W workers, each one run
        by_workers = {str(w): (w + 1) * peak for w in CRAWL_WORKERS[:2]}
        projected = (workers + 1) * peak
        per_mb = 0.0
        method = "in-process ru_maxrss × (workers + 1)"
    else:
        # per compressed MB of the largest chunk, from the two cuts
        per_mb = memory_slope(cuts, peaks) * 1e6
        parts = project_peak(
            memory_cuts,
            largest=largest,
            files=len(files),
            pages=pages * scale,
            workers=workers,
            doc_bytes=doc_bytes,
            shuffle_per_page=max(engine.shuffle_bytes.values(), default=0) / max(pages, 1),
        )
        projected = parts["total"]
        by_workers = {str(workers): projected}
        method = (
            "PSS of the local engine's process tree on two cuts of the sample, extrapolated "
            "linearly to the largest input file, plus the output writers' buffers per input "
            "file, the shuffle buckets' growth and a worker's growth with the pages it goes "
            "through"
        )
    per_k = 1000.0 / max(pages, 1)
    stages = {}
    for stage in sorted(set(engine.seconds) | set(engine.shuffle_bytes) | set(engine.out_bytes)):
        stages[stage] = {
            "cpu_s_per_1000_pages": round(engine.seconds.get(stage, 0.0) * per_k, 3),
            "bytes_out_per_1000_pages": round(engine.out_bytes.get(stage, 0) * per_k),
            "shuffle_bytes_per_1000_pages": round(engine.shuffle_bytes.get(stage, 0) * per_k),
        }
    total_pages = pages * scale
    cpu_s = startup_cpu + cpu * scale
    cpu_hours = cpu_s / 3600
    shuffle = sum(engine.shuffle_bytes.values()) * scale
    return {
        "format": "c4forge.clean.estimate",
        "format_version": 2,
        "config": job.record(),
        "sample": {
            "files": len(paths),
            "compressed_bytes": sampled,
            "pages": pages,
            "documents_out": stats["totals"]["documents_out"],
            "cpu_s": round(cpu, 2),
        },
        "stages": stages,
        "input": {
            "files": len(files),
            "compressed_bytes": total,
            "largest_file_bytes": largest,
            "pages": round(total_pages),
            "cpu_hours": round(cpu_hours, 3),
            "cpu_s": round(cpu_s, 1),
            "startup_cpu_s": round(startup_cpu, 1),
            "shuffle_gb": round(shuffle / 1e9, 3),
            "shuffle_bytes": round(shuffle),
            "documents_out": round(stats["totals"]["documents_out"] * scale),
            "peak_memory_per_worker_gib": _gib(peak, 2),
            "workers": workers,
            "peak_memory_gib": _gib(projected, 2),
            "peak_memory_gb": round(projected / 1e9, 2),  # decimal GB, as format 1 named it
            "peak_memory_gib_by_workers": {w: _gib(v, 2) for w, v in by_workers.items()},
            "memory_method": method,
            "memory_sample_tree_gib": _gib(tree_peak, 3),
            "memory_cuts": [
                {"bytes_per_file": round(c), "tree_gib": _gib(p, 3)}
                | (
                    {"files": m.files, "pages": m.pages, "driver_gib": _gib(m.driver, 3)}
                    if m
                    else {}
                )
                for c, p, m in zip(cuts, peaks, memory_cuts or [None] * len(cuts), strict=True)
            ],
            "memory_gib_per_chunk_mb": round(per_mb / 2**30, 5),
            "memory_parts_gib": {k: _gib(v, 4) for k, v in parts.items()},
            "wall_hours": {
                str(w): round(cpu_hours / min(w, max(len(files), 1)), 3) for w in CRAWL_WORKERS
            },
            "price_per_vcpu_hour": price,
            "cost": round(cpu_hours * price, 2),
        },
    }


def _gib(value: float | None, digits: int) -> float | None:
    """Bytes → GiB (2**30 bytes: what every peak here is, and is named)."""
    return None if value is None else round(value / 2**30, digits)


def run_estimate(job: Any, sample_mb: float, price: float) -> int:
    """Write ``OUT/estimate.json`` (nothing else) and print its summary."""
    result = estimate(job, sample_mb, price)
    storage.makedirs(job.output)
    path = storage.join(job.output, ESTIMATE_NAME)
    with storage.atomic_writer(path) as f:
        f.write(storage.dumps_pretty(result).encode("utf-8"))
    i = result["input"]
    if not job.quiet:
        print(
            f"c4forge clean --estimate: {i['files']} file(s), ~{i['pages']:,} pages "
            f"(sample: {result['sample']['pages']:,} pages): {i['cpu_hours']:,.2f} CPU-hours, "
            f"{i['shuffle_gb']:,.2f} GB shuffled, peak ~{i['peak_memory_gib']:.2f} GiB on "
            f"{i['workers']} worker(s), {i['wall_hours'].get('2', 0):,.2f} h on 2 workers, "
            f"${i['cost']:,.2f} at ${i['price_per_vcpu_hour']}/vCPU-hour → {path}",
            file=sys.stderr,
        )
    return 0
