"""`c4forge shards` as a Beam job: clean documents → tokenized examples → sorted Arrow shards.

Shape of the job (formats.md §3, objectives.md §2):

    one element per clean shard file
      → BuildRows (DoFn; vocabulary loaded once per worker in setup): read documents, encode
        with SentencePiece, run the objective's pure example pipeline, make rows (padded, or
        first-fit packed in windows), key each row, and split the rows into blocks by
        output shard = key % num_shards
      → GroupByKey((split, shard))
      → WriteShard (DoFn): sort the shard's rows by key, write the Arrow stream atomically,
        then its `_progress/<name>.json` record
    driver: empty shards, stats, index.json (last), summary.

The parallel unit is the clean shard because groups of 128 documents never cross one and all
randomness is keyed by (seed, objective, clean shard, group, piece): any runner and any number
of workers give byte-identical shards. Blocks of rows (not single rows) travel through the
shuffle, so its cost is one element per (clean shard, output shard, chunk).
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import os
import re
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import apache_beam as beam
import numpy as np

from c4forge import __version__
from c4forge.errors import ConfigError, InputError, OutputExistsError
from c4forge.formats import clean_docs, storage
from c4forge.formats import shards as fmt

# Rows per block handed to the shuffle: bounds a worker's memory to a few blocks whatever the
# clean shard's size (a C4 clean shard makes ~270k rows of 1.25 kB).
CHUNK_EXAMPLES = 16384
ENCODE_BATCH = 256  # documents per SentencePiece batch call
CLEAN_STATS_DIR = "_clean"  # under _progress/: one counter file per processed clean shard
BUILD_RECORD = "_build.json"  # under _progress/: what an unfinished build was building
_SHARD_FILE_RE = re.compile(r"^(train|validation)-\d{5}-of-\d{5}\.arrow$")


# ----------------------------------------------------------------------------- configuration


@dataclass
class ShardsJob:
    """Everything a worker needs, fixed and validated in the driver before any work starts."""

    docs: str
    output: str
    vocab_state: dict[str, Any]  # Vocabulary.__getstate__(): the model bytes travel, not a path
    objective: Any  # c4forge.objectives.registry.ObjectiveConfig
    seed: int
    token_dtype: str
    batch_rows: int
    compression: str | None
    schema: list[dict[str, Any]]
    manifest: dict[str, Any]  # index.json minus splits/stats/versions
    clean_files: dict[str, list[str]]
    num_shards: dict[str, int] | None  # None → sized by rows_per_shard inside the job
    rows_per_shard: int | None
    vocab_descriptor: dict[str, Any] = field(default_factory=dict)

    @property
    def fingerprint(self) -> str:
        return self.manifest["dataset_fingerprint"]

    @property
    def splits(self) -> list[str]:
        return [s for s in fmt.SPLITS if self.clean_files.get(s)]

    @property
    def np_dtype(self) -> np.dtype:
        return np.dtype(self.token_dtype)


def parse_num_shards(spec: str) -> dict[str, int | None]:
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


def load_vocabulary(path: str, extra_ids: int | None):
    from c4forge.tokenizers.vocab import Vocabulary

    return Vocabulary.load(path, extra_ids=extra_ids)


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
                f = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw
                total += sum(1 for line in f if line.strip())
        except (OSError, EOFError) as err:
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


BERT_ONLY = ("max_predictions_per_seq", "short_seq_prob", "dupe_factor")


def bert_options(args: argparse.Namespace) -> dict[str, Any]:
    """The bert_mlm_nsp-only options given, refusing options that objective would ignore.

    bert_mlm_nsp masks 15 % of positions with BERT's 80/10/10 rule and stores predictions in
    --max-predictions-per-seq slots: span options, --targets-length and per-document packing
    have no meaning there, so giving one is an error rather than a silently ignored flag.
    """
    given = {k: getattr(args, k, None) for k in BERT_ONLY}
    given = {k: v for k, v in given.items() if v is not None}
    if args.objective != "bert_mlm_nsp":
        if given:
            flags = ", ".join("--" + k.replace("_", "-") for k in given)
            raise ConfigError(f"{flags}: only for --objective bert_mlm_nsp")
        return {}
    ignored = {
        "--targets-length": args.targets_length is not None,
        "--noise-density": args.noise_density is not None,
        "--mean-noise-span-length": args.mean_noise_span_length is not None,
        "--packing per_document": args.packing != "concat",
        "--doc-separator eos": args.doc_separator != "none",
    }
    bad = [flag for flag, on in ignored.items() if on]
    if bad:
        raise ConfigError(
            f"bert_mlm_nsp does not use {', '.join(bad)} (its rows hold one sentence pair "
            "each; use --inputs-length for max_seq_length and --max-predictions-per-seq)"
        )
    return given


def make_job(args: argparse.Namespace) -> ShardsJob:
    """Validate every option and the inputs; no shard work happens before this returns."""
    from c4forge.objectives.registry import make_config

    docs = args.docs if getattr(args, "docs", None) else args.target[0]
    output = args.output
    if args.batch_rows < 1:
        raise ConfigError(f"--batch-rows must be >= 1, got {args.batch_rows}")
    if args.seed < 0:
        raise ConfigError(f"--seed must be >= 0, got {args.seed}")
    requested = parse_num_shards(args.num_shards)
    if args.rows_per_shard is not None:
        if args.rows_per_shard < 1:
            raise ConfigError(f"--rows-per-shard must be >= 1, got {args.rows_per_shard}")
        if any(v is not None for v in requested.values()):
            raise ConfigError("give either --num-shards or --rows-per-shard, not both")
    bert = bert_options(args)
    vocab = load_vocabulary(args.vocab, args.extra_ids)
    objective = make_config(
        args.objective,
        inputs_length=args.inputs_length,
        targets_length=args.targets_length,
        noise_density=args.noise_density,
        mean_noise_span_length=3.0
        if args.mean_noise_span_length is None
        else args.mean_noise_span_length,
        packing=args.packing,
        doc_separator=args.doc_separator,
        pack_window=args.pack_window,
        extra_ids=vocab.extra_ids,
        **bert,
    )
    token_dtype = fmt.choose_token_dtype(vocab.embedding_size, args.token_dtype)
    compression = None if args.compression in (None, "none") else args.compression
    schema = fmt.column_spec(
        objective.name,
        objective.packing,
        objective.inputs_length,
        objective.targets_length,
        token_dtype,
        max_predictions=objective.max_predictions_per_seq or 20,
    )

    clean_files = {s: clean_docs.list_clean_shards(docs, s) for s in fmt.SPLITS}
    if not clean_files["train"]:
        raise InputError(
            f"{docs}: no c4-train.NNNNN-of-NNNNN.json.gz files (a `c4forge clean` output "
            "or AllenAI C4 folder is expected)"
        )
    clean_files = {s: f for s, f in clean_files.items() if f}
    num_shards = None
    if args.rows_per_shard is None:
        num_shards = {s: requested[s] or len(files) for s, files in clean_files.items()}
    manifest = fmt.make_manifest(
        objective=objective.descriptor(),
        schema=schema,
        seed=args.seed,
        source=source_block(docs, clean_files),
        token_dtype=token_dtype,
        vocabulary=vocab.descriptor(),
        batch_rows=args.batch_rows,
        compression=compression,
        created_by=f"c4forge {__version__}",
    )
    return ShardsJob(
        docs=docs,
        output=output,
        vocab_state=vocab.__getstate__(),
        objective=objective,
        seed=args.seed,
        token_dtype=token_dtype,
        batch_rows=args.batch_rows,
        compression=compression,
        schema=schema,
        manifest=manifest,
        clean_files=clean_files,
        num_shards=num_shards,
        rows_per_shard=args.rows_per_shard,
        vocab_descriptor=vocab.descriptor(),
    )


# ----------------------------------------------------------------------------- rows of one clean shard


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


def encoded_documents(path: str, vocab: Any) -> Iterator[np.ndarray]:
    """SentencePiece ids (int32 arrays) of each document of a clean file, in file order."""
    batch: list[str] = []
    for rec in clean_docs.iter_documents(path):
        batch.append(rec["text"])
        if len(batch) == ENCODE_BATCH:
            yield from vocab.encode_arrays(batch)
            batch = []
    if batch:
        yield from vocab.encode_arrays(batch)


def sentence_documents(path: str, vocab: Any) -> Iterator[list[np.ndarray]]:
    """bert_mlm_nsp input: each document as the ids of its Punkt sentences (objectives.md §4.1).

    Sentences of ``ENCODE_BATCH`` documents go to SentencePiece in one batch call; each
    sentence is encoded on its own (so each starts with the dummy-prefix ``▁``, as BERT's
    per-line tokenization does).
    """
    from c4forge.objectives.bert import split_document

    sentences: list[str] = []
    counts: list[int] = []

    def flush() -> Iterator[list[np.ndarray]]:
        ids = vocab.encode_arrays(sentences)
        at = 0
        for n in counts:
            yield ids[at : at + n]
            at += n

    for rec in clean_docs.iter_documents(path):
        sents = split_document(rec["text"])
        sentences.extend(sents)
        counts.append(len(sents))
        if len(counts) == ENCODE_BATCH:
            yield from flush()
            sentences, counts = [], []
    if counts:
        yield from flush()


def _chunked(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """Lists of ``size`` consecutive items (the last one shorter)."""
    pending: list[Any] = []
    for item in items:
        pending.append(item)
        if len(pending) == size:
            yield pending
            pending = []
    if pending:
        yield pending


def clean_shard_rows(
    job: ShardsJob, vocab: Any, path: str, stats: dict[str, int]
) -> Iterator[Block]:
    """Row blocks of one clean shard, in example order, ``CHUNK_EXAMPLES`` examples at a time.

    Per-document packing windows are counted from the clean shard's first example; chunks hold a
    whole number of windows, so chunking never changes which examples share a window.
    """
    cfg = job.objective
    clean_index = clean_docs.shard_index(path)
    done = 0

    def block(columns: dict[str, np.ndarray], keys: np.ndarray) -> Block:
        nonlocal done
        n = len(keys)
        order = (np.uint64(clean_index) << np.uint64(32)) + np.arange(
            done, done + n, dtype=np.uint64
        )
        done += n
        return Block(keys.astype(np.uint64), order, columns)

    if cfg.spec.encoder_only:
        from c4forge.objectives.bert import bert_mlm_nsp, bert_rows

        # Random "next" sentences come from any document of the clean shard: all of its
        # documents are held (as token arrays) while its instances are made.
        docs = list(sentence_documents(path, vocab))
        instances = bert_mlm_nsp(
            docs,
            clean_shard_index=clean_index,
            seed=job.seed,
            config=cfg,
            vocab_size=vocab.vocab_size,
            stats=stats,
        )
        for pending in _chunked(instances, CHUNK_EXAMPLES):
            yield block(*bert_rows(pending, cfg, dtype=job.np_dtype))
        return

    from c4forge.objectives.examples import example_blocks, rows_of_block

    blocks = example_blocks(
        encoded_documents(path, vocab),
        clean_shard_index=clean_index,
        seed=job.seed,
        config=cfg,
        vocab_size=vocab.vocab_size,
        stats=stats,
    )
    if cfg.packing == "per_document":
        window = cfg.pack_window or 512
        chunks = block_chunks(blocks, max(1, CHUNK_EXAMPLES // window) * window, exact=True)
    else:  # one row per example: where a chunk ends changes nothing
        chunks = block_chunks(blocks, CHUNK_EXAMPLES, exact=False)
    for examples in chunks:
        yield block(*rows_of_block(examples, cfg, dtype=job.np_dtype))


def block_chunks(blocks: Iterable[Any], size: int, *, exact: bool) -> Iterator[Any]:
    """Regroup ExampleBlocks into chunks of ``size`` examples (``exact``) or at least ``size``."""
    from c4forge.objectives.examples import ExampleBlock

    pending: list[Any] = []
    count = 0
    for b in blocks:
        pending.append(b)
        count += len(b)
        while count >= size:
            merged = ExampleBlock.concat(pending)
            cut = size if exact else count
            yield merged.take(0, cut) if cut < count else merged
            pending = [merged.take(cut, count)] if cut < count else []
            count -= cut
    if count:
        yield ExampleBlock.concat(pending)


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


def empty_stats(objective: Any = None) -> dict[str, int]:
    """Counters of one clean shard: the objective's own, plus rows and token totals."""
    if objective is not None and objective.spec.encoder_only:
        from c4forge.objectives.bert import BERT_STAT_KEYS

        base = dict.fromkeys(BERT_STAT_KEYS, 0)
    else:
        from c4forge.objectives.examples import new_stats

        base = new_stats()
    return {**base, "rows": 0, "input_tokens": 0, "target_tokens": 0}


