"""The training loop of ``c4forge train`` (model.md §4–§7, finetune.md §2), read top to bottom.

``setup`` is a list of calls, each returning what it builds: device and process group, the
checkpoint to resume and what it fixes (``resume.py``), the data (``run_data.py``), the model,
determinism, optimizer and schedule, the restored position; then it prints what the run will do
(``startup.py``). ``run`` is the loop: step, log
(``metrics.py``), eval, checkpoint (``checkpoint.py``), hooks. The shards' objective picks the
model family; what differs between families comes from ``families.py``.

One process per device. The data position is the global step, so a resumed run rebuilds its
loader at ``step`` and continues with the exact next batch. Inside a step nothing reads a value
back to the host: loss and token counts accumulate on the device and are read every
``--log-every`` steps. Loss normalisation (model.md §5): the weight count ``W`` of the *global*
batch is all-reduced first; every rank back-propagates ``world · Σ_local w·CE / W``, and DDP's
gradient average turns that into the single-device gradient of ``Σ w·CE / W`` (per loss part).
Dropout masks of micro-batch ``m`` of step ``s`` come from a seed of ``(seed, s, m)`` counted
over the global batch, so exact resume and "2 ranks = 1 rank × 2 accumulation" hold with dropout.
"""

from __future__ import annotations

import functools
import gc
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from c4forge.errors import ConfigError
from c4forge.io import ownership
from c4forge.progress import progress
from c4forge.trainers import checkpoint as ckpt
from c4forge.trainers import distributed as dist
from c4forge.trainers import models
from c4forge.trainers.data import VERIFY_MODES
from c4forge.trainers.device import DeviceInfo, is_out_of_memory, resolve_device
from c4forge.trainers.health import Health, check_finite_options, gradient_norm
from c4forge.trainers.metrics import (
    LastFigures,
    LogWindow,
    MetricsLog,
    WindowLogger,
    end_of_run,
)
from c4forge.trainers.models.family import ModelConfig, TrainingGlue
from c4forge.trainers.optim import model_optimizer, schedule_note, set_lr
from c4forge.trainers.options import TrainOptions, Trajectory
from c4forge.trainers.resume import ModelChoice, Resume, find_resume, model_choice
from c4forge.trainers.run_data import (
    RowCheck,
    RunData,
    check_first_rows,
    make_loader,
    open_run_data,
    validation_batches,
)
from c4forge.trainers.schedules import schedule_fn
from c4forge.trainers.startup import no_heldout_reason, startup_lines
from c4forge.trainers.summary import POOLED_NLL, RunSummary, mixture_lines
from c4forge.trainers.threads import ThreadChoice, set_threads
from c4forge.vocab.vocab_files import copy_run_vocab

__all__ = ["RunSummary", "TrainOptions", "setup", "run", "train"]

StepHook = Callable[[int], None]


@ownership.owns_output(
    "train", lambda opts, *_, **__: opts.output if dist.env_info().is_main else None
)
def train(opts: TrainOptions, hooks: Sequence[StepHook] = ()) -> RunSummary:
    """Set up, train to ``--steps``, leave the process group; each of ``hooks`` is called with
    the step number after every step's log, eval and checkpoint (the resume tests kill from one).

    Teardown order matters with gloo: the DDP wrapper's reducer (and the optimizer and loader
    around it) hold the process group, whose C++ worker threads are joined only when the last
    reference goes. Left to the garbage collector (the setup sits in reference cycles) that
    happened during interpreter shutdown, where a rank could abort with "terminate called
    without an active exception" while its peer was still in the final barrier. So the setup
    is dropped and collected here, every rank then meets at a barrier, and only then is the
    group destroyed (``distributed.shutdown``)."""
    s: Setup | None = None
    finished = False
    if dist.env_info().is_main:  # it holds the run folder: a killed save's leftovers go
        ckpt.remove_debris(opts.output)
    try:
        s = setup(opts)
        summary = run(s, hooks)
        finished = True
    finally:
        s = None  # drop DDP, optimizer, loader: the last references to the group
        gc.collect()
        dist.shutdown(synchronize=finished)  # after an error no barrier: peers may never come
    return summary


# ============================================================================ setup


@dataclass(frozen=True)
class Net:
    """The model and the views of it the loop calls (compiled forward, DDP-wrapped train)."""

    preset: str
    cfg: ModelConfig  # the family's model config
    model: torch.nn.Module  # the parameters (saved, clipped, exported)
    forward_model: torch.nn.Module  # evaluation path (compiled, no DDP)
    train_model: torch.nn.Module  # training path (compiled, DDP-wrapped)
    compiled: bool
    flops: float  # per example (MFU)
    row_tokens: int  # tokens per row (throughput)
    check: RowCheck  # the family's row checks


