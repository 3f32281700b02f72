"""``run(request) -> result``: `c4forge train` and `c4forge export` for a program
(``c4forge.commands``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, overload

from c4forge.trainers.cli_export import ExportOptions
from c4forge.trainers.options import TrainOptions
from c4forge.trainers.summary import RunSummary

REQUESTS = (TrainOptions, ExportOptions)


@dataclass(frozen=True)
class TrainResult:
    """A training run's folder, its latest checkpoint (None: the run saved none) and the
    summary the run ends with."""

    output: str
    checkpoint: str | None
    summary: RunSummary

    def text(self) -> str:
        return self.summary.text()

    def fingerprint(self) -> str:
        """sha256 of the latest checkpoint's weights (a run without one is an error here)."""
        from c4forge.errors import C4ForgeError
        from c4forge.io.storage import sha256

        if self.checkpoint is None:
            raise C4ForgeError(f"{self.output}: training finished without a checkpoint")
        return sha256(os.path.join(self.checkpoint, "model.safetensors"))


@dataclass(frozen=True)
class ExportResult:
    """An HF folder written from a checkpoint: ``export``'s summary (checkpoint, step,
    architecture, parameters, files)."""

    output: str
    summary: dict[str, Any]

    def text(self) -> str:
        from c4forge.trainers.cli_export import UNTIED_NOTE

        s = self.summary
        text = (
            f"exported {s['checkpoint']} (step {s['step']}, ffn {s['ffn']}, "
            f"{s['parameters'] / 1e6:.1f}M parameters, vocab {s['vocab_size']} / "
            f"embedding {s['embedding_size']})\n"
            f"  -> {s['output']}: {', '.join(s['files'])}\n"
            f"  load with: transformers.{s['architecture']}.from_pretrained({self.output!r})"
        )
        if s["architecture"] == "T5ForConditionalGeneration" and not s["tied"]:
            text += "\n" + UNTIED_NOTE
        return text

    def fingerprint(self) -> str:
        """sha256 of the exported model.safetensors."""
        from c4forge.io.storage import sha256

        return sha256(os.path.join(self.output, "model.safetensors"))


@overload
def run(request: TrainOptions) -> TrainResult: ...
@overload
def run(request: ExportOptions) -> ExportResult: ...
def run(request: TrainOptions | ExportOptions) -> TrainResult | ExportResult:
    """Train (or resume) the run, or export the checkpoint, ``request`` asks for; raises on
    failure."""
    if isinstance(request, ExportOptions):
        return _export(request)
    from c4forge.trainers.checkpoint import latest_checkpoint
    from c4forge.trainers.train import train

    summary = train(request)
    return TrainResult(request.output, latest_checkpoint(request.output), summary)


def _export(o: ExportOptions) -> ExportResult:
    from c4forge.errors import ConfigError
    from c4forge.trainers.export import export

    if not o.output:
        raise ConfigError("export: give the output folder (--output DIR)")
    summary = export(
        o.checkpoint,
        o.output,
        vocab_path=o.vocab,
        overwrite=o.overwrite,
        embed_token_copies=o.embed_token_copies,
        dropout_rate=o.dropout_rate,
        model_max_length=o.model_max_length,
    )
    return ExportResult(o.output, summary)
