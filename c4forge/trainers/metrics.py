"""Run metrics: ``metrics.jsonl`` (one JSON object per log or eval step), TensorBoard when the
``tensorboard`` package is installed, and the loss-curve PNG drawn at the end.

On resume the file is cut back to the checkpoint's step first, and a checkpoint taken between
two logs carries the open window's sums (``LogWindow.to_state``), so an interrupted-and-resumed
run ends with the same records as an uninterrupted one (timings aside).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from c4forge.errors import VerificationError
from c4forge.io.storage import atomic_write_text
from c4forge.trainers.models.family import TrainingGlue

METRICS = "metrics.jsonl"
CURVE = "loss_curve.png"


def read_metrics(path: str) -> list[dict[str, Any]]:
    """Records of a metrics.jsonl; a torn last line (a crash mid-write) is ignored."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


def finite_or_none(value: Any) -> Any:
    """``value``, or None for a float NaN or infinity (a held-out loss can overflow even when
    training is healthy; the run's own stop keeps non-finite training losses out)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLog:
    """Append-only JSONL (flushed per record) plus an optional TensorBoard writer."""

    def __init__(self, run_dir: str, resume_step: int | None = None, tensorboard: bool = True):
        self.path = os.path.join(run_dir, METRICS)
        if resume_step is not None:
            kept = [r for r in read_metrics(self.path) if r.get("step", 0) <= resume_step]
            atomic_write_text(
                self.path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept)
            )
        elif os.path.exists(self.path):
            os.remove(self.path)
        self._file = open(self.path, "a", encoding="utf-8")
        self._tb = None
        if tensorboard and importlib.util.find_spec("tensorboard") is not None:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(os.path.join(run_dir, "tensorboard"))

    @property
    def tensorboard_dir(self) -> str | None:
        return self._tb.log_dir if self._tb is not None else None

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record``; a non-finite number is written as null (JSON has no NaN)."""
        record = {k: finite_or_none(v) for k, v in record.items()}
        self._file.write(json.dumps(record, sort_keys=True, allow_nan=False) + "\n")
        self._file.flush()
        if self._tb is not None:
            step = int(record["step"])
            for key, value in record.items():
                if key != "step" and isinstance(value, int | float) and math.isfinite(value):
                    self._tb.add_scalar(key.replace("_", "/", 1), value, step)

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


@dataclass
class LogWindow:
    """The device-side sums since the last log (read back only when logging) and the clock
    of the window: its start, its first step, and the seconds spent in eval/save inside it."""

    loss: Any  # torch tensors on the training device
    weight: Any
    stats: Any
    nonpad: Any
    time: float
    step: int
    paused: float = 0.0

    @classmethod
    def empty(cls, parts: int, stats: int, device: Any, step: int) -> LogWindow:
        import torch

        return cls(
            loss=torch.zeros(parts, device=device),
            weight=torch.zeros(parts, device=device),
            stats=torch.zeros(stats, device=device),
            nonpad=torch.zeros((), dtype=torch.int64, device=device),
            time=time.perf_counter(),
            step=step,
        )

    def add(self, loss: Any, weight: Any, stats: Any, nonpad: Any) -> None:
        self.loss += loss
        self.weight += weight
        self.stats += stats
        self.nonpad += nonpad

    def zero(self) -> None:
        for v in (self.loss, self.weight, self.stats, self.nonpad):
            v.zero_()

    def to_state(self, step: int, info: Any) -> dict[str, Any] | None:
        """The open window's sums for a checkpoint at ``step``; None when it is empty (the save
        fell on a log step). Called on every rank (a collective). Loss, metric and non-pad sums
        are per rank: each rank's row is gathered, so a resume on as many ranks restores every
        rank's own sums and the next log adds them in the same order, bit for bit. The weight
        count is already global (all-reduced in the step)."""
        if self.step >= step:
            return None
        import torch

        from c4forge.trainers import distributed as dist

        own = torch.cat([self.loss.double(), self.stats.double(), self.nonpad.double()[None]])
        rows = torch.zeros(info.world_size, own.numel(), dtype=torch.float64, device=own.device)
        rows[info.rank] = own
        dist.all_reduce_sum(rows, info)  # x + 0 is exact: a gather
        return {"step": self.step, "weight": self.weight.tolist(), "ranks": rows.tolist()}

    def restore(self, saved: dict[str, Any], rank: int, world_size: int) -> int:
        """Reopen the window a checkpoint saved (``to_state``); returns the non-pad tokens it
        holds over all ranks (they are in the checkpoint's total but not yet logged). Resumed
        on another number of ranks, rank 0 takes the sums of all and the others nothing."""
        import torch

        rows = saved["ranks"]
        if len(rows) == world_size:
            row = rows[rank]
        elif rank == 0:
            row = [sum(col) for col in zip(*rows)]
        else:
            row = [0.0] * len(rows[0])
        parts, stats = self.loss.numel(), self.stats.numel()
        if len(row) != parts + stats + 1 or len(saved["weight"]) != parts:
            raise VerificationError("the checkpoint's log window does not fit this run's metrics")
        f64 = torch.float64
        self.loss.copy_(torch.tensor(row[:parts], dtype=f64))
        self.stats.copy_(torch.tensor(row[parts : parts + stats], dtype=f64))
        self.nonpad.fill_(int(row[-1]))
        self.weight.copy_(torch.tensor(saved["weight"], dtype=f64))
        self.step = int(saved["step"])
        return int(sum(r[-1] for r in rows))