def count_block(stats: dict[str, int], block: Block, schema: list[dict[str, Any]]) -> None:
    stats["rows"] += block.rows
    i, t = fmt.token_counts(schema, block.columns)
    stats["input_tokens"] += i
    stats["target_tokens"] += t


def clean_stats_path(output: str, split: str, clean_index: int) -> str:
    return storage.join(
        output, fmt.PROGRESS_DIR, CLEAN_STATS_DIR, f"{split}-{clean_index:05d}.json"
    )


def shard_progress_record(job: ShardsJob, rec: dict[str, Any]) -> dict[str, Any]:
    return {**rec, "dataset_fingerprint": job.fingerprint}


def write_one_shard(
    job: ShardsJob, split: str, index: int, count: int, blocks: Iterable[Block]
) -> dict[str, Any]:
    """Sort and write one shard unless an intact copy from this build is already there."""
    name = fmt.shard_file_name(split, index, count)
    progress = fmt.Progress(job.output)
    done = progress.finished(name, job.fingerprint)
    if done is not None:  # never rewrite a finished shard (§3.4 step 3)
        return done
    columns = assemble(blocks, job.schema)
    meta = fmt.shard_metadata(job.fingerprint, job.vocab_descriptor["sha256"], split, index, count)
    rec = fmt.write_shard(
        storage.join(job.output, name),
        job.schema,
        columns,
        meta,
        batch_rows=job.batch_rows,
        compression=job.compression,
    )
    rec = shard_progress_record(job, rec)
    progress.save(rec)
    return rec