@dataclass(frozen=True)
class Setup:
    """Everything ``run`` needs, built once by ``setup``."""

    opts: TrainOptions
    info: dist.DistInfo  # this process among the others
    dev: DeviceInfo  # its device and precision
    resume: Resume
    data: RunData
    fam: TrainingGlue  # data.fam: what differs between families
    traj: Trajectory  # data.traj
    net: Net
    optimizer: torch.optim.Optimizer
    schedule: Callable[[int], float]  # learning rate at 1-based step n
    start_step: int
    nonpad_tokens: int  # non-pad tokens trained before start_step
    log_window: dict[str, Any] | None = None  # the metrics window a checkpoint left open
    threads: ThreadChoice | None = None  # torch's CPU threads (None: left as they were)

    @property
    def main(self) -> bool:
        return self.info.is_main


def setup(opts: TrainOptions) -> Setup:
    """Device, checkpoint, data, model, optimizer, restored state: in that order, since each
    needs the ones before (the family and vocabulary come from the shards and the checkpoint)."""
    info, dev, threads = setup_runtime(opts)
    resume = find_resume(opts, info.is_main)
    data = open_run_data(opts, info, resume)
    choice = model_choice(opts, data, resume, xla=dev.kind == "xla")
    set_determinism(opts.deterministic)
    check = functools.partial(data.fam.check_rows, cfg=choice.cfg)
    check_first_rows(data, check)
    torch.manual_seed(data.traj.seed)
    model = models.build_model(data.family, choice.cfg).to(dev.device)
    traj = data.traj
    optimizer = model_optimizer(traj.optimizer, model, traj.lr, opts.compile)
    schedule = schedule_fn(traj.schedule, opts.steps, warmup=traj.warmup, lr=traj.lr)
    start_step, nonpad_tokens, log_window = 0, 0, None
    if resume.path is not None:
        state = ckpt.load_checkpoint(resume.path, model, optimizer)  # + RNG
        start_step, nonpad_tokens = int(state["step"]), int(state.get("nonpad_tokens", 0))
        log_window = state.get("log_window")
    net = wrap_model(opts.compile, info, dev, data, choice, model, check)
    s = Setup(
        opts=opts,
        info=info,
        dev=dev,
        resume=resume,
        data=data,
        fam=data.fam,
        traj=traj,
        net=net,
        optimizer=optimizer,
        schedule=schedule,
        start_step=start_step,
        nonpad_tokens=nonpad_tokens,
        log_window=log_window,
        threads=threads,
    )
    if info.is_main:
        note = schedule_note(traj.optimizer, traj.schedule)
        lines = startup_lines(s) + ([f"c4forge train: {note}"] if note else [])
        print("\n".join(lines), file=sys.stderr, flush=True)
    return s


def setup_runtime(opts: TrainOptions) -> tuple[dist.DistInfo, DeviceInfo, ThreadChoice | None]:
    """The device (and the process group under torchrun), torch's CPU threads (chosen on the
    CPU, or as ``--threads`` says); refuse options no run can use."""
    check_finite_options(opts.lr, opts.grad_clip, opts.z_loss)  # before the device is touched
    info = dist.env_info()
    dev = resolve_device(opts.device, info.local_rank)
    threads = set_threads(opts.threads) if dev.kind == "cpu" or opts.threads else None
    dist.init(info, dev.kind)
    if opts.steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {opts.steps}")
    if opts.verify_shards not in VERIFY_MODES:
        raise ConfigError(f"--verify-shards must be one of {', '.join(VERIFY_MODES)}")
    return info, dev, threads


def set_determinism(deterministic: bool) -> None:
    """``--deterministic``: deterministic kernels only (an error where torch has none)."""
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it
        torch.use_deterministic_algorithms(True)


def wrap_model(
    compile: bool | None,
    info: dist.DistInfo,
    dev: DeviceInfo,
    data: RunData,
    choice: ModelChoice,
    model: torch.nn.Module,
    check: RowCheck,
) -> Net:
    """``torch.compile`` (default on CUDA; static shapes, model.md §4) and DDP."""
    cfg, lengths = choice.cfg, (data.inputs_length, data.targets_length)
    use_compile = compile if compile is not None else dev.kind == "cuda"
    fwd: torch.nn.Module = model
    if use_compile and dev.kind != "xla":
        fwd = torch.compile(model, dynamic=False)
    train_model = dist.wrap_ddp(fwd, info, dev.device)
    flops, row_tokens = data.fam.flops_per_example(cfg, *lengths), data.fam.row_tokens(*lengths)
    return Net(choice.preset, cfg, model, fwd, train_model, use_compile, flops, row_tokens, check)


# ============================================================================ the loop


