"""Benchmark the stages of `c4forge shards` separately: encode, corrupt, pack, write.

Corpus: the 1,000 real C4 documents bundled in ``c4forge/data/sample/`` repeated ``--repeat``
times (default 8, ≈ 4.3 M tokens with an 8k vocabulary). Repeating is fine here, unlike for the
clean benchmark: no stage of the shard build deduplicates or caches, so a repeated document
costs what a new one of the same length would. Vocabulary: ``--vocab DIR`` or, by default, an
8,000-piece vocabulary trained once on the sample and cached in
``~/.cache/c4forge-bench/shards-vocab-8000``.

Everything runs in this one process on one core (SentencePiece with one thread), so each
figure is tokens per second per core. Stages (all counted in source tokens):

* read     gzip + JSON of the documents (not part of the 80 % goal: I/O, shared with `clean`)
* encode   SentencePiece ``encode_arrays`` (the floor; what the job calls)
* corrupt  the T5 document pipeline: drop empty, select_random_chunk, concat 128 (concat mode
           only), pieces, span corruption, EOS, keys (``objectives.examples.example_blocks``,
           what the job runs)
* pack     rows (``rows_of_block``): zero-padded (concat) or first-fit windows of 512
           (``per_document``)
* write    sort by key, split into shards and write uncompressed Arrow stream files

corrupt, pack and write run once per packing mode. Goal: encoding ≥ 80 % of
encode + corrupt + pack + write, i.e. corrupt + pack + write ≤ 0.25 × encode, in each mode.

Usage: ``python benchmarks/shards.py [--repeat 8] [--inputs-length 512] [--vocab DIR]``
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from c4forge.formats import shards as fmt  # noqa: E402
from c4forge.objectives.examples import (  # noqa: E402
    ExampleBlock,
    example_blocks,
    new_stats,
    rows_of_block,
)
from c4forge.objectives.registry import make_config  # noqa: E402
from c4forge.vocab.vocab import Vocabulary  # noqa: E402

SAMPLE = ROOT / "c4forge" / "data" / "sample" / "c4-sample.00000-of-00001.json.gz"
CACHE = Path(os.path.expanduser("~/.cache/c4forge-bench"))


def get_vocab(path: str | None, pieces: int) -> Vocabulary:
    if path:
        return Vocabulary.load(path)
    out = CACHE / f"shards-vocab-{pieces}"
    if not (out / "vocab.json").exists():
        from c4forge.vocab.train import Source, build_vocab

        with tempfile.TemporaryDirectory() as tmp:
            docs = Path(tmp) / "c4-train.00000-of-00001.json.gz"
            docs.write_bytes(SAMPLE.read_bytes())
            print(f"training a {pieces}-piece vocabulary on the sample (once) → {out}")
            build_vocab([Source("en", tmp)], str(out), vocab_size=pieces, progress=False)
    return Vocabulary.load(str(out))


def write_shards(
    tmp: str,
    packing: str,
    spec: list,
    columns: dict[str, np.ndarray],
    keys: np.ndarray,
    num_shards: int,
    vocab: Vocabulary,
) -> int:
    """The job's write stage: split rows by key % num_shards, sort each shard, write Arrow."""
    shard = keys % np.uint64(num_shards)
    written = 0
    for s in range(num_shards):
        sel = np.flatnonzero(shard == s)
        sel = sel[np.argsort(keys[sel], kind="stable")]
        rec = fmt.write_shard(
            os.path.join(tmp, f"{packing}-" + fmt.shard_file_name("train", s, num_shards)),
            spec,
            {k: v[sel] for k, v in columns.items()},
            fmt.shard_metadata("bench", vocab.sha256, "train", s, num_shards),
        )
        written += rec["bytes"]
    return written


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: kB


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=8, help="copies of the 1,000-document sample")
    ap.add_argument("--inputs-length", type=int, default=512)
    ap.add_argument(
        "--vocab", default=None, help="a `c4forge vocab` folder (default: train 8k once)"
    )
    ap.add_argument("--pieces", type=int, default=8000, help="pieces of the default vocabulary")
    ap.add_argument("--num-shards", type=int, default=8)
    ap.add_argument(
        "--beam",
        action="store_true",
        help="also run the whole `c4forge shards` job (1 in-process worker) on the same corpus",
    )
    args = ap.parse_args(argv)

    vocab = get_vocab(args.vocab, args.pieces)
    timings: dict[str, float] = {}  # process CPU seconds (other processes on the box do not count)
    walls: dict[str, float] = {}

    class stage:
        """Time a block in CPU seconds (the per-core figure) and wall seconds (I/O waits too)."""

        def __init__(self, name: str) -> None:
            self.name = name

        def __enter__(self) -> None:
            self.cpu, self.wall = time.process_time(), time.perf_counter()

        def __exit__(self, *exc: object) -> None:
            timings[self.name] = time.process_time() - self.cpu
            walls[self.name] = time.perf_counter() - self.wall

    with stage("read"):
        for _ in range(args.repeat):  # read (gunzip + JSON) as often as the corpus repeats it
            with gzip.open(SAMPLE, "rt", encoding="utf-8") as f:
                texts = [json.loads(line)["text"] for line in f]
    texts = texts * args.repeat

    with stage("encode"):
        docs = []
        for i in range(0, len(texts), 256):
            docs.extend(vocab.encode_arrays(texts[i : i + 256]))
    tokens = sum(len(d) for d in docs)
    chars = sum(len(x) for x in texts)
    dtype = np.dtype(fmt.choose_token_dtype(vocab.embedding_size))

    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for packing in ("concat", "per_document"):
            cfg = make_config(
                "span_corruption",
                inputs_length=args.inputs_length,
                packing=packing,
                extra_ids=vocab.extra_ids,
            )
            spec = fmt.column_spec(
                "span_corruption", packing, cfg.inputs_length, cfg.targets_length, dtype.name
            )
            with stage(f"corrupt ({packing})"):
                examples = ExampleBlock.concat(
                    list(
                        example_blocks(
                            docs,
                            clean_shard_index=0,
                            seed=0,
                            config=cfg,
                            vocab_size=vocab.vocab_size,
                            stats=new_stats(),
                        )
                    )
                )
            with stage(f"pack ({packing})"):
                columns, keys = rows_of_block(examples, cfg, dtype=dtype)
            # Warm-up: pyarrow's IPC writer imports modules on first use (not per-token cost).
            fmt.write_shard(
                os.path.join(tmp, "warmup.arrow"), spec, {k: v[:1] for k, v in columns.items()}, {}
            )
            with stage(f"write ({packing})"):
                written = write_shards(tmp, packing, spec, columns, keys, args.num_shards, vocab)
            results[packing] = (cfg, len(examples), columns, written)

    def pad(cols: dict[str, np.ndarray], name: str) -> float:
        return 1 - np.count_nonzero(cols[name]) / cols[name].size

    cfg, n_examples, columns, written = results["concat"]
    print(
        f"corpus: {args.repeat} x the 1,000-document real C4 sample = {len(texts):,} documents, "
        f"{chars:,} characters, {tokens:,} tokens ({vocab.num_pieces:,}-piece vocabulary)"
    )
    print(
        f"objective: span_corruption {cfg.inputs_length}/{cfg.targets_length} (pieces of "
        f"{cfg.tokens_length}); {n_examples:,} examples (concat); one core, one process"
    )
    print(f"{'stage':<26}{'CPU s':>8}{'wall s':>8}{'tokens/s/core':>16}")
    for name, sec in timings.items():
        print(f"{name:<26}{sec:>8.2f}{walls[name]:>8.2f}{tokens / max(sec, 1e-9):>16,.0f}")
    for packing in ("concat", "per_document"):
        rest = sum(timings[f"{st} ({packing})"] for st in ("corrupt", "pack", "write"))
        print(
            f"{packing:<13} corrupt + pack + write = {rest / timings['encode']:.2f} x encode; "
            f"encoding share of the build (CPU) {timings['encode'] / (timings['encode'] + rest):.1%}"
            f" (goal >= 80%, i.e. <= 0.25 x)"
        )
    for packing in ("concat", "per_document"):
        cfg, n_examples, cols, written = results[packing]
        print(
            f"padding {packing:<13} {pad(cols, 'inputs'):.2%} enc / {pad(cols, 'targets'):.2%} dec "
            f"({len(cols['inputs']):,} rows from {n_examples:,} examples); "
            f"{written / 1e6:,.1f} MB in {args.num_shards} shards"
        )
    print(f"peak RSS {peak_rss_mb():,.0f} MB")
    if args.beam:
        beam_job(args, vocab, timings["encode"], tokens)
    return 0


