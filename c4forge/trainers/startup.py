"""The lines ``c4forge train`` prints before its first step: what the run will do.

HF Trainer's "***** Running training *****" block and nanoT5's first lines are the anchor: the
model and its parameter count, device, precision and threads, the global batch in rows and
tokens, how many times the run reads each source, the learning-rate schedule with its warm-up,
where the held-out figures come from (or why there will be none), and the checkpoint a resumed
run continues. Warnings follow for what is probably a mistake: a set read many times over, a
warm-up longer than the run.
"""

from __future__ import annotations

import math
import os
from typing import Any

from c4forge.trainers import checkpoint as ckpt
from c4forge.trainers.schedules import COSINE_MIN_LR, ISR_WARMUP, warmup_note
from c4forge.trainers.threads import load_average, load_warning

# Repeating data up to ~4 epochs costs little against unique data; beyond, returns fall fast
# (Muennighoff et al. 2023, "Scaling Data-Constrained Language Models").
MANY_EPOCHS = 4.0


def startup_lines(s: Any) -> list[str]:
    """The start-up summary of ``s`` (``train.Setup``), ``c4forge train:`` first."""
    o, traj, net, data = s.opts, s.traj, s.net, s.data
    params = sum(p.numel() for p in net.model.parameters())
    lines = [
        f"c4forge train: {net.preset} ({data.family}, {net.cfg.ffn} FFN), {params:,} parameters",
        f"  device     {device_text(s)}",
        f"  batch      {batch_text(s)}",
        f"  run        {o.steps:,} steps = {o.steps * traj.batch_size:,} rows = "
        f"{o.steps * traj.batch_size * net.row_tokens:,} tokens",
    ]
    rows_lines, warnings = epochs_lines(s)
    lines += rows_lines
    lines.append(f"  schedule   {schedule_text(s)}")
    note = warmup_note(traj.schedule, o.steps, traj.warmup, s.schedule)
    if note is not None and not note.startswith("warning:"):
        lines.append(f"             {note}")
    elif note is not None:
        warnings.append(note)
    lines.append(f"  held-out   {heldout_text(s)}")
    lines.append(f"  start      {start_text(s)}")
    if s.threads is not None:
        busy = load_warning(s.threads.threads, os.cpu_count() or 1, load_average())
        warnings += [busy] if busy else []
    lines += [f"c4forge train: {w}" for w in warnings]
    return lines


def device_text(s: Any) -> str:
    dev, world = s.dev, s.info.world_size
    ranks = f" × {world} ranks" if world > 1 else ""
    if dev.kind == "cpu":
        text = "cpu, fp32"
    else:
        text = f"{dev.name} ({dev.kind}){ranks}, bf16 autocast" + (
            " + TF32 matmuls" if dev.kind == "cuda" else ""
        )
        ranks = ""
    if s.net.compiled:
        text += ", torch.compile"
    if s.threads is not None:
        t = s.threads
        text += f"{ranks}, {t.threads} torch thread{'s' if t.threads > 1 else ''} ({t.why})"
    elif ranks:
        text += ranks
    return text


def batch_text(s: Any) -> str:
    plan, net, data = s.data.plan, s.net, s.data
    b = s.traj.batch_size
    return (
        f"{b:,} rows/step ({plan.micro_rows:,} per micro-batch × {plan.grad_accum} accumulation "
        f"× {plan.world_size} rank{'s' if plan.world_size > 1 else ''}) × {net.row_tokens} "
        f"tokens ({data.inputs_length} in + {data.targets_length} out) = "
        f"{b * net.row_tokens:,} tokens/step"
    )


def epochs_lines(s: Any) -> tuple[list[str], list[str]]:
    """One line per source: its train rows and how many times the run reads them; and the
    warnings for a source read more than ``MANY_EPOCHS`` times or smaller than one batch."""
    steps, b = s.opts.steps, s.traj.batch_size
    mixture = s.data.mixture
    if mixture is None:
        rows = sum(r for _, r in s.data.shards.split_shards("train"))
        sources = [(s.data.shards_path, rows, steps * b, None)]
    else:
        from c4forge.trainers.mixture_data import realised_counts

        counts = realised_counts(mixture, s.data.plan, steps)
        sources = [
            (src.name, src.train_rows, n, rate)
            for src, n, rate in zip(mixture.sources, counts, mixture.rates)
        ]
    lines, warnings = [], []
    for name, rows, read, rate in sources:
        epochs = read / max(1, rows)
        share = "" if rate is None else f" at rate {rate:.3f}"
        lines.append(
            f"  data       {name}: {rows:,} train rows; {read:,} read{share} = {epochs:.2f} epochs"
        )
        if epochs > MANY_EPOCHS:
            small = f", fewer than one batch of {b:,}" if rows < b else ""
            warnings.append(
                f"warning: {name} has {rows:,} train rows{small}: the run reads each about "
                f"{epochs:,.1f} times (beyond ~{MANY_EPOCHS:g} epochs repeated data adds little "
                "and the model memorises it); use more data or fewer --steps"
            )
    return lines, warnings


