"""``run(request) -> result``: `c4forge finetune`, `evaluate` and `glue` for a program
(``c4forge.commands``)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, overload

from c4forge.finetune.options import EvaluateOptions, FinetuneOptions, GlueOptions

REQUESTS = (FinetuneOptions, EvaluateOptions, GlueOptions)


@dataclass(frozen=True)
class FinetuneResult:
    """A fine-tuning folder and results.json's content; ``stopped_at``: the step a
    ``--stop-after-step`` run stopped at (no results yet; ``--resume`` continues it)."""

    output: str
    results: dict[str, Any]
    stopped_at: int | None = None

    @property
    def metrics(self) -> dict[str, Any]:
        """Per evaluated split, its metrics (``{"dev": {"accuracy": …}}``)."""
        return dict(self.results.get("metrics", {}))

    def text(self) -> str:
        if self.stopped_at is not None:
            return f"c4forge finetune: stopped after step {self.stopped_at} (resume with --resume)"
        from c4forge.finetune.outputs import summary_text

        return summary_text(self.results, self.output)

    def fingerprint(self) -> str:
        """sha256 of predictions.jsonl: every prediction the model made on the dev split(s)."""
        return _predictions_sha256(self.output)


@dataclass(frozen=True)
class EvaluateResult(FinetuneResult):
    """A scored split: the folder its results.json and predictions.jsonl went to."""

    def text(self) -> str:
        from c4forge.finetune.clean_subset import summary_lines
        from c4forge.finetune.outputs import summary_text

        text = summary_text(self.results, self.output, command="evaluate")
        if "clean_subset" in self.results:
            text += "\n" + "\n".join(summary_lines(self.results["clean_subset"]))
        return text


@dataclass(frozen=True)
class GlueResult:
    """A `c4forge glue` folder (glue.json, glue.md, the plots) and its closing table."""

    output: str
    table: str

    def text(self) -> str:
        return self.table

    def fingerprint(self) -> str:
        """sha256 of glue.json: every task's score of every head, init and seed."""
        from c4forge.io.storage import sha256

        return sha256(os.path.join(self.output, "glue.json"))


@overload
def run(request: FinetuneOptions) -> FinetuneResult: ...
@overload
def run(request: EvaluateOptions) -> EvaluateResult: ...
@overload
def run(request: GlueOptions) -> GlueResult: ...
def run(request: FinetuneOptions | EvaluateOptions | GlueOptions) -> FinetuneResult | GlueResult:
    """Fine-tune, score or run the GLUE table as ``request`` asks; raises on failure."""
    if isinstance(request, EvaluateOptions):
        from c4forge.finetune.evaluate_run import evaluate_run

        results, out = evaluate_run(request)
        return EvaluateResult(out, results)
    if isinstance(request, GlueOptions):
        from c4forge.finetune.glue import run_glue

        return GlueResult(request.output, run_glue(request))
    from c4forge.finetune.loop import finetune

    results = finetune(request)
    if "stopped_at" in results:
        return FinetuneResult(request.output, {}, stopped_at=results["stopped_at"])
    return FinetuneResult(request.output, results)


def _predictions_sha256(folder: str) -> str:
    from c4forge.finetune.outputs import PREDICTIONS
    from c4forge.io.storage import sha256

    return sha256(os.path.join(folder, PREDICTIONS))