# ----------------------------------------------------------------------------- Beam transforms


class BuildRows(beam.DoFn):
    """(split, clean file) → (split, Block) per chunk; its counters go to _progress/_clean/."""

    def __init__(self, job: ShardsJob) -> None:
        self.job = job
        self.vocab: Any = None

    def setup(self) -> None:
        # Once per worker: the model bytes came with the job, no shared filesystem needed.
        from c4forge.tokenizers.vocab import Vocabulary

        vocab = Vocabulary.__new__(Vocabulary)
        vocab.__setstate__(self.job.vocab_state)
        self.vocab = vocab

    def process(self, element: tuple[str, str]) -> Iterator[tuple[str, Block]]:
        split, path = element
        stats = empty_stats(self.job.objective)
        for block in clean_shard_rows(self.job, self.vocab, path, stats):
            count_block(stats, block, self.job.schema)
            yield split, block
        # Same content on a retried bundle, so rewriting it is harmless.
        storage.write_json(
            clean_stats_path(self.job.output, split, clean_docs.shard_index(path)),
            {"split": split, "file": storage.basename(path), "stats": stats},
        )


class AssignShards(beam.DoFn):
    """Split a block by output shard (key % count); drop rows of shards already finished."""

    def __init__(self, skip: frozenset[str]) -> None:
        self.skip = skip

    def process(self, element: tuple[str, Block], counts: dict[str, int]) -> Iterator[Any]:
        split, block = element
        count = counts.get(split, 1)
        for shard, sub in split_by_shard(block, count):
            if fmt.shard_file_name(split, shard, count) not in self.skip:
                yield (split, shard, count), sub


