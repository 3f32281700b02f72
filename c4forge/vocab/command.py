"""``run(opts) -> VocabResult``: `c4forge vocab` for a program (``c4forge.commands``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from c4forge.vocab.options import VocabOptions

REQUESTS = (VocabOptions,)


@dataclass(frozen=True)
class VocabResult:
    """A written vocabulary folder and vocab.json's content (with this run's timing, which the
    summary shows and vocab.json does not hold)."""

    output: str
    descriptor: dict[str, Any]

    @property
    def model_path(self) -> str:
        from c4forge.vocab.vocab import MODEL_FILE

        return os.path.join(self.output, MODEL_FILE)

    @property
    def vocab_size(self) -> int:
        """Pieces plus extra ids: the ids a model's embedding must cover."""
        return int(self.descriptor["vocab_size"])

    def text(self) -> str:
        from c4forge.vocab.train import iter_summary

        return "\n".join(iter_summary(self.descriptor, self.output))

    def fingerprint(self) -> str:
        """sha256 of sentencepiece.model (vocab.json's ``sha256``, recomputed from the file)."""
        from c4forge.io.storage import sha256

        return sha256(self.model_path)


def run(opts: VocabOptions) -> VocabResult:
    """Train and write the vocabulary ``opts`` asks for; raises on failure."""
    from c4forge.vocab.train import vocab_from_options

    return VocabResult(opts.output, vocab_from_options(opts))
