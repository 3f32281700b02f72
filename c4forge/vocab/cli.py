"""`c4forge vocab`: clean documents → SentencePiece unigram vocabulary with 100 sentinels.

Argparse only here; training code is imported in `run` so `c4forge --help` stays instant.
"""

from __future__ import annotations

import argparse

from c4forge.vocab.options import VocabOptions


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
    VocabOptions.add_flags(p)
    return p


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.vocab.command import run as run_vocab

    opts = VocabOptions.from_args(args)
    result = run_vocab(opts)
    if not opts.quiet:
        print(result.text())
    return 0
