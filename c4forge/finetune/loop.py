"""The fine-tuning run of ``c4forge finetune`` (finetune.md §4–§6), read top to bottom.

The shape of ``trainers/train.py``: ``setup`` is a list of calls building a frozen ``Setup``
(device, backbone, head, data, model, optimiser, the restored position); ``finetune`` is the
loop (step, log, eval, checkpoint) and the final evaluation; the pieces are plain functions of
the setup. Data order: step ``s`` reads positions ``[s·B, (s+1)·B)`` of an endless stream of per-epoch
permutations (``default_rng([seed, epoch])``), so a resumed run continues with the exact next
batch. Weights, optimiser state and the RNG (dropout) are saved and restored by the trainers'
checkpoint functions (``c4forge.trainers.checkpoint``), so ``k`` steps + resume + ``k`` steps
equal ``2k`` steps bit for bit. CUDA gets bf16 autocast, TF32 and ``torch.compile`` through the
trainers' device helpers, as in pretraining; the CPU stays fp32.
"""

from __future__ import annotations

import functools
import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from c4forge import __version__
from c4forge.errors import ConfigError, OutputExistsError
from c4forge.finetune import recipe as recipes
from c4forge.finetune.backbone import Backbone, load_backbone, random_init
from c4forge.finetune.encoding import Encoded, collate, encode_examples
from c4forge.finetune.evaluation import predict_split
from c4forge.finetune.head_registry import HEADS, default_head, get_head, heads_for
from c4forge.finetune.model import build_finetune_model
from c4forge.finetune.options import DEFAULT_EPOCHS, FinetuneOptions
from c4forge.finetune.outputs import (
    RUN_CONFIG,
    copy_vocabulary,
    read_run_config,
    write_results,
)
from c4forge.finetune.taskdata import TaskData, load_task_data
from c4forge.io import ownership
from c4forge.io.storage import write_json
from c4forge.trainers import checkpoint as ckpt
from c4forge.trainers.data import decoder_input_tokens
from c4forge.trainers.device import DeviceInfo, resolve_device
from c4forge.trainers.health import check_finite_options
from c4forge.trainers.loss import weighted_cross_entropy
from c4forge.trainers.metrics import CURVE, MetricsLog, plot_loss_curve
from c4forge.trainers.threads import set_threads

# Options that fix the trajectory: a resumed run must not change them.
TRAJECTORY = (
    "task",
    "head",
    "batch_size",
    "max_length",
    "seed",
    "max_train_examples",
    "random_init",
)


def _check_head(head: str, backbone: Backbone) -> None:
    if head not in HEADS:
        raise ConfigError(f"unknown --head {head!r}; valid: {', '.join(HEADS)}")
    spec = get_head(head)
    if not spec.runs_on(backbone.family):
        raise ConfigError(
            f"--head {head} needs {spec.needs}; {backbone.path} is "
            f"{backbone.family} (use --head {' or '.join(heads_for(backbone.family))})"
        )


def _refuse_finetuned(path: str) -> None:
    """A fine-tuning output is not a starting point (e.g. --head hire on a text-to-text FT)."""
    for d in (path, os.path.dirname(os.path.dirname(os.path.abspath(path)))):
        cfg = os.path.join(d, RUN_CONFIG)
        if os.path.isfile(cfg):
            done = read_run_config(d)
            raise ConfigError(
                f"{path}: a fine-tuned model ({done['task']}, head {done['head']}), not a "
                f"pretraining checkpoint; `--head` needs a c4forge train run "
                f"(use `c4forge evaluate {d}` to score it)"
            )


