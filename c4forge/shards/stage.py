"""The shard build on the engine primitives (``engines.base``): Beam, Spark and the local
engine run this one function.

    source: one item per clean shard → its rows (``rows.clean_shard_rows``), each block split
        by output shard, sorted, and appended as a segment to that shard's run file
        (``runs.RunWriter``); the clean shard's counters and runs recorded under
        _progress/_clean/ → ((split, shard, count), run) per output shard
    group by output shard → the runs' merge written as the shard (``rows.write_merged_shard``)

Only run paths (and their segment sizes) cross the shuffle; a worker holds one block of rows,
or one small batch per segment it merges, never a whole shard. With ``--rows-per-shard`` the
shard count depends on the row total: the clean shards' runs are written unsplit first, the
driver adds up the rows, and a second job splits each run by shard (segment by segment).

Runs are never deleted by a task (a retried task must find its inputs): ``driver`` removes
_progress/ after index.json.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

from c4forge.formats import clean_docs
from c4forge.formats import shards as fmt
from c4forge.io import storage
from c4forge.shards import rows as sr
from c4forge.shards import runs
from c4forge.shards.build import ShardsBuild

RUNS_DIR = "_runs"  # under _progress/
Run = tuple[str, list[int], int]  # (path, batches per segment, rows)
_VOCABS: dict[str, Any] = {}  # per worker process: the vocabulary of a build, loaded once


def run_path(output: str, split: str, clean_index: int, shard: tuple[int, int] | None) -> str:
    """A clean shard's run for output shard ``(index, count)``; ``None``: its unsplit run."""
    part = "all" if shard is None else f"{shard[0]:05d}-of-{shard[1]:05d}"
    name = f"{split}-{part}.{clean_index:05d}.arrow"
    return storage.join(output, fmt.PROGRESS_DIR, RUNS_DIR, name)


def _vocabulary(build: ShardsBuild) -> Any:
    key = build.vocab_descriptor["sha256"]
    vocab = _VOCABS.get(key)
    if vocab is None:
        from c4forge.vocab.vocab import Vocabulary

        vocab = Vocabulary.__new__(Vocabulary)
        vocab.__setstate__(build.vocab_state)
        _VOCABS.clear()
        _VOCABS[key] = vocab
    return vocab


def _runs_intact(record: dict[str, Any]) -> bool:
    return "runs" in record and all(storage.exists(r[0]) for r in record["runs"].values())


def build_runs(
    item: tuple[str, str],
    count: Any,
    *,
    build: ShardsBuild,
    counts: dict[str, int] | None,
    skip: frozenset[str],
    resume: bool,
) -> Iterator[tuple[Any, Run]]:
    """One clean shard → its runs; yields ``((split, shard, count), run)`` per output shard
    still to write (``counts`` None: ``(split, run)`` of its one unsplit run). With ``resume``
    a clean shard whose record and runs exist is not read again."""
    split, path = item
    clean_index = clean_docs.shard_index(path)
    record_path = sr.clean_stats_path(build.job.output, split, clean_index)
    record = storage.read_json(record_path) if resume and storage.exists(record_path) else None
    if record is None or not _runs_intact(record):
        record = _write_runs(build, split, path, clean_index, counts)
        count("shards", "clean_shards_built")
    else:
        count("shards", "clean_shards_reused")
    for key, (run_file, segments, rows) in sorted(record["runs"].items()):
        run: Run = (run_file, segments, rows)
        if counts is None:
            yield split, run
            continue
        shard, n = (int(x) for x in key.split("-of-"))
        if fmt.shard_file_name(split, shard, n) not in skip:
            yield (split, shard, n), run


