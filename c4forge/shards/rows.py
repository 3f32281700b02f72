"""Rows of one clean shard, their output shard, and the writing of one sorted shard.

The parallel unit is the clean shard, or a part of one cut at a group boundary
(``shards.parts``), because groups of 128 documents never cross one and all randomness is keyed
by (seed, objective, clean shard, group, piece): any engine and any number of workers give
byte-identical shards. Blocks of rows (not single rows) travel between the
steps, so a shuffle moves one element per (clean shard, output shard, chunk).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from c4forge.corpus import clean_docs
from c4forge.formats import shards as fmt
from c4forge.io import storage
from c4forge.shards.build import ShardsBuild
from c4forge.shards.parts import PART_ROW_BITS, Part

# Rows per block: bounds a worker's memory to a few blocks whatever the clean shard's size (a
# C4 clean shard makes ~270k rows of 1.25 kB).
CHUNK_EXAMPLES = 16384
CLEAN_STATS_DIR = "_clean"  # under _progress/: one counter file per processed clean shard


@dataclass
class Block:
    """Rows of one clean shard bound for one output shard, with their sort keys.

    ``order`` = (clean shard index << 32) | row number in that clean shard: a tie-breaker that
    keeps the sort total even if two 64-bit keys ever collide.
    """

    keys: np.ndarray
    order: np.ndarray
    columns: dict[str, np.ndarray]

    @property
    def rows(self) -> int:
        return len(self.keys)


def clean_shard_rows(
    build: ShardsBuild,
    vocab: Any,
    part: Part,
    stats: dict[str, int],
    read: list[int] | None = None,
) -> Iterator[Block]:
    """Row blocks of one clean shard (or a part of one, ``shards.parts``), in example order,
    made by the objective's registered example builder; ``stats`` receives its counters,
    ``read[0]`` the documents read from the file (for the accounting: every document read is
    tokenized or a counted drop)."""
    cfg = build.objective
    clean_index = part.clean_index
    base = (np.uint64(clean_index) << np.uint64(32)) + np.uint64(part.order_base())
    done = 0
    texts = _counted_texts(part, read if read is not None else [0])
    for columns, keys in cfg.spec.build_rows(
        texts,
        vocab,
        clean_shard_index=clean_index,
        seed=build.job.seed,
        config=cfg,
        stats=stats,
        dtype=build.np_dtype,
        chunk_examples=CHUNK_EXAMPLES,
        first_document=part.start,
    ):
        n = len(keys)
        if part.count > 1 and done + n > 1 << PART_ROW_BITS:
            raise RuntimeError(f"{part.path}: more than 2**{PART_ROW_BITS} rows in one part")
        order = base + np.arange(done, done + n, dtype=np.uint64)
        done += n
        yield Block(keys.astype(np.uint64), order, columns)


def _counted_texts(part: Part, read: list[int]) -> Iterator[str]:
    for rec in clean_docs.iter_documents(part.path, part.start, part.stop):
        read[0] += 1
        yield rec["text"]


def check_rows(split: str, source: str, step: str, expected: int, got: int) -> None:
    """Refuse to go on when a step did not pass on every row (or document) it was given."""
    if expected != got:
        from c4forge.errors import VerificationError

        raise VerificationError(
            f"{split}: {source}: {expected:,} in, {got:,} out of step '{step}' (rows or "
            "documents went missing there); index.json not written"
        )


def split_by_shard(block: Block, num_shards: int) -> Iterator[tuple[int, Block]]:
    """(shard, sub-block) for every output shard that receives rows: shard = key % num_shards."""
    shard = block.keys % np.uint64(num_shards)
    for s in np.unique(shard):
        sel = shard == s
        yield (
            int(s),
            Block(block.keys[sel], block.order[sel], {k: v[sel] for k, v in block.columns.items()}),
        )


def assemble(blocks: Iterable[Block], schema: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    """One shard's columns, rows sorted by (key, order): the same bytes whatever the arrival order."""
    blocks = list(blocks)
    if not blocks:
        return {
            e["name"]: np.zeros((0, e["length"]) if "length" in e else (0,), fmt.numpy_dtype(e))
            for e in schema
        }
    keys = np.concatenate([b.keys for b in blocks])
    order = np.concatenate([b.order for b in blocks])
    perm = np.lexsort((order, keys))
    return {e["name"]: np.concatenate([b.columns[e["name"]] for b in blocks])[perm] for e in schema}