@ownership.owns_output("finetune", lambda opts: opts.output)
def finetune(opts: FinetuneOptions) -> dict[str, Any]:
    """Set up, train to ``steps`` (or ``--stop-after-step``), evaluate, write results.json."""
    s = setup(opts)
    o = s.opts
    os.makedirs(o.output, exist_ok=True)
    write_json(os.path.join(o.output, "finetune.json"), s.config)
    copy_vocabulary(s.backbone.vocab, o.output)
    if not s.resumed:
        torch.manual_seed(o.seed)  # dropout from a known state
    log = MetricsLog(o.output, s.start_step if s.resumed else None, tensorboard=False)
    from c4forge.progress import progress

    bar = progress(
        total=s.steps,
        initial=s.start_step,
        unit="step",
        desc=f"finetune {o.task}",
        disable=not o.progress,
    )
    s.model.train()
    train_seconds, train_cpu, window, window_n = 0.0, 0.0, torch.zeros(()), 0
    last_loss = None
    step = s.start_step
    try:
        while step < s.steps:
            t0, c0 = time.perf_counter(), time.process_time()
            window += train_step(s, step).float().cpu()
            train_seconds += time.perf_counter() - t0
            train_cpu += time.process_time() - c0
            window_n += 1
            step += 1
            bar.update(1)
            if step % max(1, o.log_every) == 0 or step == s.steps:
                last_loss = float(window) / window_n
                log.write(
                    {
                        "step": step,
                        "loss": last_loss,
                        "lr": s.schedule(step),
                        "examples": step * o.batch_size,
                    }
                )
                bar.set_postfix(loss=f"{last_loss:.4f}", refresh=False)
                window, window_n = torch.zeros(()), 0
            if o.eval_every and step % o.eval_every == 0 and step < s.steps:
                for name, res in evaluate(s).items():
                    log.write({"step": step, **{f"{name}_{k}": v for k, v in res.metrics.items()}})
            stopping = o.stop_after_step is not None and step >= o.stop_after_step
            if (o.save_every and step % o.save_every == 0) or step == s.steps or stopping:
                save(s, step)
            if stopping and step < s.steps:
                return {"stopped_at": step}
    finally:
        bar.close()
        log.close()
    plot_loss_curve(
        os.path.join(o.output, "metrics.jsonl"),
        os.path.join(o.output, CURVE),
        title=f"finetune {s.data.spec.name} / {s.head}",
        ylabel=loss_unit(s),
    )
    t0 = time.perf_counter()
    results = evaluate(s)
    eval_seconds = time.perf_counter() - t0
    done = step - s.start_step
    timing = {
        "train_seconds": train_seconds,
        "eval_seconds": eval_seconds,
        "train_cpu_seconds": train_cpu,  # all threads of this process; steadier when shared
        "train_examples_per_s": done * o.batch_size / train_seconds if train_seconds else None,
        "train_examples_per_cpu_s": done * o.batch_size / train_cpu if train_cpu else None,
        "steps_this_session": done,
    }
    truncated = {"train": s.train_enc.truncated}
    truncated.update({k: v.truncated for k, v in s.eval_enc.items()})
    return write_results(o.output, s.config, results, truncated, timing, last_loss)


# ============================================================================ setup


@dataclass(frozen=True)
class Setup:
    """Everything the loop needs, built once by ``setup``."""

    opts: FinetuneOptions
    dev: DeviceInfo
    backbone: Backbone  # the pretrained (or randomly initialised) encoder / encoder-decoder
    head: str  # text | cls | hire
    max_length: int  # --max-length capped at the model's positions
    data: TaskData
    train_enc: Encoded
    eval_enc: dict[str, Encoded]
    steps: int
    recipe: dict[str, Any]  # optimiser, learning rate, schedule, clipping (``recipe.py``)
    config: dict[str, Any]  # finetune.json: what the run is (a resume must match it)
    model: torch.nn.Module  # the parameters (saved, clipped)
    forward_model: torch.nn.Module  # the training forward (compiled on CUDA)
    compiled: bool
    optimizer: torch.optim.Optimizer
    schedule: Callable[[int], float]  # learning rate at 1-based step n
    start_step: int
    resumed: bool  # a checkpoint was restored (weights, optimiser, RNG)