def _write_runs(
    build: ShardsBuild, split: str, path: str, clean_index: int, counts: dict[str, int] | None
) -> dict[str, Any]:
    """Build the rows of one clean shard into its runs; record and return what was written."""
    vocab = _vocabulary(build)
    stats = sr.empty_stats(build.objective)
    read = [0]
    with runs.RunSet(build.schema) as out:
        for block in sr.clean_shard_rows(build, vocab, path, stats, read):
            sr.count_block(stats, block, build.schema)
            if counts is None:
                parts: Iterable[tuple[Any, sr.Block]] = [(None, block)]
            else:
                parts = sr.split_by_shard(block, counts[split])
            for shard, sub in parts:
                key = "all" if shard is None else f"{shard:05d}-of-{counts[split]:05d}"
                target = None if shard is None else (shard, counts[split])
                w = out.get(key, run_path(build.job.output, split, clean_index, target))
                w.add_segment(*runs.sort_block(sub.keys, sub.order, sub.columns))
    written = {k: [w.path, w.segments, w.rows] for k, w in out.writers.items()}
    sr.check_rows(split, path, "tokenize", read[0], stats["documents"])
    sr.check_rows(split, path, "runs", stats["rows"], out.rows)
    return sr.save_clean_stats(build, split, path, stats, documents_read=read[0], runs=written)


def split_run(
    item: tuple[str, Run],
    count: Any,
    *,
    build: ShardsBuild,
    counts: dict[str, int],
    skip: frozenset[str],
) -> Iterator[tuple[tuple[str, int, int], Run]]:
    """An unsplit run → one run per output shard (each segment split by shard, still sorted);
    ``((split, shard, count), run)`` for the shards still to write."""
    split, (path, segments, rows) = item
    n = counts[split]
    clean_index = int(storage.basename(path).split(".")[1])
    with runs.RunSet(build.schema) as out:
        for keys, order, columns in runs.segments_of(path, segments, build.schema):
            for shard, sub in sr.split_by_shard(sr.Block(keys, order, columns), n):
                w = out.get(shard, run_path(build.job.output, split, clean_index, (shard, n)))
                w.add_segment(sub.keys, sub.order, sub.columns)
    sr.check_rows(split, path, "split runs", rows, out.rows)
    for shard, w in sorted(out.writers.items()):
        if fmt.shard_file_name(split, shard, n) not in skip:
            yield (split, shard, n), (w.path, w.segments, w.rows)


def write_shard(
    key: tuple[str, int, int], values: Iterable[Run], count: Any, *, build: ShardsBuild
) -> Iterator[str]:
    """One output shard from the merge of its runs (its progress record saved after it)."""
    split, index, n = key
    rec = sr.write_merged_shard(build, split, index, n, sorted(tuple(v) for v in values))
    yield rec["file"]


def run(engine: Any, build: ShardsBuild, skip: frozenset[str], resume: bool) -> None:
    """Every shard not in ``skip`` written, every clean shard's counters recorded."""
    from dataclasses import replace

    inputs = [(s, p) for s in build.splits for p in build.clean_files[s]]
    engine.start(0, len(inputs))
    builder = replace(build, vocab_files=())  # workers never write the vocabulary copy
    writer = replace(builder, vocab_state={})  # writers never tokenize
    counts = dict(build.num_shards) if build.num_shards is not None else None
    make = functools.partial(build_runs, build=builder, counts=counts, skip=skip, resume=resume)
    built = engine.source("shards/rows", inputs, make)
    if counts is None:  # --rows-per-shard: the row total decides the shard count
        engine.drain(built, "shards/rows")
        engine.execute()
        counts = row_counts(build)
        unsplit = [(s, r) for s, p in inputs for r in unsplit_runs(build, s, p)]
        split = functools.partial(split_run, build=writer, counts=counts, skip=skip)
        built = engine.source("shards/split", unsplit, split)
    done = engine.group(built, "shards/write", functools.partial(write_shard, build=writer))
    engine.drain(done, "shards/write")
    engine.execute()


def row_counts(build: ShardsBuild) -> dict[str, int]:
    """Shard count per split from the recorded rows (``--rows-per-shard``)."""
    import math

    from c4forge.shards.output import gather_stats

    rows = {s: st["rows"] for s, st in gather_stats(build).items()}
    return {s: max(1, math.ceil(n / build.job.rows_per_shard)) for s, n in rows.items()}


def unsplit_runs(build: ShardsBuild, split: str, path: str) -> list[Run]:
    record = storage.read_json(
        sr.clean_stats_path(build.job.output, split, clean_docs.shard_index(path))
    )
    return [tuple(r) for r in record["runs"].values()]  # type: ignore[misc]
