"""What one `c4forge shards` build is: the typed job, and what it resolves to before any work.

``ShardsJob`` is the user's request (``ShardsOptions``), frozen and validated once by
``make_job`` (the CLI calls it; tests and other programs may too). Everything that decides the
rows is in it: the objective's ``ObjectiveConfig`` (whose ``descriptor()`` is index.json's ``objective`` block,
verbatim), the seed, the token dtype and the Arrow options. ``resolve`` turns it into a
``ShardsBuild``: the vocabulary's bytes, the clean shard files, the schema and the manifest
(index.json minus splits/stats/versions, its fingerprint already final). Workers receive the
build, never a path to re-read or an argparse namespace.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from c4forge import __version__
from c4forge.errors import ConfigError, InputError
from c4forge.formats import clean_docs
from c4forge.formats import shards as fmt
from c4forge.io import storage
from c4forge.objectives.registry import ObjectiveConfig, make_config
from c4forge.rules.split import SPLITS
from c4forge.shards.options import ShardsOptions

COMPRESSIONS = ("none", "lz4")
TOKEN_DTYPES = ("auto", "uint16", "int32")


@dataclass(frozen=True)
class ShardsJob:
    """One shard build, validated: the rows it makes and how it runs."""

    docs: str
    output: str
    vocab: str  # a `c4forge vocab` folder, or a plain SentencePiece .model
    objective: ObjectiveConfig
    token_dtype: str  # "uint16" | "int32" (resolved from "auto" against the vocabulary)
    seed: int = 0
    extra_ids: int | None = None  # --extra-ids for a plain .model (a vocab folder records its own)
    batch_rows: int = 1024
    compression: str | None = None  # None | "lz4"
    num_shards: Mapping[str, int | None] = field(
        default_factory=lambda: {"train": None, "validation": None}
    )  # None = the clean shard count of that split
    rows_per_shard: int | None = None
    # How it runs (never part of the rows):
    engine: str = "auto"  # auto | local | spark | beam (``engines.choose``)
    runner: str | None = None
    workers: int | None = None
    master: str | None = None  # Spark master URL (--engine spark)
    pipeline_args: tuple[str, ...] = ()  # passed to the runner unchanged
    overwrite: bool = False
    resume: bool = False  # reuse the runs of an interrupted build
    quiet: bool = False

    @property
    def passthrough(self) -> tuple[str, ...]:
        """The engine options (the engines read them under this name)."""
        return self.pipeline_args

    @property
    def inputs(self) -> tuple[str, ...]:
        return (self.docs,)

    def replace(self, **changes: Any) -> ShardsJob:
        from dataclasses import replace

        return replace(self, **changes)


def parse_num_shards(spec: str | None) -> dict[str, int | None]:
    """``auto`` | ``N`` (train) | ``train=N,validation=M``; None means the clean shard count."""
    out: dict[str, int | None] = {"train": None, "validation": None}
    spec = (spec or "auto").strip()
    if spec == "auto":
        return out
    try:
        if "=" not in spec:
            out["train"] = int(spec)
        else:
            for part in spec.split(","):
                split, value = part.split("=")
                if split.strip() not in out:
                    raise ValueError(split)
                out[split.strip()] = None if value.strip() == "auto" else int(value)
    except ValueError as err:
        raise ConfigError(
            f"--num-shards must be auto, N, or train=N,validation=M; got {spec!r}"
        ) from err
    for split, n in out.items():
        if n is not None and n < 1:
            raise ConfigError(f"--num-shards for {split} must be >= 1, got {n}")
    return out


def load_vocabulary(path: str, extra_ids: int | None) -> Any:
    from c4forge.vocab.vocab import Vocabulary

    return Vocabulary.load(path, extra_ids=extra_ids)


def make_job(opts: ShardsOptions) -> ShardsJob:
    """Validate every option (the objective's own: None = default) and load the vocabulary the
    objective is checked against; no shard work happens here."""
    if not opts.vocab:
        raise ConfigError("--vocab is required (a `c4forge vocab` folder or a .model file)")
    if not opts.output:
        raise ConfigError("--output is required")
    batch_rows, seed, compression = opts.batch_rows, opts.seed, opts.compression
    rows_per_shard, workers, extra_ids = opts.rows_per_shard, opts.workers, opts.extra_ids
    if batch_rows < 1:
        raise ConfigError(f"--batch-rows must be >= 1, got {batch_rows}")
    if seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {seed}")
    if compression not in (*COMPRESSIONS, None):
        raise ConfigError(f"--compression must be none or lz4, got {compression!r}")
    requested = parse_num_shards(opts.num_shards)
    if rows_per_shard is not None:
        if rows_per_shard < 1:
            raise ConfigError(f"--rows-per-shard must be >= 1, got {rows_per_shard}")
        if any(v is not None for v in requested.values()):
            raise ConfigError("give either --num-shards or --rows-per-shard, not both")
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    vocabulary = load_vocabulary(opts.vocab, extra_ids)
    options = {k: v for k, v in opts.chosen_objective_options().items() if v is not None}
    config = make_config(opts.objective, extra_ids=vocabulary.extra_ids, **options)
    return ShardsJob(
        docs=opts.docs,
        output=opts.output,
        vocab=opts.vocab,
        objective=config,
        token_dtype=fmt.choose_token_dtype(vocabulary.embedding_size, opts.token_dtype),
        seed=seed,
        extra_ids=extra_ids,
        batch_rows=batch_rows,
        compression=None if compression in (None, "none") else compression,
        num_shards=requested,
        rows_per_shard=rows_per_shard,
        engine=opts.engine,
        runner=opts.runner,
        workers=workers,
        master=opts.master,
        pipeline_args=tuple(opts.pipeline_args),
        overwrite=opts.overwrite,
        resume=opts.resume,
        quiet=opts.quiet,
    )


# ----------------------------------------------------------------------------- the resolved build


@dataclass(frozen=True)
class ShardsBuild:
    """A job with its inputs read: everything a worker needs, nothing it must look up again."""

    job: ShardsJob
    vocab_state: dict[str, Any]  # Vocabulary.__getstate__(): the model bytes travel, not a path
    vocab_descriptor: dict[str, Any]
    vocab_files: tuple[tuple[str, bytes], ...]  # the copy for SHARDS/vocab/ (driver only)
    schema: list[dict[str, Any]]
    manifest: dict[str, Any]  # index.json minus splits/stats/versions
    clean_files: dict[str, list[str]]
    num_shards: dict[str, int] | None  # None → sized by rows_per_shard inside the job

    @property
    def output(self) -> str:
        return self.job.output

    @property
    def objective(self) -> ObjectiveConfig:
        return self.job.objective

    @property
    def seed(self) -> int:
        return self.job.seed

    @property
    def rows_per_shard(self) -> int | None:
        return self.job.rows_per_shard

    @property
    def fingerprint(self) -> str:
        return self.manifest["dataset_fingerprint"]

    @property
    def splits(self) -> list[str]:
        return [s for s in SPLITS if self.clean_files.get(s)]

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.job.token_dtype)


def count_documents(files: list[str]) -> int:
    """Non-blank lines of clean files: the first pass formats.md §1 asks for without stats.json."""
    total = 0
    for path in files:
        if path.endswith(".parquet"):
            import pyarrow.parquet as pq

            with storage.open_read(path) as raw:
                total += pq.ParquetFile(raw).metadata.num_rows
            continue
        try:
            with storage.open_read(path) as raw:
                f = clean_docs.gzip_lines(raw) if path.endswith(".gz") else raw
                total += sum(1 for line in f if line.strip())
        except (OSError, EOFError, zlib.error) as err:
            raise InputError(f"{path}: unreadable or truncated file: {err}") from err
    return total


def source_block(docs: str, clean_files: dict[str, list[str]]) -> dict[str, Any]:
    """`source` of index.json: the clean stats.json's sha256 and document counts per split."""
    stats = clean_docs.clean_stats(docs)
    documents = {}
    for split, files in clean_files.items():
        n = clean_docs.split_documents(stats, split) if stats is not None else None
        documents[split] = n if n is not None else count_documents(files)
    digest = storage.sha256(clean_docs.clean_stats_path(docs)) if stats is not None else None
    return {"clean_stats_sha256": digest, "documents": documents}


def resolve(job: ShardsJob) -> ShardsBuild:
    """Read the vocabulary and list the clean shards; refuse missing inputs before any work."""
    from c4forge.vocab.vocab_files import source_files

    vocab = load_vocabulary(job.vocab, job.extra_ids)
    cfg = job.objective
    schema = fmt.column_layout(
        cfg.spec.layout,
        cfg.packing,
        cfg.inputs_length,
        cfg.targets_length,
        job.token_dtype,
        max_predictions=cfg.targets_length,
    )
    clean_files = {s: clean_docs.list_clean_shards(job.docs, s) for s in SPLITS}
    if not clean_files["train"]:
        raise InputError(
            f"{job.docs}: no c4-train.NNNNN-of-NNNNN.json.gz files (a `c4forge clean` output "
            "or AllenAI C4 folder is expected)"
        )
    clean_files = {s: f for s, f in clean_files.items() if f}
    num_shards = None
    if job.rows_per_shard is None:
        num_shards = {s: job.num_shards.get(s) or len(f) for s, f in clean_files.items()}
    manifest = fmt.make_manifest(
        objective=cfg.descriptor(),
        schema=schema,
        seed=job.seed,
        source=source_block(job.docs, clean_files),
        token_dtype=job.token_dtype,
        vocabulary=vocab.descriptor(),
        batch_rows=job.batch_rows,
        compression=job.compression,
        created_by=f"c4forge {__version__}",
    )
    return ShardsBuild(
        job=job,
        vocab_state=vocab.__getstate__(),
        vocab_descriptor=vocab.descriptor(),
        vocab_files=source_files(vocab, job.vocab),
        schema=schema,
        manifest=manifest,
        clean_files=clean_files,
        num_shards=num_shards,
    )
