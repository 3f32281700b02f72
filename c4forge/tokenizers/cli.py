"""`c4forge vocab`: clean documents → SentencePiece unigram vocabulary with 100 sentinels.

Argparse only here; training code is imported in `run` so `c4forge --help` stays instant.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "vocab",
        help="clean documents → SentencePiece vocabulary (T5 conventions, 100 sentinels)",
        description=(
            "Train a SentencePiece unigram vocabulary with T5's conventions (pad 0, eos 1, unk 2, "
            "no BOS, nmt_nfkc, coverage 0.9995) on a deterministic, order-independent sample of the "
            "train split of a clean corpus (`c4forge clean` output or AllenAI C4 files), then append "
            "100 sentinels so <extra_id_0> is the last id. Writes sentencepiece.model, "
            "sentencepiece.extra_ids.model and vocab.json (last). A small corpus needs a small "
            "vocabulary: the bundled 1,000-document sample supports about 2,000-8,000 pieces."
        ),
    )
    p.add_argument(
        "docs",
        nargs="?",
        metavar="DOCS",
        help="folder of clean documents (c4-train.*.json.gz / .parquet), or one document file",
    )
    p.add_argument("--output", "-o", required=True, help="output folder")
    p.add_argument(
        "--vocab-size",
        type=int,
        default=32000,
        help="SentencePiece pieces, without the extra ids (default 32000, as T5)",
    )
    p.add_argument(
        "--sample-chars",
        type=int,
        default=None,
        help="character budget of the training sample (default 5e8 unless --sample-sentences "
        "is given alone: ~10-14 GB of trainer memory)",
    )
    p.add_argument(
        "--sample-sentences",
        type=int,
        default=None,
        metavar="N",
        help="line budget instead (or on top) of --sample-chars: the N lines with the smallest "
        "sampling hashes (order-independent); alone, no character budget applies",
    )
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default 0)")
    p.add_argument(
        "--extra-ids", type=int, default=100, help="sentinels appended at the top (default 100)"
    )
    p.add_argument(
        "--byte-fallback",
        action="store_true",
        help="decompose uncovered characters into <0xNN> byte pieces instead of <unk> (T5: off)",
    )
    p.add_argument(
        "--character-coverage",
        type=float,
        default=0.9995,
        help="fraction of characters covered by single-character pieces (default 0.9995)",
    )
    p.add_argument(
        "--num-threads",
        type=int,
        default=16,
        help="trainer threads; part of the configuration, since it changes the model (default 16)",
    )
    p.add_argument(
        "--mix",
        default=None,
        metavar="LANG=W[:DIR],...",
        help="language mixture, e.g. en=10,de=1:clean_de,fr=1:clean_fr,ro=1:clean_ro (T5's "
        "10:1:1:1); weights split the sample budgets; an entry without :DIR uses DOCS",
    )
    p.add_argument(
        "--overwrite", action="store_true", help="replace an existing vocabulary in --output"
    )
    p.add_argument("--verbose", action="store_true", help="show SentencePiece's own training log")
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    return p


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.errors import ConfigError
    from c4forge.tokenizers.train import (
        DEFAULT_SAMPLE_CHARS,
        Source,
        build_vocab,
        iter_summary,
        parse_mix,
    )

    # --sample-sentences alone is a pure line budget; otherwise the character budget applies.
    sample_chars = args.sample_chars
    if sample_chars is None and args.sample_sentences is None:
        sample_chars = DEFAULT_SAMPLE_CHARS
    if args.mix:
        sources = parse_mix(args.mix, args.docs)
    elif args.docs:
        sources = [Source("en", args.docs, 1.0)]
    else:
        raise ConfigError("give a DOCS folder, or --mix LANG=W:DIR,...")
    desc = build_vocab(
        sources,
        args.output,
        vocab_size=args.vocab_size,
        seed=args.seed,
        sample_chars=sample_chars,
        sample_sentences=args.sample_sentences,
        extra_ids=args.extra_ids,
        byte_fallback=args.byte_fallback,
        character_coverage=args.character_coverage,
        num_threads=args.num_threads,
        overwrite=args.overwrite,
        progress=not args.quiet,
        verbose=args.verbose,
    )
    if not args.quiet:
        for line in iter_summary(desc, args.output):
            print(line)
    return 0
