"""What one `c4forge shards` build resolves to before any work: ``ShardsBuild``.

The request is ``c4forge.shards.job.ShardsJob``; ``resolve`` reads its inputs once: the
vocabulary (its bytes travel to the workers, its size picks the token dtype, its sentinels
check the objective), the objective's ``ObjectiveConfig`` (whose ``descriptor()`` is
index.json's ``objective`` block, verbatim), the clean shard files, the schema and the manifest
(index.json minus splits/stats/versions, its fingerprint already final). Workers receive the
build, never a path to re-read or an argparse namespace; what the user asked for is read from
``build.job``.
"""

from __future__ import annotations

import sys
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np

from c4forge import __version__
from c4forge.corpus import clean_docs
from c4forge.errors import InputError
from c4forge.formats import shards as fmt
from c4forge.io import fingerprint, storage
from c4forge.objectives.registry import ObjectiveConfig, make_config, short_targets_warning
from c4forge.rules.split import SPLITS
from c4forge.shards.job import ShardsJob


def load_vocabulary(path: str, extra_ids: int | None) -> Any:
    from c4forge.vocab.vocab import Vocabulary

    return Vocabulary.load(path, extra_ids=extra_ids)


@dataclass(frozen=True)
class ShardsBuild:
    """A job with its inputs read: everything a worker needs, nothing it must look up again."""

    job: ShardsJob  # the request, as asked for
    objective: ObjectiveConfig  # validated against the vocabulary (its sentinels)
    token_dtype: str  # "uint16" | "int32" (``auto`` resolved against the vocabulary)
    vocab_state: dict[str, Any]  # Vocabulary.__getstate__(): the model bytes travel, not a path
    vocab_descriptor: dict[str, Any]
    vocab_files: tuple[tuple[str, bytes], ...]  # the copy for SHARDS/vocab/ (driver only)
    schema: list[dict[str, Any]]
    manifest: dict[str, Any]  # index.json minus splits/stats/versions
    fingerprint: str  # the manifest's dataset_fingerprint
    clean_files: dict[str, list[str]]
    num_shards: dict[str, int] | None  # None → sized by rows_per_shard inside the job
    file_documents: dict[str, int]  # per clean file name, from stats.json ({} without one)

    @property
    def splits(self) -> list[str]:
        return [s for s in SPLITS if self.clean_files.get(s)]

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.token_dtype)


def count_documents(files: list[str], digests: dict[str, str] | None = None) -> int:
    """Non-blank lines of clean files: the first pass formats.md §1 asks for without stats.json.
    ``digests``: filled with each file's sha256, computed from this pass's read
    (``io.fingerprint``; a Parquet file, of which only the footer is read, is hashed whole)."""
    total = 0
    for path in files:
        with fingerprint.digesting(path) as digest:
            total += _count_file(path)
        if digests is not None:
            digests[path] = digest.hexdigest()
    return total


def _count_file(path: str) -> int:
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        with storage.open_read(path) as raw:
            return pq.ParquetFile(raw).metadata.num_rows
    try:
        with storage.open_read(path) as raw:
            f = clean_docs.gzip_lines(raw) if path.endswith(".gz") else raw
            return sum(1 for line in f if line.strip())
    except (OSError, EOFError, zlib.error) as err:
        raise InputError(f"{path}: unreadable or truncated file: {err}") from err


def source_block(
    docs: str, clean_files: dict[str, list[str]], stats: dict | None
) -> dict[str, Any]:
    """`source` of index.json: the clean ``stats`` (its stats.json)'s sha256 and document
    counts per split. Clean files without a stats.json (a C4 release) are bound by content
    instead: ``clean_files_sha256`` (per split, file name → sha256, from the counting pass),
    so a replaced file changes the dataset fingerprint and is never resumed or served stale."""
    documents = {}
    hashed: dict[str, dict[str, str]] = {}
    for split, files in clean_files.items():
        n = clean_docs.split_documents(stats, split) if stats is not None else None
        if n is None:
            digests: dict[str, str] = {}
            n = count_documents(files, digests)
            hashed[split] = {storage.basename(p): h for p, h in sorted(digests.items())}
        documents[split] = n
    digest = storage.sha256(clean_docs.clean_stats_path(docs)) if stats is not None else None
    block: dict[str, Any] = {"clean_stats_sha256": digest, "documents": documents}
    if stats is None:
        block["clean_files_sha256"] = hashed
    return block


def resolve(job: ShardsJob) -> ShardsBuild:
    """Read the vocabulary, validate the objective's options against it (None = default) and
    list the clean shards; refuse missing inputs before any work."""
    from c4forge.vocab.vocab_files import source_files

    vocab = load_vocabulary(job.vocab, job.extra_ids)
    options = {k: v for k, v in job.chosen_objective_options().items() if v is not None}
    cfg = make_config(job.objective, extra_ids=vocab.extra_ids, **options)
    warning = short_targets_warning(cfg)
    if warning:  # not --quiet-able: the rows it builds lose target tokens
        print(f"c4forge shards: warning: {warning}", file=sys.stderr, flush=True)
    token_dtype = fmt.choose_token_dtype(vocab.embedding_size, job.token_dtype)
    schema = fmt.column_layout(
        cfg.spec.layout,
        cfg.packing,
        cfg.inputs_length,
        cfg.targets_length,
        token_dtype,
        max_predictions=cfg.targets_length,
    )
    clean_files = {s: clean_docs.list_clean_shards(job.docs, s) for s in SPLITS}
    if not clean_files["train"]:
        raise InputError(
            f"{job.docs}: no c4-train.NNNNN-of-NNNNN.json.gz files (a `c4forge clean` output "
            "or AllenAI C4 folder is expected)"
        )
    clean_files = {s: f for s, f in clean_files.items() if f}
    stats = clean_docs.clean_stats(job.docs)  # read once: index.json's source, the parts' plan
    num_shards = None
    if job.rows_per_shard is None:
        requested = job.shard_counts
        num_shards = {s: requested.get(s) or len(f) for s, f in clean_files.items()}
    manifest = fmt.make_manifest(
        objective=cfg.descriptor(),
        schema=schema,
        seed=job.seed,
        source=source_block(job.docs, clean_files, stats),
        token_dtype=token_dtype,
        vocabulary=vocab.descriptor(),
        batch_rows=job.batch_rows,
        compression=job.arrow_compression,
        created_by=f"c4forge {__version__}",
    )
    return ShardsBuild(
        job=job,
        objective=cfg,
        token_dtype=token_dtype,
        vocab_state=vocab.__getstate__(),
        vocab_descriptor=vocab.descriptor(),
        vocab_files=source_files(vocab, job.vocab),
        schema=schema,
        manifest=manifest,
        fingerprint=manifest["dataset_fingerprint"],
        clean_files=clean_files,
        num_shards=num_shards,
        file_documents=clean_docs.file_documents(stats),
    )
