"""`c4forge shards`: clean documents → tokenized, corrupted, packed Arrow shards (a Beam job).

Two forms share one subparser, told apart by the first positional argument:

    c4forge shards DOCS --vocab VOCAB --output DIR [options] [Beam options]
    c4forge shards verify DIR [--vocab VOCAB_DIR]

(a documents folder literally named ``verify`` is reachable as ``./verify``). The objective
choices and objective-only flags come from the objective registry (pure numpy, no Beam); the
job is imported lazily in ``run`` so `--help` stays quick. ``job_from_args`` is the one place an
argparse namespace becomes a typed ``ShardsJob``. Unrecognised arguments must be Beam pipeline
options (checked against Beam's own parser) and reach ``PipelineOptions`` unchanged.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from c4forge.objectives.registry import OBJECTIVES, objective_options
from c4forge.pipeline.cli_common import add_runner_args

if TYPE_CHECKING:
    from c4forge.shards.job import ShardsJob


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "shards",
        help="clean documents → span-corrupted Arrow shards (Beam job); `shards verify DIR`",
        description=(
            "Tokenize clean documents (c4forge clean output or AllenAI C4 files), apply a "
            "pretraining objective (T5 span corruption by default), pack, and write Arrow IPC "
            "stream shards plus index.json (formats.md §3). `c4forge shards verify DIR "
            "[--vocab VOCAB]` checks a finished shard set: manifest, vocabulary, schemas, row "
            "counts and every file's sha256. Unknown options are passed to Beam unchanged."
        ),
    )
    p.add_argument(
        "target",
        nargs="+",
        metavar="DOCS | verify DIR",
        help="the clean documents folder, or `verify` followed by a shard folder",
    )
    p.add_argument(
        "--vocab",
        help="`c4forge vocab` folder (vocab.json), or a plain SentencePiece .model (+ --extra-ids)",
    )
    p.add_argument(
        "--extra-ids",
        type=int,
        default=None,
        help="sentinels added to a plain .model (default 100)",
    )
    p.add_argument("--output", "-o", help="output shard folder")
    p.add_argument("--objective", choices=list(OBJECTIVES), default="span_corruption")
    p.add_argument(
        "--inputs-length",
        type=int,
        default=None,
        help="encoder row length (default: objective's; bert_mlm_nsp: max_seq_length, 128)",
    )
    p.add_argument(
        "--targets-length", type=int, default=None, help="decoder row length (default: objective's)"
    )
    p.add_argument("--noise-density", type=float, default=None, help="default 0.15")
    p.add_argument("--mean-noise-span-length", type=float, default=None, help="default 3.0")
    p.add_argument(
        "--packing",
        choices=["concat", "per_document"],
        default="concat",
        help="concat = T5 (documents concatenated, one example per row); per_document = "
        "examples never mix documents, first-fit packed with segment ids",
    )
    p.add_argument(
        "--pack-window", type=int, default=512, help="per_document: examples per first-fit window"
    )
    p.add_argument(
        "--doc-separator",
        choices=["none", "eos"],
        default="none",
        help="none = T5 (no separator between concatenated documents); eos = HF/nanoT5",
    )
    for name, options in objective_options().items():
        group = p.add_argument_group(f"{name} only ({OBJECTIVES[name].reference})")
        for option in options:
            group.add_argument(option.flag, type=option.type, default=None, help=option.help)
    p.add_argument(
        "--num-shards",
        default="auto",
        help="N (train), or train=N,validation=M; default auto = the clean shard count per split",
    )
    p.add_argument(
        "--rows-per-shard",
        type=int,
        default=None,
        help="size shards by rows instead: num_shards = ceil(rows / N) per split",
    )
    p.add_argument("--batch-rows", type=int, default=1024, help="rows per Arrow record batch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--token-dtype", choices=["auto", "uint16", "int32"], default="auto")
    p.add_argument("--compression", choices=["none", "lz4"], default="none")
    add_runner_args(p)
    p.add_argument("--overwrite", action="store_true", help="replace a shard set built differently")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    return p


COMMON_OBJECTIVE_OPTIONS = (
    "inputs_length",
    "targets_length",
    "noise_density",
    "mean_noise_span_length",
    "packing",
    "doc_separator",
    "pack_window",
)


def job_from_args(args: argparse.Namespace, extra: list[str]) -> ShardsJob:
    """The typed job of `c4forge shards DOCS …` (validated here, before any work)."""
    from c4forge.errors import ConfigError
    from c4forge.shards.job import make_job

    if len(args.target) != 1:
        raise ConfigError(
            f"expected one documents folder, got {len(args.target)}: {' '.join(args.target)}"
        )
    if not args.vocab:
        raise ConfigError("--vocab is required (a `c4forge vocab` folder or a .model file)")
    if not args.output:
        raise ConfigError("--output is required")
    own = [o.name for options in objective_options().values() for o in options]
    chosen = {name: getattr(args, name) for name in (*COMMON_OBJECTIVE_OPTIONS, *own)}
    # argparse's defaults for packing and separators are the T5 ones; "not given" is None.
    chosen["packing"] = None if args.packing == "concat" else args.packing
    chosen["doc_separator"] = None if args.doc_separator == "none" else args.doc_separator
    chosen["pack_window"] = None if args.packing == "concat" else args.pack_window
    return make_job(
        docs=args.target[0],
        output=args.output,
        vocab=args.vocab,
        objective=args.objective,
        objective_options=chosen,
        extra_ids=args.extra_ids,
        seed=args.seed,
        token_dtype=args.token_dtype,
        batch_rows=args.batch_rows,
        compression=args.compression,
        num_shards=args.num_shards,
        rows_per_shard=args.rows_per_shard,
        runner=args.runner,
        workers=args.workers,
        pipeline_args=tuple(extra),
        overwrite=args.overwrite,
        quiet=args.quiet,
    )


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.errors import ConfigError
    if args.target[0] == "verify":
        if len(args.target) != 2:
            raise ConfigError("usage: c4forge shards verify DIR [--vocab VOCAB_DIR]")
        if extra:
            raise ConfigError(f"unrecognized arguments for 'shards verify': {' '.join(extra)}")
        from c4forge.shards.verify import verify_command

        return verify_command(
            args.target[1], args.vocab, quiet=args.quiet, extra_ids=args.extra_ids
        )
    from c4forge.shards.driver import run_job

    run_job(job_from_args(args, extra))
    return 0