@dataclass
class LastFigures:
    """The newest logged figures (the run summary's), and the non-pad tokens logged so far."""

    nonpad_total: int
    loss: float | None = None
    tps: float | None = None
    nonpad_tps: float | None = None
    mfu: float | None = None
    eval: dict[str, float] | None = None  # the last eval record


@dataclass(frozen=True)
class WindowLogger:
    """Turns a ``LogWindow`` into one metrics record: the only host sync of the training loop
    (on TPU deferred to the step closure). ``fam``: the family's training (its loss parts,
    metric names and ``stats_record``)."""

    fam: TrainingGlue
    info: Any  # distributed.DistInfo
    batch_size: int
    row_tokens: int
    flops: float  # per example
    peak_flops: float | None
    lr_at: Callable[[int], float]
    xla: bool

    def __call__(
        self, step: int, window: LogWindow, last: LastFigures, log: MetricsLog | None, bar: Any
    ) -> None:
        import torch

        from c4forge.trainers import distributed as dist

        # loss and non-pad counts are per rank; the weight count is already global
        # (all-reduced in the step), so only the first two are summed over ranks.
        parts = self.fam.parts
        packed = torch.cat(
            [window.loss.double(), window.stats.double(), window.nonpad.double()[None]]
        )
        weight_t = window.weight.double().clone()

        def emit(values: Any) -> None:
            dist.all_reduce_sum(values, self.info)
            flat = values.tolist()
            sums, stat_sums, nonpad = flat[: len(parts)], flat[len(parts) : -1], flat[-1]
            now = time.perf_counter()
            seconds = max(now - window.time - window.paused, 1e-9)
            steps = step - window.step
            last.nonpad_total += int(nonpad)
            window.time, window.step, window.paused = now, step, 0.0
            record = self.record(step, steps, seconds, sums, weight_t.tolist(), stat_sums, nonpad)
            last.loss, last.tps = record["loss"], record["tokens_per_s"]
            last.nonpad_tps, last.mfu = record["nonpad_tokens_per_s"], record.get("mfu")
            if log is not None:
                log.write(record)
            if bar is not None:
                post = {"loss": f"{last.loss:.4f}", "tok/s": f"{last.tps:,.0f}"}
                if last.mfu is not None:
                    post["MFU"] = f"{100 * last.mfu:.1f}%"
                bar.set_postfix(post, refresh=False)

        if self.xla:
            import torch_xla.core.xla_model as xm

            xm.add_step_closure(emit, args=(packed,))
        else:
            emit(packed)
        window.zero()

    def record(
        self,
        step: int,
        steps: int,
        seconds: float,
        sums: list[float],
        weights: list[float],
        stat_sums: list[float],
        nonpad: float,
    ) -> dict[str, Any]:
        """The metrics record of a window of ``steps`` steps ending at ``step``."""
        from c4forge.trainers.flops import mfu

        examples = steps * self.batch_size
        tps = examples * self.row_tokens / seconds
        util = None
        if self.peak_flops:
            util = mfu(self.flops, examples / seconds, self.peak_flops, self.info.world_size)
        means = [v / max(w, 1.0) for v, w in zip(sums, weights)]
        record = {
            "step": step,
            "loss": means[0] if len(means) == 1 else sum(means),
            "lr": self.lr_at(step),
            "tokens_per_s": tps,
            "nonpad_tokens_per_s": nonpad / seconds,
            "step_time_s": seconds / max(steps, 1),
            "examples": step * self.batch_size,
        }
        if len(self.fam.parts) > 1:
            record.update(zip(self.fam.parts, means))
        record.update(self.fam.stats_record(stat_sums, weights))  # a mixture's: per source
        if util is not None:
            record["mfu"] = util
        return record