def setup(opts: FinetuneOptions) -> Setup:
    """Device, backbone and head, data, model, optimiser, the restored position: in that order
    (the head and the row length come from the backbone; the steps from the data)."""
    o = opts
    if o.batch_size < 1 or o.max_length < 8:
        raise ConfigError("--batch-size must be >= 1 and --max-length >= 8")
    check_finite_options(o.lr, None, None)  # as train: before the checkpoint is read
    dev = resolve_device(o.device)
    if dev.kind == "cpu" or o.threads:
        set_threads(o.threads)
    _refuse_finetuned(o.checkpoint)
    backbone = load_backbone(o.checkpoint, o.vocab)
    head = o.head or default_head(backbone.family)
    _check_head(head, backbone)
    pretrained_fingerprint = backbone.fingerprint
    if o.random_init:
        backbone = random_init(backbone, o.seed)
    max_length = capped_length(o.max_length, backbone)
    data = load_task_data(
        o.task, o.data, limit=o.max_train_examples, custom=o.custom(), eval_data=o.eval_data
    )
    train_enc, eval_enc = encode_data(data, backbone, head, max_length)
    steps = total_steps(o, len(data.train))
    recipe = recipes.resolve_recipe(head, backbone.d_model, lr=o.lr)
    config = run_config(
        o, backbone, head, pretrained_fingerprint, data, max_length, steps, recipe, dev
    )
    torch.manual_seed(o.seed)  # head initialisation
    model = build_finetune_model(
        backbone.family, backbone.model, head, backbone.d_model, data.spec.num_labels
    ).to(dev.device)
    optimizer = recipes.build(recipe, model)
    schedule = recipes.schedule(recipe, steps)
    start_step = restore(o, config, model, optimizer)
    use_compile = o.compile if o.compile is not None else dev.kind == "cuda"
    compiled = bool(use_compile and dev.kind != "xla")
    forward_model = torch.compile(model) if compiled else model
    return Setup(
        o,
        dev,
        backbone,
        head,
        max_length,
        data,
        train_enc,
        eval_enc,
        steps,
        recipe,
        config,
        model,
        forward_model,
        compiled,
        optimizer,
        schedule,
        start_step or 0,
        start_step is not None,
    )


def capped_length(max_length: int, backbone: Backbone) -> int:
    """``--max-length``, capped (with a note) at the model's positions."""
    if backbone.max_positions and max_length > backbone.max_positions:
        print(
            f"c4forge finetune: --max-length {max_length} capped at the model's "
            f"{backbone.max_positions} positions",
            file=sys.stderr,
        )
        return backbone.max_positions
    return max_length


def encode_data(
    data: TaskData, backbone: Backbone, head: str, max_length: int
) -> tuple[Encoded, dict[str, Encoded]]:
    """The train rows and each evaluation split as token ids for ``head``."""
    spec = data.spec
    train_enc = encode_examples(spec, data.train, backbone.vocab, head, backbone.family, max_length)
    eval_enc = {
        name: encode_examples(spec, rows, backbone.vocab, head, backbone.family, max_length)
        for name, rows in data.evals.items()
    }
    return train_enc, eval_enc


def total_steps(o: FinetuneOptions, train_rows: int) -> int:
    """``--steps``, or ``--epochs`` passes over the training rows."""
    if o.steps is not None:
        return int(o.steps)
    per_epoch = math.ceil(train_rows / o.batch_size)
    return max(1, math.ceil((o.epochs or DEFAULT_EPOCHS) * per_epoch))


def run_config(
    o: FinetuneOptions,
    b: Backbone,
    head: str,
    pretrained_fingerprint: str,
    data: TaskData,
    max_length: int,
    steps: int,
    recipe: dict[str, Any],
    dev: DeviceInfo,
) -> dict[str, Any]:
    """finetune.json (and each checkpoint's config): the run, as a resume must find it again."""
    spec = data.spec
    return {
        "format": "c4forge.finetune",
        "format_version": 1,
        "task": spec.name,
        "head": head,
        "family": b.family,
        "init": "random" if o.random_init else "pretrained",
        "checkpoint": os.path.abspath(o.checkpoint),
        "checkpoint_fingerprint": pretrained_fingerprint,
        "checkpoint_step": b.step,
        "backbone_config": b.config_dict(),
        "num_layers": b.num_layers,
        "labels": list(spec.labels) if spec.labels else None,
        "regression": spec.regression,
        "custom": asdict(o.custom()) if o.custom() else None,
        "max_length": max_length,
        "batch_size": o.batch_size,
        "steps": steps,
        "seed": o.seed,
        "max_train_examples": o.max_train_examples,
        "random_init": o.random_init,
        "train_examples": len(data.train),
        "recipe": recipe,
        "data_files": data.files,
        "device": dev.kind,
        "compile": o.compile,
        "c4forge": __version__,
        "torch": torch.__version__,
    }