def schedule_text(s: Any) -> str:
    """The optimizer and schedule in numbers, and where the warm-up came from."""
    traj, steps, r = s.traj, s.opts.steps, s.schedule
    w = traj.warmup
    if s.resume.state is not None:
        source = "the checkpoint's"
    elif s.opts.warmup is not None:
        source = "--warmup"
    else:
        source = "default"
    name, lr = traj.schedule, traj.lr
    warm = f"lr {r(1):.4g} → {lr:g} over {w:,} warm-up steps ({source})"
    if not w:
        warm = f"no warm-up ({source}), lr {lr:g}"
    if name == "cosine":
        shape = f"{warm}, then cosine to {COSINE_MIN_LR:g} at step {steps:,}"
    elif name == "linear":
        shape = f"{warm}, then linear to 0 at step {steps:,}"
    elif name in ("isr", "isr_decay"):
        end = int(math.floor(0.9 * steps)) if name == "isr_decay" else steps
        shape = f"relative step 1/√max(n, {w:,}) ({source}{'' if w != ISR_WARMUP else ', T5'}): "
        if w >= end:
            shape += f"{r(1):.4g} through step {end:,}"
        else:
            shape += f"{r(1):.4g} until step {w:,}, then 1/√n ({r(end):.4g} at step {end:,})"
        if end < steps:
            last = f"step {steps:,}" if end + 1 == steps else f"steps {end + 1:,}–{steps:,}"
            shape += f", then linear to 0 over {last}"
    else:
        shape = f"lr {lr:g} throughout"
    extras = [f"grad clip {traj.grad_clip:g}"] if traj.grad_clip else []
    if traj.z_loss:
        extras.append(f"z-loss {traj.z_loss:g}")
    return f"{traj.optimizer}, {name}: {shape}" + ("; " + ", ".join(extras) if extras else "")


def heldout_text(s: Any) -> str:
    """Which validation rows the evaluations read, and when; or why there will be none."""
    o, mixture = s.opts, s.data.mixture
    reason = no_heldout_reason(s, min(o.stop_after_step or o.steps, o.steps))
    if reason is not None:
        return f"none: {reason} (held-out NLL will read n/a)"
    when = f"every {o.eval_every:,} steps and at the end" if o.eval_every else "at the end"
    first = "all" if not o.eval_rows else f"the first {o.eval_rows:,}"
    if mixture is None:
        total = sum(r for _, r in s.data.shards.split_shards("validation"))
        return f"{first} of {total:,} validation rows, {when}"
    return (
        f"{first} validation rows of each source, {when}; the overall NLL pools them "
        "(token-weighted over every source's held-out target tokens, not rate-weighted)"
    )


def no_heldout_reason(s: Any, step: int) -> str | None:
    """Why a run that stopped at ``step`` has no held-out figures (None when it has or will)."""
    mixture = s.data.mixture
    if mixture is None:
        splits = s.data.shards.index["splits"]
        if "validation" not in splits or not s.data.shards.split_shards("validation"):
            return f"{s.data.shards_path} has no validation split"
    elif not any(
        src.shards.index["splits"].get("validation", {}).get("shards") for src in mixture.sources
    ):
        return "no source of the mixture has a validation split"
    every = s.opts.eval_every
    evaluated = every and step // every > s.start_step // every
    if step < s.opts.steps and not evaluated:
        return (
            f"the run stops at step {step:,}, before its end ({s.opts.steps:,}) where it "
            "evaluates, and no --eval-every evaluation falls before"
        )
    return None


def start_text(s: Any) -> str:
    """Step 0 of a fresh run, or the checkpoint a resumed run continues (and why that one)."""
    if s.resume.path is None:
        return "step 0 (a fresh run)"
    path = s.resume.path
    if s.opts.resume == "auto":
        latest = ckpt.latest_checkpoint(s.opts.output)
        same = latest is not None and os.path.samefile(latest, path)
        which = "checkpoints/latest" if same else "the newest intact checkpoint (latest is not)"
    else:
        which = "as given by --resume"
    return f"step {s.start_step:,} of {s.opts.steps:,}, from {path} ({which})"
