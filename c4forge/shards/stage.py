"""The shard build on the engine primitives (``engines.base``): Beam, Spark and the local
engine run this one function.

    source: one item per unit of the rows step (a clean shard, or a part of one cut at a group
        boundary: ``shards.parts``) → its rows (``rows.clean_shard_rows``), each block split
        by output shard, sorted, and appended as a segment to that shard's run file
        (``runs.RunWriter``); the unit's counters and runs recorded under _progress/_clean/
        → ((split, shard, count), run) per output shard
    group by output shard → the runs' merge written as the shard (``rows.write_merged_shard``)

Only run paths (and their segment sizes) cross the shuffle; a worker holds one block of rows,
or one small batch per segment it merges, never a whole shard. Two cases run the rows as a
job of their own before the writes: with parts (the driver checks them, ``parts.misplaced``,
and builds a clean shard again whole where a part cannot stand), and with ``--rows-per-shard``
(the shard count depends on the row total: the runs are written unsplit, the driver adds up
the rows, and a second job splits each run by shard, segment by segment).

Runs are never deleted by a task (a retried task must find its inputs): ``driver`` removes
_progress/ after index.json.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from typing import Any

from c4forge.formats import shards as fmt
from c4forge.io import storage
from c4forge.shards import parts, runs
from c4forge.shards import rows as shard_rows
from c4forge.shards.build import ShardsBuild
from c4forge.shards.parts import Part, whole

RUNS_DIR = "_runs"  # under _progress/
Run = tuple[str, list[int], int]  # (path, batches per segment, rows)
_VOCABS: dict[str, Any] = {}  # per worker process: the vocabulary of a build, loaded once


def run_path(output: str, part: Part, shard: tuple[int, int] | None) -> str:
    """A clean shard's (or part's) run for output shard ``(index, count)``; ``None``: its
    unsplit run."""
    name = "all" if shard is None else f"{shard[0]:05d}-of-{shard[1]:05d}"
    tag = f".{part.tag}" if part.tag else ""
    name = f"{part.split}-{name}.{part.clean_index:05d}{tag}.arrow"
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
    part: Part,
    count: Any,
    *,
    build: ShardsBuild,
    counts: dict[str, int] | None,
    skip: frozenset[str],
    resume: bool,
) -> Iterator[tuple[Any, Run]]:
    """One clean shard (or part) → its runs; yields ``((split, shard, count), run)`` per output
    shard still to write (``counts`` None: ``(part, run)`` of its one unsplit run). With
    ``resume`` a unit whose record and runs exist is not read again."""
    record_path = shard_rows.clean_stats_path(build.job.output, part)
    record = storage.read_json(record_path) if resume and storage.exists(record_path) else None
    if record is None or not _runs_intact(record):
        record = _write_runs(build, part, counts)
        count("shards", "clean_shards_built")
    else:
        count("shards", "clean_shards_reused")
    yield from _keyed_runs(part, record, counts, skip)


def _keyed_runs(
    part: Part, record: dict[str, Any], counts: dict[str, int] | None, skip: frozenset[str]
) -> Iterator[tuple[Any, Run]]:
    for key, (run_file, segments, rows) in sorted(record["runs"].items()):
        run: Run = (run_file, segments, rows)
        if counts is None:
            yield part, run
            continue
        shard, n = (int(x) for x in key.split("-of-"))
        if fmt.shard_file_name(part.split, shard, n) not in skip:
            yield (part.split, shard, n), run


def _write_runs(build: ShardsBuild, part: Part, counts: dict[str, int] | None) -> dict[str, Any]:
    """Build the rows of one clean shard (or part) into its runs; record and return what was
    written."""
    vocab = _vocabulary(build)
    stats = shard_rows.empty_stats(build.objective)
    read = [0]
    split = part.split
    with runs.RunSet(build.schema) as out:
        for block in shard_rows.clean_shard_rows(build, vocab, part, stats, read):
            shard_rows.count_block(stats, block, build.schema)
            if counts is None:
                pieces: Iterable[tuple[Any, shard_rows.Block]] = [(None, block)]
            else:
                pieces = shard_rows.split_by_shard(block, counts[split])
            for shard, sub in pieces:
                key = "all" if shard is None else f"{shard:05d}-of-{counts[split]:05d}"
                target = None if shard is None else (shard, counts[split])
                w = out.get(key, run_path(build.job.output, part, target))
                w.add_segment(*runs.sort_block(sub.keys, sub.order, sub.columns))
    written = {k: [w.path, w.segments, w.rows] for k, w in out.writers.items()}
    shard_rows.check_rows(split, part.path, "tokenize", read[0], stats["documents"])
    if part.stop is not None:  # a part that ends before the file does
        shard_rows.check_rows(split, part.path, "read", part.stop - part.start, read[0])
    shard_rows.check_rows(split, part.path, "runs", stats["rows"], out.rows)
    return shard_rows.save_clean_stats(build, part, stats, documents_read=read[0], runs=written)


def split_run(
    item: tuple[Part, Run],
    count: Any,
    *,
    build: ShardsBuild,
    counts: dict[str, int],
    skip: frozenset[str],
) -> Iterator[tuple[tuple[str, int, int], Run]]:
    """An unsplit run → one run per output shard (each segment split by shard, still sorted);
    ``((split, shard, count), run)`` for the shards still to write."""
    part, (path, segments, rows) = item
    split = part.split
    n = counts[split]
    with runs.RunSet(build.schema) as out:
        for keys, order, columns in runs.segments_of(path, segments, build.schema):
            for shard, sub in shard_rows.split_by_shard(shard_rows.Block(keys, order, columns), n):
                w = out.get(shard, run_path(build.job.output, part, (shard, n)))
                w.add_segment(sub.keys, sub.order, sub.columns)
    shard_rows.check_rows(split, path, "split runs", rows, out.rows)
    for shard, w in sorted(out.writers.items()):
        if fmt.shard_file_name(split, shard, n) not in skip:
            yield (split, shard, n), (w.path, w.segments, w.rows)


def _given(item: tuple[Any, Run], count: Any) -> Iterator[tuple[Any, Run]]:
    """A (key, run) pair the driver read from the records, as it is."""
    yield item


def write_built_shard(
    key: tuple[str, int, int], values: Iterable[Run], count: Any, *, build: ShardsBuild
) -> Iterator[str]:
    """One output shard from the merge of its runs (its progress record saved after it)."""
    split, index, n = key
    rec = shard_rows.write_merged_shard(build, split, index, n, sorted(tuple(v) for v in values))
    yield rec["file"]


def run(
    engine: Any,
    build: ShardsBuild,
    skip: frozenset[str],
    resume: bool,
    units: list[Part] | None = None,
) -> list[Part]:
    """Every shard not in ``skip`` written, every unit's counters recorded; ``units``: the rows
    step's units (``parts.plan``; default: each clean shard whole). Returns the units whose
    records hold the counters (a misplaced part's clean shard replaced by its whole)."""
    from dataclasses import replace

    units = units or parts.wholes({s: build.clean_files[s] for s in build.splits})
    engine.start(0, len(units))
    builder = replace(build, vocab_files=())  # workers never write the vocabulary copy
    writer = replace(builder, vocab_state={})  # writers never tokenize
    counts = dict(build.num_shards) if build.num_shards is not None else None
    make = functools.partial(build_runs, build=builder, counts=counts, skip=skip, resume=resume)
    if counts is not None and all(u.count == 1 for u in units):  # one job: rows, then writes
        built = engine.source("shards/rows", units, make)
    else:
        # Rows first, in a job of their own: the parts must be checked, or the row total
        # known (--rows-per-shard decides the shard count from it), before a shard is written.
        engine.drain(engine.source("shards/rows", units, make), "shards/rows")
        engine.execute()
        units, records = _rebuild_misplaced(engine, build, units, make)
        if counts is None:
            counts = row_counts(build, units)
            unsplit = [(u, tuple(r)) for u in units for r in records[u]["runs"].values()]
            split = functools.partial(split_run, build=writer, counts=counts, skip=skip)
            built = engine.source("shards/split", unsplit, split)
        else:
            keyed = [kr for u in units for kr in _keyed_runs(u, records[u], counts, skip)]
            built = engine.source("shards/runs", keyed, _given)
    done = engine.group(built, "shards/write", functools.partial(write_built_shard, build=writer))
    engine.drain(done, "shards/write")
    engine.execute()
    return units


def _rebuild_misplaced(
    engine: Any, build: ShardsBuild, units: list[Part], make: Any
) -> tuple[list[Part], dict[Part, dict[str, Any]]]:
    """The units after the rows job, with the records they wrote (read once): clean shards
    whose parts cannot stand (``parts.misplaced``) built again whole."""
    records = {u: _record(build, u) for u in units}
    bad = parts.misplaced(records)
    if not bad:
        return units, records
    redo = [whole(s, p) for s, p in sorted(bad)]
    engine.drain(engine.source("shards/rows-whole", redo, make), "shards/rows-whole")
    engine.execute()
    kept = {u: r for u, r in records.items() if (u.split, u.path) not in bad}
    return [*kept, *redo], {**kept, **{u: _record(build, u) for u in redo}}


def row_counts(build: ShardsBuild, units: list[Part]) -> dict[str, int]:
    """Shard count per split from the recorded rows (``--rows-per-shard``)."""
    import math

    from c4forge.shards.output import gather_stats

    rows = {s: st["rows"] for s, st in gather_stats(build, units).items()}
    return {s: max(1, math.ceil(n / build.job.rows_per_shard)) for s, n in rows.items()}


def _record(build: ShardsBuild, unit: Part) -> dict[str, Any]:
    """What a unit's rows step recorded (its counters and runs)."""
    return storage.read_json(shard_rows.clean_stats_path(build.job.output, unit))