def empty_stats(objective: Any) -> dict[str, int]:
    """Counters of one clean shard: the objective's own, plus rows and token totals."""
    return {**objective.spec.new_stats(), "rows": 0, "input_tokens": 0, "target_tokens": 0}


def count_block(stats: dict[str, int], block: Block, schema: list[dict[str, Any]]) -> None:
    stats["rows"] += block.rows
    i, t = fmt.token_counts(schema, block.columns)
    stats["input_tokens"] += i
    stats["target_tokens"] += t


def clean_stats_path(output: str, part: Part) -> str:
    """The counter file of one processed clean shard (or part of one)."""
    tag = f".{part.tag}" if part.tag else ""
    name = f"{part.split}-{part.clean_index:05d}{tag}.json"
    return storage.join(output, fmt.PROGRESS_DIR, CLEAN_STATS_DIR, name)


def save_clean_stats(
    build: ShardsBuild, part: Part, stats: dict[str, int], **extra: Any
) -> dict[str, Any]:
    """The counters of one processed clean shard or part (same content on a retried bundle),
    with ``extra`` (documents read, its runs); returns the record."""
    record = {"split": part.split, "file": storage.basename(part.path), "stats": stats, **extra}
    if part.tag:
        record["part"] = {"index": part.index, "count": part.count, "start": part.start}
    storage.write_json(clean_stats_path(build.job.output, part), record)
    return record


def write_one_shard(
    build: ShardsBuild, split: str, index: int, count: int, blocks: Iterable[Block]
) -> dict[str, Any]:
    """Sort and write one shard unless an intact copy from this build is already there."""
    name = fmt.shard_file_name(split, index, count)
    progress = fmt.Progress(build.job.output)
    done = progress.finished(name, build.fingerprint)
    if done is not None:  # never rewrite a finished shard (§3.4 step 3)
        return done
    columns = assemble(blocks, build.schema)
    meta = fmt.shard_metadata(
        build.fingerprint, build.vocab_descriptor["sha256"], split, index, count
    )
    rec = fmt.write_shard(
        storage.join(build.job.output, name),
        build.schema,
        columns,
        meta,
        batch_rows=build.job.batch_rows,
        compression=build.job.arrow_compression,
    )
    rec = {**rec, "dataset_fingerprint": build.fingerprint}
    progress.save(rec)
    return rec


def write_merged_shard(
    build: ShardsBuild, split: str, index: int, count: int, runs: list[tuple[str, list[int], int]]
) -> dict[str, Any]:
    """One shard from the merge of its sorted runs (``shards.runs``), streamed in record
    batches: the same bytes as ``write_one_shard`` of the same rows, without holding them."""
    from c4forge.shards import runs as sruns

    name = fmt.shard_file_name(split, index, count)
    progress = fmt.Progress(build.job.output)
    done = progress.finished(name, build.fingerprint)
    if done is not None:
        return done
    meta = fmt.shard_metadata(
        build.fingerprint, build.vocab_descriptor["sha256"], split, index, count
    )
    merged = sruns.merged_rows([(path, segments) for path, segments, _ in runs], build.schema)
    rec = fmt.write_shard_batches(
        storage.join(build.job.output, name),
        build.schema,
        sruns.rebatch(merged, build.job.batch_rows),
        meta,
        compression=build.job.arrow_compression,
    )
    check_rows(split, name, "merge", sum(r[2] for r in runs), rec["rows"])
    rec = {**rec, "dataset_fingerprint": build.fingerprint}
    progress.save(rec)
    return rec