def run(s: Setup, hooks: Sequence[StepHook] = ()) -> RunSummary:
    """Train from ``start_step`` to ``--steps`` (or ``--stop-after-step``): step, log, eval,
    checkpoint, hooks."""
    o, main = s.opts, s.main
    os.makedirs(o.output, exist_ok=True)
    if main and s.data.vocab_dir:
        copy_run_vocab(s.data.vocab_dir, o.output, s.data.vocabulary["sha256"])
    log = MetricsLog(o.output, s.start_step if s.resume.state else None) if main else None
    t_start = time.perf_counter()
    bar = None
    if main and o.progress:
        bar = progress(total=o.steps, initial=s.start_step, unit="step", desc="train")
    log_window = WindowLogger(
        fam=s.fam,
        info=s.info,
        batch_size=s.traj.batch_size,
        row_tokens=s.net.row_tokens,
        flops=s.net.flops,
        peak_flops=s.dev.peak_flops,
        lr_at=s.schedule,
        xla=s.dev.kind == "xla",
    )
    window = LogWindow.empty(len(s.fam.parts), len(s.fam.stats), s.dev.device, s.start_step)
    last = LastFigures(nonpad_total=s.nonpad_tokens)
    if s.log_window is not None:  # resumed between two logs: the next log averages them all
        last.nonpad_total -= window.restore(s.log_window, s.info.rank, s.info.world_size)
    checkpoint_path = s.resume.path
    health = Health(s.dev.device)
    loader = make_loader(s.data, s.dev, s.start_step, o.steps, s.net.check, o.num_workers)
    it, step = iter(loader), s.start_step
    try:
        while step < o.steps:
            items = [next(it) for _ in range(s.traj.grad_accum)]
            if any(x["step"] != step for x in items):  # only if the loader misorders
                raise RuntimeError(f"data loader out of order at step {step}")
            try:
                window.add(*train_step(s, step, items, health))
            except (RuntimeError, torch.OutOfMemoryError) as err:
                if is_out_of_memory(err):
                    raise s.data.out_of_memory(s.dev.name) from None
                raise
            step += 1
            stopping = o.stop_after_step is not None and step >= o.stop_after_step
            is_last = step == o.steps
            logging = step % max(1, o.log_every) == 0 or is_last
            evaluating = bool(o.eval_every and step % o.eval_every == 0) or is_last
            saving = bool(o.save_every and step % o.save_every == 0) or is_last or stopping
            # read where the host waits anyway (log, eval, save); XLA's log is a step closure
            if saving or evaluating or (logging and s.dev.kind != "xla"):
                health.check(s.info, checkpoint_path, s.traj.lr)
            if logging:
                log_window(step, window, last, log, bar)
            if bar is not None:
                bar.update(1)
            paused = time.perf_counter()
            if evaluating:
                result = evaluate(s)
                if result is not None:
                    last.eval = result
                    if log is not None:
                        log.write({"step": step, **result})
                    if bar is not None:
                        bar.write(f"step {step}: {s.fam.eval_text(result)}")
            if saving:
                pending = dist.all_reduce_sum(window.nonpad.clone(), s.info)
                nonpad_seen = last.nonpad_total + int(pending)  # a sync, once per save
                open_window = window.to_state(step, s.info)
                checkpoint_path = save(s, step, nonpad_seen, open_window) or checkpoint_path
            window.paused += time.perf_counter() - paused
            for hook in hooks:
                hook(step)
            if stopping:
                break
    finally:
        if bar is not None:
            bar.close()
        if log is not None:
            log.close()
    return summarize(s, step, last, t_start, checkpoint_path, log)


def seed_micro(s: Setup, step: int, micro: int) -> None:
    """Dropout randomness as a function of (seed, step, global micro-batch): a resumed run
    and any split of the batch over ranks and accumulation draw the same masks."""
    if not s.net.cfg.dropout_rate:
        return  # nothing random in the step (the t5 pretraining default)
    ss = np.random.SeedSequence([s.traj.seed, 0x44524F50, step, micro])
    value = int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))
    if s.dev.kind == "xla":
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(value)
    torch.manual_seed(value)


