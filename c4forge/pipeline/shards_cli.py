"""`c4forge shards`: clean documents → tokenized, corrupted, packed Arrow shards (a Beam job).

Two forms share one subparser, told apart by the first positional argument:

    c4forge shards DOCS --vocab VOCAB --output DIR [options] [Beam options]
    c4forge shards verify DIR [--vocab VOCAB_DIR]

(a documents folder literally named ``verify`` is reachable as ``./verify``). Argparse only;
the job is imported lazily in ``run`` so `--help` stays instant. Unrecognised arguments are
Beam pipeline options, passed to ``PipelineOptions`` unchanged.
"""

from __future__ import annotations

import argparse

from c4forge.pipeline.cli_common import add_runner_args

OBJECTIVE_NAMES = (
    "span_corruption",
    "prefix_lm",
    "bert_t5",
    "mass",
    "iid_replace_spans",
    "iid_drop",
    "deshuffle",
    "bert_mlm_nsp",
)


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
    p.add_argument("--objective", choices=OBJECTIVE_NAMES, default="span_corruption")
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
    bert = p.add_argument_group("bert_mlm_nsp (BERT's own MLM + NSP rows, objectives.md §4.1)")
    bert.add_argument(
        "--max-predictions-per-seq",
        type=int,
        default=None,
        help="masked positions stored per row (default 20; BERT uses 20 at 128, 80 at 512)",
    )
    bert.add_argument(
        "--short-seq-prob",
        type=float,
        default=None,
        help="probability of a shorter target length for a pair (default 0.1)",
    )
    bert.add_argument(
        "--dupe-factor",
        type=int,
        default=None,
        help="passes over the documents with different masks (default 1; BERT used 10)",
    )
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


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.errors import ConfigError

    if args.target[0] == "verify":
        if len(args.target) != 2:
            raise ConfigError("usage: c4forge shards verify DIR [--vocab VOCAB_DIR]")
        if extra:
            raise ConfigError(f"unrecognized arguments for 'shards verify': {' '.join(extra)}")
        from c4forge.pipeline.shards_beam import verify_command

        return verify_command(
            args.target[1], args.vocab, quiet=args.quiet, extra_ids=args.extra_ids
        )
    if len(args.target) != 1:
        raise ConfigError(
            f"expected one documents folder, got {len(args.target)}: {' '.join(args.target)}"
        )
    if not args.vocab:
        raise ConfigError("--vocab is required (a `c4forge vocab` folder or a .model file)")
    if not args.output:
        raise ConfigError("--output is required")
    from c4forge.pipeline.shards_beam import run_shards_beam

    return run_shards_beam(args, extra)
