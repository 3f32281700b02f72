"""``VocabOptions``: the request of one `c4forge vocab` run, with its flags (``cliconfig``).

Argparse-light (no SentencePiece) so ``--help`` stays instant; the field order is the order of
``vocab --help``. ``c4forge.vocab.command.run`` runs it (``vocab.train.vocab_from_options``).
"""

from __future__ import annotations

from dataclasses import dataclass

from c4forge.cliconfig import CliConfig, option


@dataclass(frozen=True, kw_only=True)
class VocabOptions(CliConfig):
    """One vocabulary build (``docs`` or ``mix`` names the corpus)."""

    docs: str | None = option(
        "docs",
        default=None,
        nargs="?",
        metavar="DOCS",
        help="folder of clean documents (c4-train.*.json.gz / .parquet), or one document file",
    )
    output: str = option("--output", "-o", required=True, help="output folder")
    vocab_size: int = option(
        "--vocab-size",
        default=32000,
        type=int,
        help="SentencePiece pieces, without the extra ids (default 32000, as T5)",
    )
    sample_chars: int | None = option(
        "--sample-chars",
        default=None,  # None: the default sample unless sample_sentences is given alone
        type=int,
        help="character budget of the training sample (default 1e8 with a 5e6-line budget, "
        "unless --sample-sentences is given alone: under 3 GB of memory on any corpus; the "
        "trainer needs about 21 bytes per character, said on the first line, and a sample "
        "beyond this machine's available memory is refused before any work)",
    )
    sample_sentences: int | None = option(
        "--sample-sentences",
        default=None,
        type=int,
        metavar="N",
        help="line budget instead (or on top) of --sample-chars: the N lines with the smallest "
        "sampling hashes (order-independent); alone, no character budget applies",
    )
    seed: int = option("--seed", default=0, type=int, help="sampling seed (default 0)")
    extra_ids: int = option(
        "--extra-ids", default=100, type=int, help="sentinels appended at the top (default 100)"
    )
    byte_fallback: bool = option(
        "--byte-fallback",
        default=False,
        action="store_true",
        help="decompose uncovered characters into <0xNN> byte pieces instead of <unk> (T5: off)",
    )
    character_coverage: float = option(
        "--character-coverage",
        default=0.9995,
        type=float,
        help="fraction of characters covered by single-character pieces (default 0.9995)",
    )
    num_threads: int = option(
        "--num-threads",
        default=16,
        type=int,
        help="trainer threads; part of the configuration, since it changes the model (default 16)",
    )
    mix: str | None = option(
        "--mix",
        default=None,
        metavar="LANG=W[:DIR],...",
        help="language mixture, e.g. en=10,de=1:clean_de,fr=1:clean_fr,ro=1:clean_ro (T5's "
        "10:1:1:1); weights split the sample budgets; an entry without :DIR uses DOCS",
    )
    overwrite: bool = option(
        "--overwrite",
        default=False,
        action="store_true",
        help="replace an existing vocabulary in --output",
    )
    verbose: bool = option(
        "--verbose",
        default=False,
        action="store_true",
        help="show SentencePiece's own training log",
    )
    quiet: bool = option(
        "--quiet", default=False, action="store_true", help="no progress bar or summary"
    )
