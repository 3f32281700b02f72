"""``run(opts) -> TrainResult``: `c4forge train` for a program (``c4forge.commands``)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from c4forge.trainers.options import TrainOptions
from c4forge.trainers.summary import RunSummary

REQUESTS = (TrainOptions,)


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


def run(opts: TrainOptions) -> TrainResult:
    """Train (or resume) the run ``opts`` asks for; raises on failure."""
    from c4forge.trainers.checkpoint import latest_checkpoint
    from c4forge.trainers.train import train

    summary = train(opts)
    return TrainResult(opts.output, latest_checkpoint(opts.output), summary)