def train_step(
    s: Setup, step: int, items: list[dict[str, Any]], health: Health | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One optimizer step (``step`` is 0-based; the schedule sees ``step + 1``).

    Returns the loss-part sums, their global counts, the metric sums and the non-pad tokens;
    ``health`` notes whether the loss and the gradient norm were finite (on the device).
    """
    dev, info, fam = s.dev, s.info, s.fam
    batches = [fam.to_device(it, dev.device, non_blocking=dev.kind == "cuda") for it in items]
    counts = torch.stack([fam.counts(b) for b in batches]).sum(0).float()
    dist.all_reduce_sum(counts, info)
    nonpad = torch.stack([fam.nonpad(b) for b in batches]).sum()
    scale = info.world_size / counts.clamp_min(1.0)
    set_lr(s.optimizer, s.schedule(step + 1))
    sums_total = torch.zeros(len(fam.parts), device=dev.device)
    stats_total = torch.zeros(len(fam.stats), device=dev.device)
    z = float(s.traj.z_loss)
    last = len(batches) - 1
    first_micro = info.rank * len(batches)
    for k, b in enumerate(batches):
        seed_micro(s, step, first_micro + k)
        with dist.no_sync(s.net.train_model, info.enabled and k < last):
            sums, stats = fam.forward_sums(s.net.train_model, b, z, dev.autocast())
            (sums * scale).sum().backward()
        sums_total = sums_total + sums.detach()
        stats_total = stats_total + stats
    if health is not None:
        norm = gradient_norm(list(s.net.model.parameters()), s.traj.grad_clip)
        health.note(step, sums_total, norm)
    elif s.traj.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(s.net.model.parameters(), s.traj.grad_clip)
    if dev.kind == "xla":
        import torch_xla.core.xla_model as xm

        xm.optimizer_step(s.optimizer)
    else:
        s.optimizer.step()
    s.optimizer.zero_grad(set_to_none=True)
    return sums_total, counts, stats_total, nonpad


@torch.no_grad()
def evaluate(s: Setup) -> dict[str, float] | None:
    """Held-out loss over the first --eval-rows validation rows (model.md §3): the t5
    family's log-perplexity, the bert family's MLM/NSP losses and accuracies."""
    batches = validation_batches(s.data, s.opts.eval_rows, s.info, s.net.check)
    if batches is None:
        return None
    fam, dev = s.fam, s.dev
    s.net.model.eval()
    k, m = len(fam.parts), len(fam.stats)
    acc = torch.zeros(2 * k + m, dtype=torch.float64, device=dev.device)
    for batch in batches:
        b = fam.to_device(batch, dev.device)
        sums, stats = fam.forward_sums(s.net.forward_model, b, 0.0, dev.autocast())
        acc += torch.cat([sums.double(), fam.counts(b).double(), stats.double()])
    s.net.model.train()
    dist.all_reduce_sum(acc, s.info)
    values = acc.tolist()
    record = fam.eval_record(values[:k], values[k : 2 * k], values[2 * k :])
    return record or None


def run_config(s: Setup) -> dict[str, Any]:
    """The ``config`` block of every checkpoint's trainer state (what a resume checks)."""
    return {
        **s.data.describe(),
        "preset": s.net.preset,
        "model": s.net.cfg.to_dict(),
        "steps": s.opts.steps,
        "world_size": s.info.world_size,
        "device": s.dev.kind,
        "compile": s.net.compiled,
    }


def save(s: Setup, step: int, nonpad: int, log_window: dict[str, Any] | None) -> str | None:
    """Checkpoint ``step`` (rank 0 writes; every rank waits for it)."""
    path = None
    if s.main:
        state = ckpt.trainer_state(
            step=step,
            batch_size=s.traj.batch_size,
            row_tokens=s.net.row_tokens,
            nonpad_tokens=nonpad,
            training=s.traj.to_dict(),
            total_steps=s.opts.steps,
            lr_now=s.schedule(max(step, 1)),
            config=run_config(s),
            log_window=log_window,
        )
        path = ckpt.save_checkpoint(
            s.opts.output,
            step,
            model=s.net.model,
            optimizer=s.optimizer,
            trainer_state=state,
            model_config=s.net.cfg.to_dict(),
            keep=s.opts.keep_checkpoints,
        )
    dist.barrier(s.info)
    return path


def summarize(
    s: Setup, step: int, last: LastFigures, t_start: float, path: str | None, log: MetricsLog | None
) -> RunSummary:
    """The loss curve (rank 0) and the run's summary."""
    title = f"{s.net.preset} / {s.net.cfg.ffn} / {s.traj.optimizer}"
    metrics, curve = end_of_run(s.opts.output, title, draw=s.main)
    ev = last.eval
    if ev is None:
        note = no_heldout_reason(s, step)
    elif s.data.mixture is not None and "eval_nll" in ev:
        note = POOLED_NLL
    else:
        note = None
    return RunSummary.of(
        last,
        steps=step,
        start_step=s.start_step,
        seconds=time.perf_counter() - t_start,
        eval_line=s.fam.eval_text(ev) if ev else None,
        checkpoint=path,
        curve=curve,
        metrics=metrics,
        tensorboard=log.tensorboard_dir if log is not None else None,
        mixture_lines=mixture_lines(s.data.mixture, s.data.plan, step, ev),
        held_out_note=note,
    )