def restore(
    o: FinetuneOptions,
    config: dict[str, Any],
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
) -> int | None:
    """The step of the checkpoint restored into ``model`` and ``optimizer`` (with the RNG), or
    None for a fresh start; a finished run in ``-o`` needs --resume or --overwrite, and a
    resumed run keeps its trajectory (``TRAJECTORY`` and the steps)."""
    existing = ckpt.list_checkpoints(o.output)
    if not o.resume:
        if existing or os.path.exists(os.path.join(o.output, "results.json")):
            if not o.overwrite:
                raise OutputExistsError(
                    f"{o.output} already holds a fine-tuning run; pass --resume to continue "
                    "it or --overwrite to replace it"
                )
            shutil.rmtree(o.output)
        return None
    path = ckpt.latest_checkpoint(o.output)
    if path is None:
        return None
    saved = read_run_config(o.output)
    for key in (*TRAJECTORY, "steps"):
        if saved.get(key) != config.get(key):
            raise ConfigError(
                f"{key} {config.get(key)!r} differs from the run being resumed "
                f"({saved.get(key)!r} in {o.output}); a resumed run keeps its trajectory"
            )
    state = ckpt.load_checkpoint(path, model, optimizer)
    return int(state["step"])


# ============================================================================ the pieces


@functools.lru_cache(maxsize=1)
def epoch_permutation(seed: int, epoch: int, n: int) -> np.ndarray:
    """The row order of ``epoch`` (cached: a step reads the same epoch's order as the last one,
    and drawing a 400k-row permutation every step would cost more than a tiny model's step)."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def batch_indices(s: Setup, step: int) -> np.ndarray:
    """The rows of ``step``: positions ``[step·B, (step+1)·B)`` of the endless stream of
    per-epoch permutations."""
    n, b = len(s.train_enc.inputs), s.opts.batch_size
    out = np.empty(b, dtype=np.int64)
    for k, p in enumerate(range(step * b, (step + 1) * b)):
        epoch, within = divmod(p, n)
        out[k] = epoch_permutation(s.opts.seed, epoch, n)[within]
    return out


def loss_unit(s: Setup) -> str:
    """What ``compute_loss`` measures, for the loss plot's axis."""
    if get_head(s.head).generates:
        return "cross-entropy, nats per target token"
    if s.data.spec.regression:
        return "mean squared error per example"
    return "cross-entropy, nats per example"


def compute_loss(s: Setup, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    with s.dev.autocast():
        if get_head(s.head).generates:
            targets = batch["targets"]
            logits = s.forward_model(batch["input_ids"], decoder_input_tokens(targets))
            total, weight = weighted_cross_entropy(logits, targets)
            return total / weight.clamp_min(1.0)
        out = s.forward_model(batch)
    logits = out["logits"].float()
    if s.data.spec.regression:
        return F.mse_loss(logits[:, 0], batch["labels"].float())
    return F.cross_entropy(logits, batch["labels"])


def train_step(s: Setup, step: int) -> torch.Tensor:
    """One optimiser step on the rows of ``step``; the loss, still on the device."""
    pad_to = s.max_length if s.compiled else None  # static shapes under compile
    batch = collate(s.train_enc, batch_indices(s, step), pad_to)
    batch = {k: v.to(s.dev.device, non_blocking=True) for k, v in batch.items()}
    for group in s.optimizer.param_groups:
        group["lr"] = s.schedule(step + 1)
    loss = compute_loss(s, batch)
    loss.backward()
    if s.recipe["grad_clip"] > 0:
        torch.nn.utils.clip_grad_norm_(s.model.parameters(), s.recipe["grad_clip"])
    s.optimizer.step()
    s.optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def save(s: Setup, step: int) -> str:
    state = {
        "rng": ckpt.rng_state(),
        "data": {"position_step": step, "examples": step * s.opts.batch_size},
        "config": s.config,
    }
    return ckpt.save_checkpoint(
        s.opts.output, step, s.model, s.optimizer, state, s.config, keep=s.opts.keep_checkpoints
    )


def evaluate(s: Setup) -> dict[str, Any]:
    return {
        name: predict_split(
            name,
            s.data.spec,
            enc,
            s.model,
            s.head,
            s.backbone.vocab,
            s.dev,
            max(s.opts.batch_size, 64),
            s.opts.progress,
        )
        for name, enc in s.eval_enc.items()
    }


def encoded_for_eval(run_cfg: dict[str, Any], vocab, data) -> dict[str, Encoded]:
    """Encode the evaluation splits the way the run encoded its own (evaluate's path)."""
    return {
        name: encode_examples(
            data.spec, rows, vocab, run_cfg["head"], run_cfg["family"], run_cfg["max_length"]
        )
        for name, rows in data.evals.items()
    }