class WriteShard(beam.DoFn):
    def __init__(self, job: ShardsJob) -> None:
        self.job = job

    def process(self, element: tuple[tuple[str, int, int], Iterable[Block]]) -> Iterator[str]:
        (split, index, count), blocks = element
        yield write_one_shard(self.job, split, index, count, blocks)["file"]


def build_pipeline(pipeline: Any, job: ShardsJob, skip: frozenset[str]) -> None:
    """Attach the job to ``pipeline``; ``skip`` = shard names already finished (not reshuffled)."""
    inputs = [(s, p) for s in job.splits for p in job.clean_files[s]]
    blocks = (
        pipeline
        | "CleanShards" >> beam.Create(inputs)  # reshuffled: clean shards spread over workers
        | "BuildRows" >> beam.ParDo(BuildRows(job))
    )
    if job.rows_per_shard is None:
        counts: Any = dict(job.num_shards or {})
    else:
        # The shard count depends on the row total: a side input (rows are materialised once).
        rps = job.rows_per_shard
        counts = beam.pvalue.AsDict(
            blocks
            | "RowsPerSplit" >> beam.Map(lambda kv: (kv[0], kv[1].rows))
            | "SumRows" >> beam.CombinePerKey(sum)
            | "ShardCount" >> beam.MapTuple(lambda split, n: (split, max(1, math.ceil(n / rps))))
        )
    _ = (
        blocks
        | "AssignShards" >> beam.ParDo(AssignShards(skip), counts)
        | "GroupByShard" >> beam.GroupByKey()
        # The writers never tokenize: leave the model bytes out of what Beam pickles for them.
        | "WriteShards" >> beam.ParDo(WriteShard(replace(job, vocab_state={})))
    )


