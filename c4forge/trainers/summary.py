"""``RunSummary``: what one ``c4forge train`` run did, and the human-readable lines it ends with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# What a mixture run's overall held-out NLL is: every source's held-out rows pooled, each target
# token weighing the same (model.md §3's metric over the union), so a source with more or longer
# held-out targets weighs more; the rates do not enter. The summary adds the rate-weighted mean.
POOLED_NLL = "pooled: token-weighted over the held-out target tokens of every source"


@dataclass
class RunSummary:
    steps: int
    start_step: int
    final_loss: float | None
    evaluation: dict[str, float] | None  # the last eval record (keys eval_…)
    eval_line: str | None  # the family's one-line reading of it
    tokens_per_s: float | None
    nonpad_tokens_per_s: float | None
    mfu: float | None
    seconds: float
    checkpoint: str | None
    curve: str | None
    metrics: str
    tensorboard: str | None
    mixture_lines: list[str] = field(default_factory=list)  # requested vs realised rates
    held_out_note: str | None = None  # why it is n/a, or how a mixture's overall NLL is made

    @classmethod
    def of(cls, last: Any, **rest: Any) -> RunSummary:
        """The summary with the newest logged figures of ``last`` (``metrics.LastFigures``)."""
        return cls(
            final_loss=last.loss,
            evaluation=last.eval,
            tokens_per_s=last.tps,
            nonpad_tokens_per_s=last.nonpad_tps,
            mfu=last.mfu,
            **rest,
        )

    @property
    def eval_nll(self) -> float | None:
        return (self.evaluation or {}).get("eval_nll")

    @property
    def eval_ppl(self) -> float | None:
        return (self.evaluation or {}).get("eval_ppl")

    def text(self) -> str:
        def fmt(v: float | None, spec: str) -> str:
            return "n/a" if v is None else format(v, spec)

        held_out = (
            f"held-out NLL {fmt(self.eval_nll, '.4f')} nats/token, "
            f"perplexity {fmt(self.eval_ppl, '.2f')}"
        )
        if self.evaluation and self.eval_nll is None:
            held_out = str(self.eval_line)
        if self.held_out_note:
            held_out += f" ({self.held_out_note})"
        lines = [
            f"trained steps {self.start_step} → {self.steps} in {self.seconds:.1f} s",
            f"final train loss {fmt(self.final_loss, '.4f')}",
            held_out,
            *self.mixture_lines,
            f"throughput {fmt(self.tokens_per_s, ',.0f')} tokens/s "
            f"({fmt(self.nonpad_tokens_per_s, ',.0f')} non-pad), MFU "
            + ("n/a (unknown device peak)" if self.mfu is None else f"{100 * self.mfu:.1f} %"),
            f"checkpoint: {self.checkpoint or 'none'}",
            f"loss curve: {self.curve or 'none'}",
            f"metrics:    {self.metrics}"
            + (f" (TensorBoard: {self.tensorboard})" if self.tensorboard else ""),
        ]
        return "\n".join(lines)


def mixture_lines(mixture: Any, plan: Any, step: int, ev: dict[str, float] | None) -> list[str]:
    """A mixture run's requested and realised rates over the rows of steps ``[0, step)``, and
    the last held-out NLL of each source (``mixture``: ``mixture_data.Mixture`` or None)."""
    if mixture is None:
        return []
    from c4forge.trainers.mixture_data import rate_lines, realised_counts

    lines = rate_lines(mixture, realised_counts(mixture, plan, step))
    ev = ev or {}
    per = [f"{n} {ev[f'eval_nll_{n}']:.4f}" for n in mixture.names if f"eval_nll_{n}" in ev]
    if per:
        line = "held-out NLL per source: " + ", ".join(per)
        if len(per) == len(mixture.names):
            mean = sum(r * ev[f"eval_nll_{n}"] for n, r in zip(mixture.names, mixture.rates))
            line += f"; weighted by the mixing rates {mean:.4f}"
        lines.append(line)
    return lines
