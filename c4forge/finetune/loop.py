"""The fine-tuning run of ``c4forge finetune`` (finetune.md §4–§6).

Data order: step ``s`` reads positions ``[s·B, (s+1)·B)`` of an endless stream of per-epoch
permutations (``default_rng([seed, epoch])``), so a resumed run continues with the exact next
batch. Weights, optimiser state and the RNG (dropout) are saved and restored by the trainers'
checkpoint functions (``c4forge.trainers.checkpoint``), so ``k`` steps + resume + ``k`` steps
equal ``2k`` steps bit for bit. CUDA gets bf16 autocast, TF32 and ``torch.compile`` through the
trainers' device helpers, as in pretraining; the CPU stays fp32.
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from dataclasses import asdict
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
from c4forge.finetune.heads import HEADS
from c4forge.finetune.model import build_finetune_model
from c4forge.finetune.options import (  # noqa: F401 - FinetuneOptions: its historical home
    DEFAULT_BATCH,
    DEFAULT_EPOCHS,
    DEFAULT_MAX_LENGTH,
    FinetuneOptions,
)
from c4forge.finetune.outputs import (
    RUN_CONFIG,
    copy_vocabulary,
    read_run_config,
    write_results,
)
from c4forge.finetune.taskdata import load_task_data
from c4forge.io.storage import write_json
from c4forge.trainers import checkpoint as ckpt
from c4forge.trainers.data import decoder_input_tokens
from c4forge.trainers.device import resolve_device
from c4forge.trainers.loss import weighted_cross_entropy
from c4forge.trainers.metrics import CURVE, MetricsLog, plot_loss_curve

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
    if head == "text" and backbone.family != "t5":
        raise ConfigError(
            f"--head text needs an encoder-decoder (T5) checkpoint; {backbone.path} is "
            f"{backbone.family} (use --head cls or hire)"
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


class FineTuner:
    """Set up once (device, data, model, optimiser, resume), then ``run()``."""

    def __init__(self, opts: FinetuneOptions):
        self.opts = o = opts
        if o.batch_size < 1 or o.max_length < 8:
            raise ConfigError("--batch-size must be >= 1 and --max-length >= 8")
        self.dev = resolve_device(o.device)
        _refuse_finetuned(o.checkpoint)
        backbone = load_backbone(o.checkpoint, o.vocab)
        self.head = o.head or ("text" if backbone.family == "t5" else "cls")
        _check_head(self.head, backbone)
        self.pretrained_fingerprint = backbone.fingerprint
        if o.random_init:
            backbone = random_init(backbone, o.seed)
        self.backbone = backbone
        self.max_length = o.max_length
        if backbone.max_positions and self.max_length > backbone.max_positions:
            print(
                f"c4forge finetune: --max-length {o.max_length} capped at the model's "
                f"{backbone.max_positions} positions",
                file=sys.stderr,
            )
            self.max_length = backbone.max_positions
        self.data = load_task_data(
            o.task, o.data, limit=o.max_train_examples, custom=o.custom(), eval_data=o.eval_data
        )
        spec = self.data.spec
        self.train_enc = encode_examples(
            spec, self.data.train, backbone.vocab, self.head, backbone.family, self.max_length
        )
        self.eval_enc = {
            name: encode_examples(spec, rows, backbone.vocab, self.head, backbone.family,
                                  self.max_length)
            for name, rows in self.data.evals.items()
        }  # fmt: skip
        n = len(self.data.train)
        per_epoch = math.ceil(n / o.batch_size)
        if o.steps is not None:
            self.steps = int(o.steps)
        else:
            self.steps = max(1, math.ceil((o.epochs or DEFAULT_EPOCHS) * per_epoch))
        self.recipe = recipes.resolve_recipe(self.head, backbone.d_model, lr=o.lr)
        torch.manual_seed(o.seed)  # head initialisation
        self.model = build_finetune_model(
            backbone.family, backbone.model, self.head, backbone.d_model, spec.num_labels
        ).to(self.dev.device)
        self.optimizer = recipes.build(self.recipe, self.model)
        self.schedule = recipes.schedule(self.recipe, self.steps)
        self.start_step = 0
        self._setup_resume()
        use_compile = o.compile if o.compile is not None else self.dev.kind == "cuda"
        self.compiled = bool(use_compile and self.dev.kind != "xla")
        self.forward_model = torch.compile(self.model) if self.compiled else self.model
        self._perms: dict[int, np.ndarray] = {}

    # ------------------------------------------------------------------------------ setup
    def run_config(self) -> dict[str, Any]:
        b, o, spec = self.backbone, self.opts, self.data.spec
        return {
            "format": "c4forge.finetune",
            "format_version": 1,
            "task": spec.name,
            "head": self.head,
            "family": b.family,
            "init": "random" if o.random_init else "pretrained",
            "checkpoint": os.path.abspath(o.checkpoint),
            "checkpoint_fingerprint": self.pretrained_fingerprint,
            "checkpoint_step": b.step,
            "backbone_config": b.config_dict(),
            "num_layers": b.num_layers,
            "labels": list(spec.labels) if spec.labels else None,
            "regression": spec.regression,
            "custom": asdict(o.custom()) if o.custom() else None,
            "max_length": self.max_length,
            "batch_size": o.batch_size,
            "steps": self.steps,
            "seed": o.seed,
            "max_train_examples": o.max_train_examples,
            "random_init": o.random_init,
            "train_examples": len(self.data.train),
            "recipe": self.recipe,
            "data_files": self.data.files,
            "device": self.dev.kind,
            "compile": o.compile,
            "c4forge": __version__,
            "torch": torch.__version__,
        }

    def _setup_resume(self) -> None:
        o = self.opts
        existing = ckpt.list_checkpoints(o.output)
        self.ckpt_path = None
        if not o.resume:
            if existing or os.path.exists(os.path.join(o.output, "results.json")):
                if not o.overwrite:
                    raise OutputExistsError(
                        f"{o.output} already holds a fine-tuning run; pass --resume to continue "
                        "it or --overwrite to replace it"
                    )
                shutil.rmtree(o.output)
            return
        self.ckpt_path = ckpt.latest_checkpoint(o.output)
        if self.ckpt_path is None:
            return
        saved = read_run_config(o.output)
        now = self.run_config()
        for key in (*TRAJECTORY, "steps"):
            if saved.get(key) != now.get(key):
                raise ConfigError(
                    f"{key} {now.get(key)!r} differs from the run being resumed "
                    f"({saved.get(key)!r} in {o.output}); a resumed run keeps its trajectory"
                )
        state = ckpt.load_checkpoint(self.ckpt_path, self.model, self.optimizer)
        self.start_step = int(state["step"])

    # ------------------------------------------------------------------------------ pieces
    def batch_indices(self, step: int) -> np.ndarray:
        n, b = len(self.train_enc.inputs), self.opts.batch_size
        pos = np.arange(step * b, (step + 1) * b)
        out = np.empty(b, dtype=np.int64)
        for k, p in enumerate(pos):
            epoch, within = divmod(int(p), n)
            if epoch not in self._perms:
                rng = np.random.default_rng([self.opts.seed, epoch])
                self._perms = {epoch: rng.permutation(n)}  # one epoch cached at a time
            out[k] = self._perms[epoch][within]
        return out

    def loss_unit(self) -> str:
        """What ``_loss`` measures, for the loss plot's axis."""
        if self.head == "text":
            return "cross-entropy, nats per target token"
        if self.data.spec.regression:
            return "mean squared error per example"
        return "cross-entropy, nats per example"

    def _loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with self.dev.autocast():
            if self.head == "text":
                targets = batch["targets"]
                logits = self.forward_model(batch["input_ids"], decoder_input_tokens(targets))
                total, weight = weighted_cross_entropy(logits, targets)
                return total / weight.clamp_min(1.0)
            out = self.forward_model(batch)
        logits = out["logits"].float()
        if self.data.spec.regression:
            return F.mse_loss(logits[:, 0], batch["labels"].float())
        return F.cross_entropy(logits, batch["labels"])

    def _step(self, step: int) -> torch.Tensor:
        pad_to = self.max_length if self.compiled else None  # static shapes under compile
        batch = collate(self.train_enc, self.batch_indices(step), pad_to)
        batch = {k: v.to(self.dev.device, non_blocking=True) for k, v in batch.items()}
        for group in self.optimizer.param_groups:
            group["lr"] = self.schedule(step + 1)
        loss = self._loss(batch)
        loss.backward()
        if self.recipe["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.recipe["grad_clip"])
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    def _save(self, step: int) -> str:
        state = {
            "rng": ckpt.rng_state(),
            "data": {"position_step": step, "examples": step * self.opts.batch_size},
            "config": self.run_config(),
        }
        return ckpt.save_checkpoint(
            self.opts.output, step, self.model, self.optimizer, state,
            self.run_config(), keep=self.opts.keep_checkpoints,
        )  # fmt: skip

    def evaluate(self) -> dict[str, Any]:
        return {
            name: predict_split(
                name, self.data.spec, enc, self.model, self.head, self.backbone.vocab, self.dev,
                max(self.opts.batch_size, 64), self.opts.progress,
            )
            for name, enc in self.eval_enc.items()
        }  # fmt: skip

    # ------------------------------------------------------------------------------ the loop
    def run(self) -> dict[str, Any]:
        o = self.opts
        os.makedirs(o.output, exist_ok=True)
        write_json(os.path.join(o.output, "finetune.json"), self.run_config())
        copy_vocabulary(self.backbone.vocab, o.output)
        if self.ckpt_path is None:
            torch.manual_seed(o.seed)  # dropout from a known state
        log = MetricsLog(o.output, self.start_step if self.ckpt_path else None, tensorboard=False)
        from c4forge.progress import progress

        bar = progress(
            total=self.steps, initial=self.start_step, unit="step", desc=f"finetune {o.task}",
            disable=not o.progress,
        )  # fmt: skip
        self.model.train()
        train_seconds, train_cpu, window, window_n = 0.0, 0.0, torch.zeros(()), 0
        last_loss = None
        step = self.start_step
        try:
            while step < self.steps:
                t0, c0 = time.perf_counter(), time.process_time()
                window += self._step(step).float().cpu()
                train_seconds += time.perf_counter() - t0
                train_cpu += time.process_time() - c0
                window_n += 1
                step += 1
                bar.update(1)
                if step % max(1, o.log_every) == 0 or step == self.steps:
                    last_loss = float(window) / window_n
                    log.write({"step": step, "loss": last_loss, "lr": self.schedule(step),
                               "examples": step * o.batch_size})  # fmt: skip
                    bar.set_postfix(loss=f"{last_loss:.4f}", refresh=False)
                    window, window_n = torch.zeros(()), 0
                if o.eval_every and step % o.eval_every == 0 and step < self.steps:
                    for name, res in self.evaluate().items():
                        log.write(
                            {"step": step, **{f"{name}_{k}": v for k, v in res.metrics.items()}}
                        )
                stopping = o.stop_after_step is not None and step >= o.stop_after_step
                if (o.save_every and step % o.save_every == 0) or step == self.steps or stopping:
                    self._save(step)
                if stopping and step < self.steps:
                    bar.close()
                    log.close()
                    return {"stopped_at": step}
        finally:
            bar.close()
            log.close()
        plot_loss_curve(
            os.path.join(o.output, "metrics.jsonl"),
            os.path.join(o.output, CURVE),
            title=f"finetune {self.data.spec.name} / {self.head}",
            ylabel=self.loss_unit(),
        )
        t0 = time.perf_counter()
        results = self.evaluate()
        eval_seconds = time.perf_counter() - t0
        done = step - self.start_step
        timing = {
            "train_seconds": train_seconds,
            "eval_seconds": eval_seconds,
            "train_cpu_seconds": train_cpu,  # all threads of this process; steadier when shared
            "train_examples_per_s": done * o.batch_size / train_seconds if train_seconds else None,
            "train_examples_per_cpu_s": done * o.batch_size / train_cpu if train_cpu else None,
            "steps_this_session": done,
        }
        truncated = {"train": self.train_enc.truncated}
        truncated.update({k: v.truncated for k, v in self.eval_enc.items()})
        return write_results(o.output, self.run_config(), results, truncated, timing, last_loss)


def finetune(opts: FinetuneOptions) -> dict[str, Any]:
    return FineTuner(opts).run()


def encoded_for_eval(run_cfg: dict[str, Any], vocab, data) -> dict[str, Encoded]:
    """Encode the evaluation splits the way the run encoded its own (evaluate's path)."""
    return {
        name: encode_examples(data.spec, rows, vocab, run_cfg["head"], run_cfg["family"],
                              run_cfg["max_length"])
        for name, rows in data.evals.items()
    }  # fmt: skip