TOKEN_NLL = "nats per target token"


def end_of_run(run_dir: str, title: str, draw: bool) -> tuple[str, str | None]:
    """A run's metrics file and its loss curve (drawn by rank 0 only: ``draw``)."""
    metrics = os.path.join(run_dir, METRICS)
    curve = plot_loss_curve(metrics, os.path.join(run_dir, CURVE), title=title) if draw else None
    return metrics, curve


def plot_loss_curve(
    metrics_path: str, png_path: str, title: str = "", ylabel: str = TOKEN_NLL
) -> str | None:
    """Training loss (and held-out NLL) against step; None when there is nothing to draw.
    ``ylabel`` names the loss's unit (a classifier's loss is per example, not per token)."""
    records = read_metrics(metrics_path)
    train = [(r["step"], r["loss"]) for r in records if "loss" in r]
    evals = [(r["step"], r["eval_nll"]) for r in records if "eval_nll" in r]
    eval_label = "held-out NLL"
    if not evals:  # the bert family: MLM + NSP loss
        evals = [(r["step"], r["eval_loss"]) for r in records if "eval_loss" in r]
        eval_label = "held-out loss (MLM + NSP)"
    if not train and not evals:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sources = source_names(records)
    if sources:  # a mixture: per-source losses, and a second panel of tokens per source
        fig, (ax, tok_ax) = plt.subplots(
            2, 1, figsize=(7, 6.6), dpi=110, sharex=True, height_ratios=(3, 2)
        )
    else:
        fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    if train:
        ax.plot(*zip(*train), label="train loss", color="tab:blue", linewidth=1.4)
    if evals:
        ax.plot(*zip(*evals), "o-", label=eval_label, color="tab:orange", markersize=4)
    if sources:
        plot_sources(ax, tok_ax, records, sources)
    ax.set_xlabel("" if sources else "step")
    ax.set_ylabel(ylabel)
    ax.set_title(title or "c4forge train")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    tmp = png_path + f".tmp-{os.getpid()}.png"
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, png_path)
    return png_path


def source_names(records: list[dict[str, Any]]) -> list[str]:
    """The sources of a mixture run, from its ``tokens_<name>`` keys (first-seen order)."""
    names: dict[str, None] = {}
    for r in records:
        for key in r:
            if key.startswith("tokens_") and key != "tokens_per_s":
                names.setdefault(key[len("tokens_") :], None)
    return list(names)


def plot_sources(ax: Any, tok_ax: Any, records: list[dict[str, Any]], names: list[str]) -> None:
    """Each source's train loss (thin) and held-out NLL (dashed) on ``ax``; its cumulative
    non-pad tokens (the log windows' ``tokens_<name>`` added up) on ``tok_ax``."""
    import matplotlib.pyplot as plt

    colors = plt.get_cmap("tab10").colors[2:]
    for i, name in enumerate(names):
        color = colors[i % len(colors)]
        loss = [(r["step"], r[f"loss_{name}"]) for r in records if f"loss_{name}" in r]
        if loss:
            ax.plot(*zip(*loss), color=color, linewidth=0.8, alpha=0.8, label=f"train: {name}")
        ev = [(r["step"], r[f"eval_nll_{name}"]) for r in records if f"eval_nll_{name}" in r]
        if ev:
            ax.plot(*zip(*ev), "s--", color=color, markersize=3, label=f"held-out: {name}")
        steps, total, cum = [], 0, []
        for r in records:
            if f"tokens_{name}" in r:
                total += r[f"tokens_{name}"]
                steps.append(r["step"])
                cum.append(total)
        tok_ax.plot(steps, cum, color=color, label=name)
    tok_ax.set_ylabel("non-pad tokens trained")
    tok_ax.set_xlabel("step")
    tok_ax.grid(True, alpha=0.3)
    tok_ax.legend(fontsize="small")
