"""``RunSummary``: what one ``c4forge train`` run did, and the human-readable lines it ends with."""

from __future__ import annotations

from dataclasses import dataclass, field


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
