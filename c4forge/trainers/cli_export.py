"""`c4forge export RUN_OR_CHECKPOINT --output DIR`: an HF folder of the run's model family
(T5ForConditionalGeneration for t5 runs, BertForPreTraining for bert runs)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from c4forge.cliconfig import CliConfig, flag, option


@dataclass(frozen=True, kw_only=True)
class ExportOptions(CliConfig):
    """One export (its fields, in ``export --help`` order, declare their flags)."""

    checkpoint: str = option(
        "checkpoint",
        metavar="RUN_OR_CHECKPOINT",
        help="a `c4forge train` run folder (its checkpoints/latest) or one step-XXXXXXXX "
        "checkpoint folder",
    )
    output: str | None = option("--output", "-o", default=None, help="HF folder to write")
    vocab: str | None = option(
        "--vocab",
        default=None,
        help="vocabulary directory (c4forge vocab) or plain SentencePiece .model; default: "
        "RUN/vocab, else the one recorded in the checkpoint",
    )
    overwrite: bool = option(
        "--overwrite", default=False, action="store_true", help="replace an existing output folder"
    )
    dropout_rate: float | None = option(
        "--dropout-rate",
        default=None,
        type=float,
        help="dropout_rate written to config.json (default: the model's, 0.0; 0.1 for fine-tuning)",
    )
    model_max_length: int | None = option(
        "--model-max-length",
        default=None,
        type=int,
        help="tokenizer model_max_length (default: the run's inputs_length, else 512)",
    )
    embed_token_copies: bool = option(
        "--embed-token-copies",
        default=False,
        action="store_true",
        help="also store encoder/decoder.embed_tokens.weight (for transformers releases that "
        "report them missing)",
    )


# transformers 5.x's T5Config ties the head whatever config.json says, then finds two different
# tensors and logs that it will not tie them (model.md §8 gives the lines read on 5.24, and
# tests/test_export_tie_warning.py the layouts tried): expected, and its advice is wrong.
UNTIED_NOTE = (
    "  transformers 5.x logs that it will NOT tie shared.weight and lm_head.weight: expected (the "
    "model is untied, as T5.1.1); do not pass tie_word_embeddings=False, which also unties and "
    "randomly initialises the encoder's and decoder's input embeddings\n"
    "  (its T5Config sets tie_word_embeddings=True whatever config.json says, reading the file's "
    "false only to turn off the d^-1/2 logit scaling; no folder layout loads silently with these "
    "logits: model.md §8; transformers.logging.set_verbosity_error() hides it)"
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "export",
        help="export a training run or checkpoint to a HF T5ForConditionalGeneration or "
        "BertForPreTraining folder",
        description=(
            "Write config.json, model.safetensors and the tokenizer files (t5 runs: also "
            "generation_config.json and spiece.model for T5Tokenizer; bert runs: a tokenizer that "
            "gives [CLS] A [SEP] B [SEP] with segment ids). RUN_OR_CHECKPOINT is a run directory "
            "(its checkpoints/latest is used) or one step-XXXXXXXX checkpoint directory; the "
            "vocabulary comes from the run's own copy (RUN/vocab) unless --vocab is given."
        ),
    )
    out = flag("output_pos", nargs="?", metavar="OUT", help="same as --output")
    ExportOptions.add_flags(p, insert_after={"checkpoint": [out]})


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.errors import ConfigError

    output = args.output or args.output_pos
    if not output:
        raise ConfigError("export: give the output folder (--output DIR)")
    if args.output and args.output_pos and args.output != args.output_pos:
        raise ConfigError("export: two different output folders given")
    from c4forge.trainers.command import run as run_export

    print(run_export(ExportOptions.from_args(args, output=output)).text())
    return 0