def beam_job(args: argparse.Namespace, vocab: Vocabulary, encode_cpu: float, tokens: int) -> None:
    """The real job end to end: the corpus as two C4-release train files, one worker in-process."""
    from c4forge.cli import main as cli

    with gzip.open(SAMPLE, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    with tempfile.TemporaryDirectory() as tmp:
        docs = Path(tmp) / "docs"
        docs.mkdir()
        half = args.repeat // 2 or 1
        for i, copies in enumerate((half, args.repeat - half)):
            with gzip.open(docs / f"c4-train.{i:05d}-of-00002.json.gz", "wb", compresslevel=1) as f:
                f.write(b"".join(lines) * copies)
        vocab_dir = args.vocab or str(CACHE / f"shards-vocab-{args.pieces}")
        for run in ("warm-up", "timed"):  # the first run pays Beam's imports (~2 CPU s), once
            cpu, wall = time.process_time(), time.perf_counter()
            argv = ["shards", str(docs), "--vocab", vocab_dir, "--output", str(Path(tmp) / run)]
            cli([*argv, "--inputs-length", str(args.inputs_length), "--workers", "1", "--quiet"])
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    print(
        f"whole Beam job (DirectRunner, 1 in-process worker): {cpu:.2f} CPU s, {wall:.2f} wall s, "
        f"{tokens / cpu:,.0f} tokens/s/core; SentencePiece share of its CPU time: "
        f"{encode_cpu / cpu:.1%}"
    )


if __name__ == "__main__":
    sys.exit(main())