# ----------------------------------------------------------------------------- the output folder


def _our_files(output: str) -> list[str]:
    return [n for n in storage.listdir(output) if _SHARD_FILE_RE.match(n) or ".arrow.tmp-" in n]


def remove_previous(output: str) -> None:
    """--overwrite: delete what a shard build writes here, and nothing else in the folder."""
    for name in _our_files(output):
        storage.remove(storage.join(output, name))
    storage.remove(storage.join(output, fmt.INDEX_NAME))
    storage.rmtree(storage.join(output, fmt.PROGRESS_DIR))


def build_record(job: ShardsJob) -> dict[str, Any]:
    layout: dict[str, Any] = (
        {"num_shards": job.num_shards}
        if job.rows_per_shard is None
        else {"rows_per_shard": job.rows_per_shard}
    )
    return {"dataset_fingerprint": job.fingerprint, "arrow": job.manifest["arrow"], **layout}


def _index_matches(job: ShardsJob, index: dict[str, Any]) -> bool:
    if (
        index.get("dataset_fingerprint") != job.fingerprint
        or index.get("arrow") != job.manifest["arrow"]
    ):
        return False
    if set(index.get("splits", {})) != set(job.splits):
        return False
    for split, block in index["splits"].items():
        want = (
            job.num_shards[split]
            if job.num_shards is not None
            else max(1, math.ceil(block["rows"] / job.rows_per_shard))
        )
        if block["num_shards"] != want:
            return False
    return True


def prepare_output(job: ShardsJob, overwrite: bool) -> str:
    """Decide what to do with an existing folder: 'done', 'resume' or 'fresh' (§3.4)."""
    out = job.output
    index_path = storage.join(out, fmt.INDEX_NAME)
    record_path = storage.join(out, fmt.PROGRESS_DIR, BUILD_RECORD)
    want = build_record(job)
    if storage.exists(index_path):
        index = storage.read_json(index_path)
        if not _index_matches(job, index):
            if not overwrite:
                raise OutputExistsError(
                    f"{index_path} holds a shard set built differently (dataset_fingerprint "
                    f"{index.get('dataset_fingerprint')}, this run {job.fingerprint}, or other "
                    "shard counts / Arrow options); pass --overwrite to replace it"
                )
            remove_previous(out)
        else:
            # Finished before: keep every intact shard, rebuild only damaged or missing ones.
            progress = fmt.Progress(out)
            intact = True
            for block in index["splits"].values():
                for rec in block["shards"]:
                    progress.save({**rec, "dataset_fingerprint": job.fingerprint})
                    if progress.finished(rec["file"], job.fingerprint) is None:
                        intact = False
            if intact:
                storage.rmtree(storage.join(out, fmt.PROGRESS_DIR))
                return "done"
            storage.remove(index_path)
            storage.write_json(record_path, want)
            return "resume"
    elif storage.exists(record_path):
        if storage.read_json(record_path) != want:
            if not overwrite:
                raise OutputExistsError(
                    f"{out} holds an unfinished shard build with other settings "
                    f"({record_path}); pass --overwrite to discard it"
                )
            remove_previous(out)
        else:
            _remove_tmp(out)
            return "resume"
    elif _our_files(out):
        if not overwrite:
            raise OutputExistsError(
                f"{out} already holds .arrow shards without index.json or build record; "
                "pass --overwrite to replace them"
            )
        remove_previous(out)
    storage.makedirs(storage.join(out, fmt.PROGRESS_DIR))
    storage.write_json(record_path, want)
    return "fresh"


def _remove_tmp(out: str) -> None:
    """Leftovers of writes interrupted by a crash (a finished write renamed its temp file)."""
    for name in storage.listdir(out):
        if ".tmp-" in name:
            storage.remove(storage.join(out, name))


def finished_shards(job: ShardsJob) -> frozenset[str]:
    """Names whose progress record and file sha256 agree (only knowable with fixed counts)."""
    if job.num_shards is None:
        return frozenset()
    progress = fmt.Progress(job.output)
    names = {fmt.shard_file_name(s, i, n) for s, n in job.num_shards.items() for i in range(n)}
    return frozenset(n for n in names if progress.finished(n, job.fingerprint) is not None)


# ----------------------------------------------------------------------------- after the job


def gather_stats(job: ShardsJob) -> dict[str, dict[str, int]]:
    """Sum the per-clean-shard counters per split; every clean shard must have reported."""
    out: dict[str, dict[str, int]] = {}
    for split in job.splits:
        total = empty_stats(job.objective)
        for path in job.clean_files[split]:
            rec_path = clean_stats_path(job.output, split, clean_docs.shard_index(path))
            if not storage.exists(rec_path):
                raise RuntimeError(f"clean shard {path} was not processed ({rec_path} missing)")
            for k, v in storage.read_json(rec_path)["stats"].items():
                total[k] = total.get(k, 0) + v
        out[split] = total
    return out


def finish(job: ShardsJob, stats: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Write shards that received no rows, check the totals, and write index.json last."""
    for split, st in stats.items():
        if split == "train" and st["rows"] == 0:
            raise InputError(
                f"{job.docs}: no training rows: {st['documents']} train documents read, "
                f"{st['documents_empty']} of them empty (no text)"
            )
    num_shards = job.num_shards or {
        s: max(1, math.ceil(stats[s]["rows"] / job.rows_per_shard)) for s in job.splits
    }
    progress = fmt.Progress(job.output)
    splits = {}
    for split in job.splits:
        count = num_shards[split]
        records = []
        for i in range(count):
            name = fmt.shard_file_name(split, i, count)
            rec = progress.load(name)
            if rec is None or rec.get("dataset_fingerprint") != job.fingerprint:
                rec = write_one_shard(job, split, i, count, [])  # no row hashed to this shard
            records.append(rec)
        block = fmt.split_summary(count, records)
        if block["rows"] != stats[split]["rows"]:
            raise RuntimeError(
                f"{split}: shards hold {block['rows']} rows, the build made {stats[split]['rows']}"
            )
        splits[split] = block
    index = dict(job.manifest)
    index["splits"] = splits
    index["stats"] = stats
    index["versions"] = fmt.library_versions()
    fmt.write_index(job.output, index)
    return index


def summary_lines(
    index: dict[str, Any], output: str, seconds: float | None, runner: str
) -> list[str]:
    obj = index["objective"]
    lines = [
        f"c4forge shards: {obj['name']} {obj['inputs_length']}/{obj['targets_length']} "
        f"packing={obj['packing']} seed={index['seed']} dtype={index['token_dtype']}",
    ]
    for split, block in index["splits"].items():
        pad_in = fmt.padding_fraction(block, obj["inputs_length"], "input_tokens")
        pad_tg = fmt.padding_fraction(block, obj["targets_length"], "target_tokens")
        st = index.get("stats", {}).get(split, {})
        if obj["name"] == "bert_mlm_nsp":
            counts = (
                f"sentences {st.get('sentences', 0):,}, random next "
                f"{st.get('random_next', 0):,}, truncated tokens {st.get('truncated_tokens', 0):,}"
            )
            sides = "tokens / masked predictions"
        else:
            counts = (
                f"trimmed targets {st.get('targets_truncated', 0):,}, "
                f"dropped >sentinels {st.get('too_many_spans', 0):,}"
            )
            sides = "input / target tokens"
        lines.append(
            f"  {split:<10} {block['num_shards']:>4} shards {block['rows']:>10,} rows  "
            f"{block['input_tokens']:>12,} / {block['target_tokens']:,} {sides}  "
            f"padding {pad_in:.2%} / {pad_tg:.2%}  "
            f"(docs {st.get('documents', 0):,}, empty {st.get('documents_empty', 0):,}, "
            f"{counts})"
        )
    size = sum(r["bytes"] for b in index["splits"].values() for r in b["shards"])
    lines.append(f"  files      {output}/ ({size / 1e6:,.1f} MB), manifest {output}/index.json")
    lines.append(
        f"  fingerprint {index['dataset_fingerprint']}  vocabulary {index['vocabulary']['sha256']}"
    )
    if seconds is not None:
        lines.append(f"  time       {seconds:,.1f} s on {runner}")
    return lines


class _ProgressWatcher:
    """A tqdm bar fed by the files the workers write (clean shards read, shards written)."""

    def __init__(self, job: ShardsJob, quiet: bool) -> None:
        self.job = job
        self.stop = threading.Event()
        self.thread = None if quiet else threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        from tqdm import tqdm

        clean_total = sum(len(f) for f in self.job.clean_files.values())
        shards_total = sum((self.job.num_shards or {}).values()) or None
        pdir = storage.join(self.job.output, fmt.PROGRESS_DIR)
        # A bucket listing costs a request: poll it every 10 s, a local folder every 0.5 s.
        every = 10.0 if storage.is_remote(pdir) else 0.5
        with (
            tqdm(total=clean_total, desc="clean shards read", unit="file", file=sys.stderr) as a,
            tqdm(total=shards_total, desc="shards written", unit="shard", file=sys.stderr) as b,
        ):
            while not self.stop.wait(every):
                with contextlib.suppress(OSError):
                    a.update(len(storage.listdir(storage.join(pdir, CLEAN_STATS_DIR))) - a.n)
                    b.update(sum(n.endswith(".arrow.json") for n in storage.listdir(pdir)) - b.n)

    def __enter__(self) -> _ProgressWatcher:
        if self.thread is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


_WORKER_ERROR = re.compile(r"c4forge\.errors\.(InputError|ConfigError|VerificationError): (.+)")


def _reraise_worker_error(err: BaseException) -> None:
    """A worker's InputError arrives wrapped in the runner's exception: show it as ours."""
    from c4forge import errors

    m = _WORKER_ERROR.search(str(err)) or re.search(
        r"\b(InputError|ConfigError|VerificationError): (.+)", str(err)
    )
    if m:
        message = re.sub(r"\s*\[while running '[^']*'\]\s*$", "", m.group(2).strip())
        raise getattr(errors, m.group(1))(message) from err


def run_job(
    job: ShardsJob,
    *,
    runner: str | None = None,
    workers: int | None = None,
    extra: list[str] | None = None,
    overwrite: bool = False,
    quiet: bool = False,
) -> dict[str, Any]:
    """Build (or finish) the shard set of ``job``; returns index.json's content."""
    from c4forge.pipeline.beam_options import make_runner

    started = time.time()
    storage.use_pipeline_options(list(extra or []))  # S3 endpoint/credentials for the driver
    state = prepare_output(job, overwrite)
    choice = make_runner(runner, workers, list(extra or []))
    if state != "done":
        skip = finished_shards(job)
        with _ProgressWatcher(job, quiet):
            try:
                with beam.Pipeline(runner=choice.runner, options=choice.options) as p:
                    build_pipeline(p, job, skip)
            except Exception as err:
                _reraise_worker_error(err)
                raise
        index = finish(job, gather_stats(job))
    else:
        index = storage.read_json(storage.join(job.output, fmt.INDEX_NAME))
    if not quiet:
        if state == "done":
            print(
                f"c4forge shards: {job.output} is already complete (every shard intact); nothing to do"
            )
        elif state == "resume":
            print(f"c4forge shards: finished an interrupted build in {job.output}")
        for line in summary_lines(index, job.output, time.time() - started, choice.description):
            print(line)
    return index


def run_shards_beam(args: argparse.Namespace, extra: list[str]) -> int:
    job = make_job(args)
    run_job(
        job,
        runner=args.runner,
        workers=args.workers,
        extra=extra,
        overwrite=args.overwrite,
        quiet=args.quiet,
    )
    return 0


def verify_command(
    directory: str, vocab: str | None, *, quiet: bool = False, extra_ids: int | None = None
) -> int:
    """`c4forge shards verify DIR [--vocab V]`: every §3.6 check, full checksums included."""
    run_vocab: Any = vocab
    if vocab is not None and os.path.isfile(vocab) and vocab.endswith(".model"):
        run_vocab = load_vocabulary(vocab, extra_ids).descriptor()
    shards = fmt.ShardSet.open(directory, vocab=run_vocab)
    result = shards.verify(checksums=True, progress=not quiet)
    if not quiet:
        print(
            f"c4forge shards verify: {directory} OK: {result['files']} files, {result['rows']:,} rows, "
            f"schemas, metadata, row counts and sha256 checked"
            + ("" if vocab else " (no --vocab given: vocabulary not compared)")
        )
        for line in summary_lines(shards.index, directory, None, ""):
            print(line)
    return 0
