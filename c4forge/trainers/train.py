"""The training loop of ``c4forge train`` (model.md §4–§7).

One process per device. The data position is the global step (data.py), so a resumed run rebuilds
its loader at ``step`` and continues with the exact next batch; weights, optimizer state and RNG
come from safetensors/JSON checkpoints (checkpoint.py). Inside a step nothing reads a value back
to the host: the loss and token counts accumulate on the device and are read every
``--log-every`` steps (through ``xm.add_step_closure`` on TPU).

Loss normalisation (model.md §5): the weight count ``W`` of the *global* batch is all-reduced
first; every rank back-propagates ``world · Σ_local w·CE / W`` per micro-batch, and DDP's
gradient average turns that into exactly the single-device gradient of ``Σ w·CE / W``.
"""

from __future__ import annotations

import math
import os
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from c4forge import __version__
from c4forge.errors import ConfigError, OutputExistsError, VerificationError
from c4forge.io.storage import sha256_file
from c4forge.trainers import checkpoint as ckpt
from c4forge.trainers import distributed as dist
from c4forge.trainers.config import ModelConfig, make_config
from c4forge.trainers.data import (
    DataPlan,
    TrainStream,
    eval_batches,
    open_shard_set,
    read_vocab_descriptor,
    to_device,
)
from c4forge.trainers.device import DeviceInfo, is_out_of_memory, resolve_device
from c4forge.trainers.flops import flops_per_example, mfu
from c4forge.trainers.loss import weighted_cross_entropy
from c4forge.trainers.metrics import CURVE, MetricsLog, plot_loss_curve
from c4forge.trainers.model import GLUTransformer
from c4forge.trainers.optim import (
    DEFAULT_GRAD_CLIP,
    DEFAULT_LR,
    DEFAULT_SCHEDULE,
    build_optimizer,
    schedule_note,
    set_lr,
)
from c4forge.trainers.schedules import schedule_fn

# Options that fix the data order or the optimisation trajectory: a resumed run takes them from
# the checkpoint, and refuses an explicit value that differs.
TRAJECTORY_OPTIONS = (
    "batch_size",
    "grad_accum",
    "seed",
    "shuffle_window",
    "optimizer",
    "schedule",
    "lr",
    "warmup",
    "grad_clip",
    "z_loss",
)
MODEL_OPTIONS = ("preset", "ffn", "d_ff", "tie_embeddings", "attn")


@dataclass
class TrainOptions:
    """Everything ``c4forge train`` accepts; ``None`` = not given (default or checkpoint's)."""

    shards: str
    output: str
    steps: int
    preset: str | None = None
    ffn: str | None = None
    d_ff: int | None = None
    tie_embeddings: bool | None = None
    attn: str | None = None
    batch_size: int | None = None
    grad_accum: int | None = None
    device: str = "auto"
    resume: str | None = None  # None: fresh run; "auto": latest; else a checkpoint directory
    optimizer: str | None = None
    schedule: str | None = None
    lr: float | None = None
    warmup: int | None = None
    grad_clip: float | None = None
    z_loss: float | None = None
    shuffle_window: int | None = None
    eval_every: int = 0
    eval_rows: int | None = None
    save_every: int = 0
    keep_checkpoints: int = 3
    log_every: int = 10
    seed: int | None = None
    compile: bool | None = None  # None: on for CUDA, off elsewhere
    verify_shards: str = "quick"
    vocab: str | None = None
    num_workers: int | None = None
    deterministic: bool = False
    progress: bool = True
    stop_after_step: int | None = (
        None  # stop (with a checkpoint) early, keeping the N-step schedule
    )
    crash_after_step: int | None = None  # testing: SIGKILL ourselves after this step

    def resolved_training(self) -> dict[str, Any]:
        """The trajectory options with defaults filled in."""
        opt = self.optimizer or "adafactor"
        return {
            "batch_size": 128 if self.batch_size is None else self.batch_size,
            "grad_accum": self.grad_accum or 1,
            "seed": 0 if self.seed is None else self.seed,
            "shuffle_window": self.shuffle_window or 0,
            "optimizer": opt,
            "schedule": self.schedule or DEFAULT_SCHEDULE.get(opt, "isr_decay"),
            "lr": DEFAULT_LR.get(opt, 1e-2) if self.lr is None else self.lr,
            "warmup": 10_000 if self.warmup is None else self.warmup,
            "grad_clip": DEFAULT_GRAD_CLIP.get(opt, 0.0)
            if self.grad_clip is None
            else self.grad_clip,
            "z_loss": 0.0 if self.z_loss is None else self.z_loss,
        }


@dataclass
class RunSummary:
    steps: int
    start_step: int
    final_loss: float | None
    eval_nll: float | None
    eval_ppl: float | None
    tokens_per_s: float | None
    nonpad_tokens_per_s: float | None
    mfu: float | None
    seconds: float
    checkpoint: str | None
    curve: str | None
    metrics: str
    tensorboard: str | None

    def text(self) -> str:
        def fmt(v: float | None, spec: str) -> str:
            return "n/a" if v is None else format(v, spec)

        lines = [
            f"trained steps {self.start_step} → {self.steps} in {self.seconds:.1f} s",
            f"final train loss {fmt(self.final_loss, '.4f')}",
            f"held-out NLL {fmt(self.eval_nll, '.4f')} nats/token, perplexity {fmt(self.eval_ppl, '.2f')}",
            f"throughput {fmt(self.tokens_per_s, ',.0f')} tokens/s "
            f"({fmt(self.nonpad_tokens_per_s, ',.0f')} non-pad), MFU "
            + ("n/a (unknown device peak)" if self.mfu is None else f"{100 * self.mfu:.1f} %"),
            f"checkpoint: {self.checkpoint or 'none'}",
            f"loss curve: {self.curve or 'none'}",
            f"metrics:    {self.metrics}"
            + (f" (TensorBoard: {self.tensorboard})" if self.tensorboard else ""),
        ]
        return "\n".join(lines)


def _versions() -> dict[str, str]:
    import numpy
    import pyarrow

    return {
        "c4forge": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
    }


class Trainer:
    """Set up once (device, data, model, optimizer, resume), then ``run()``."""

    def __init__(self, opts: TrainOptions):
        self.opts = opts
        self.info = dist.env_info()
        self.dev: DeviceInfo = resolve_device(opts.device, self.info.local_rank)
        dist.init(self.info, self.dev.kind)
        self.main = self.info.is_main
        if opts.steps < 1:
            raise ConfigError(f"--steps must be >= 1, got {opts.steps}")
        if opts.verify_shards not in ("quick", "full"):
            raise ConfigError("--verify-shards must be quick or full")
        self._setup_resume()
        self._setup_data()
        self._setup_model()

    # ------------------------------------------------------------------------- setup
    def _setup_resume(self) -> None:
        o = self.opts
        self.ckpt_path: str | None = None
        self.state: dict[str, Any] | None = None
        existing = ckpt.list_checkpoints(o.output)
        if o.resume is None:
            if existing:
                raise OutputExistsError(
                    f"{o.output} already holds checkpoints ({os.path.basename(existing[-1])}); "
                    "pass --resume to continue it or choose another --output"
                )
            return
        if o.resume == "auto":
            self.ckpt_path = ckpt.latest_checkpoint(o.output)
            if self.ckpt_path is None:
                if existing:
                    raise VerificationError(
                        f"{ckpt.checkpoints_dir(o.output)}: checkpoints but no 'latest' pointer; "
                        f"pass --resume {existing[-1]} explicitly"
                    )
                if self.main:
                    print(
                        f"c4forge train: no checkpoint in {o.output} yet; starting at step 0",
                        file=sys.stderr,
                    )
                return
        else:
            self.ckpt_path = o.resume
            if not os.path.isdir(self.ckpt_path):
                raise VerificationError(f"{self.ckpt_path}: checkpoint directory not found")
        self.state = ckpt.read_trainer_state(self.ckpt_path)

    def _setup_data(self) -> None:
        o = self.opts
        st = self.state
        run_vocab = read_vocab_descriptor(o.vocab) if o.vocab else None
        if st is not None:
            saved = st["config"]["vocabulary"]
            if run_vocab is not None and run_vocab["sha256"] != saved["sha256"]:
                raise VerificationError(
                    f"{self.ckpt_path} was trained with vocabulary {saved['sha256']} "
                    f"({saved.get('vocab_size')} ids); --vocab {o.vocab} is {run_vocab['sha256']} "
                    f"({run_vocab.get('vocab_size')} ids)"
                )
            run_vocab = run_vocab or saved
        lengths = {}
        if st is not None:
            lengths = {k: st["config"][k] for k in ("inputs_length", "targets_length")}
        self.shards = open_shard_set(
            o.shards, vocab=run_vocab, full=o.verify_shards == "full", **lengths
        )
        index_sha = sha256_file(os.path.join(o.shards, "index.json"))
        if st is not None and st["config"]["shards_index_sha256"] != index_sha:
            raise VerificationError(
                f"{self.ckpt_path} was trained on shards whose index.json has sha256 "
                f"{st['config']['shards_index_sha256']}; {o.shards}/index.json is {index_sha}"
            )
        self.index_sha = index_sha
        self.vocabulary = dict(self.shards.vocab)
        self.vocab_dir = (
            os.path.abspath(o.vocab) if o.vocab else (st["config"].get("vocab_dir") if st else None)
        )
        if self.vocab_dir is None:
            self.vocab_dir = self._guess_vocab_dir()
        schema = {e["name"] for e in self.shards.index["schema"]}
        if not {"inputs", "targets"} <= schema:
            raise ConfigError(
                f"{o.shards}: the bundled trainer needs inputs/targets columns (an encoder-decoder "
                f"objective); these shards have {sorted(schema)}"
            )
        obj = self.shards.index["objective"]
        self.inputs_length, self.targets_length = (
            int(obj["inputs_length"]),
            int(obj["targets_length"]),
        )
        # training options: the checkpoint's, unless given and equal
        t = o.resolved_training()
        if st is not None:
            saved_t = st["config"]["training"]
            for key in TRAJECTORY_OPTIONS:
                given = getattr(o, key)
                if given is not None and given != saved_t[key]:
                    raise ConfigError(
                        f"--{key.replace('_', '-')} {given} differs from the checkpoint's "
                        f"{saved_t[key]} ({self.ckpt_path}); a resumed run keeps its trajectory"
                    )
            t = dict(saved_t)
        self.training = t
        self.plan = DataPlan(
            batch_size=t["batch_size"],
            world_size=self.info.world_size,
            rank=self.info.rank,
            grad_accum=t["grad_accum"],
            seed=t["seed"],
            shuffle_window=t["shuffle_window"],
        )

    def _guess_vocab_dir(self) -> str | None:
        """``SHARDS/../vocab`` when its vocab.json has the shards' fingerprint (export needs it)."""
        cand = os.path.join(os.path.dirname(os.path.abspath(self.opts.shards)), "vocab")
        try:
            desc = read_vocab_descriptor(cand)
        except Exception:
            return None
        return cand if desc.get("sha256") == self.vocabulary["sha256"] else None

    def _setup_model(self) -> None:
        o, st = self.opts, self.state
        if st is not None:
            self.cfg = ModelConfig.from_dict(st["config"]["model"])
            if o.preset is not None or any(getattr(o, k) is not None for k in MODEL_OPTIONS[1:]):
                wanted = make_config(
                    o.preset or st["config"]["preset"],
                    self.cfg.embedding_size,
                    ffn=o.ffn or self.cfg.ffn,
                    d_ff=o.d_ff,
                    tie_embeddings=self.cfg.tie_embeddings
                    if o.tie_embeddings is None
                    else o.tie_embeddings,
                    attn=o.attn,
                )
                # attention implementation may change on resume (same maths); the shape may not
                diff = [
                    k
                    for k, v in wanted.to_dict().items()
                    if k != "attn"
                    and v != getattr(self.cfg, k)
                    and (k != "d_ff" or o.d_ff is not None or o.ffn or o.preset)
                ]
                if diff:
                    raise ConfigError(
                        f"model options differ from the checkpoint's ({', '.join(diff)}); "
                        f"{self.ckpt_path}/config.json has {self.cfg.to_dict()}"
                    )
                if o.attn:
                    self.cfg.attn = o.attn
            self.preset = st["config"]["preset"]
        else:
            if o.preset is None:
                raise ConfigError("--preset is required (tiny, small, base) for a new run")
            self.preset = o.preset
            attn = o.attn or ("eager" if self.dev.kind == "xla" else None)
            self.cfg = make_config(
                o.preset,
                int(self.vocabulary["embedding_size"]),
                ffn=o.ffn,
                d_ff=o.d_ff,
                tie_embeddings=o.tie_embeddings,
                attn=attn,
            )
        if self.cfg.embedding_size < int(self.vocabulary["vocab_size"]):
            raise ConfigError(
                f"model embedding_size {self.cfg.embedding_size} < vocabulary size "
                f"{self.vocabulary['vocab_size']}"
            )
        if o.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it
            torch.use_deterministic_algorithms(True)
        torch.manual_seed(self.training["seed"])
        model = GLUTransformer(self.cfg).to(self.dev.device)
        self.model = model
        t = self.training
        self.optimizer = build_optimizer(t["optimizer"], model.parameters(), lr=t["lr"])
        self.schedule = schedule_fn(t["schedule"], o.steps, warmup=t["warmup"], lr=t["lr"])
        self.start_step = 0
        self.counters = {"nonpad_tokens": 0}
        if st is not None:
            state = ckpt.load_checkpoint(self.ckpt_path, model, self.optimizer)
            self.start_step = int(state["step"])
            self.counters["nonpad_tokens"] = int(state.get("nonpad_tokens", 0))
        use_compile = o.compile if o.compile is not None else self.dev.kind == "cuda"
        fwd: torch.nn.Module = model
        if use_compile and self.dev.kind != "xla":
            fwd = torch.compile(model, dynamic=False)  # static shapes (model.md §4)
        self.forward_model = fwd  # eval path (no DDP)
        self.train_model = dist.wrap_ddp(fwd, self.info, self.dev.device)
        self.compiled = use_compile
        self.flops = flops_per_example(self.cfg, self.inputs_length, self.targets_length)
        note = schedule_note(t["optimizer"], t["schedule"])
        if note and self.main:
            print(f"c4forge train: {note}", file=sys.stderr)

    # ------------------------------------------------------------------------- pieces
    def _loader(self) -> Any:
        stream = TrainStream(
            self.shards,
            self.plan,
            self.start_step,
            self.opts.steps,
            host_dtype=np.int32 if self.dev.kind == "xla" else None,
        )
        workers = self.opts.num_workers
        if workers is None:
            workers = 2 if self.dev.kind in ("cuda", "xla") else 0
        loader = torch.utils.data.DataLoader(
            stream,
            batch_size=None,
            num_workers=workers,
            pin_memory=self.dev.kind == "cuda",
            prefetch_factor=4 if workers else None,
        )
        if self.dev.kind == "xla":
            import torch_xla.distributed.parallel_loader as pl

            return pl.MpDeviceLoader(loader, self.dev.device)
        return loader

    def _forward_loss(
        self, model: Any, batch: Any, z_loss: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        with self.dev.autocast():
            logits = model(
                batch.input_ids,
                batch.decoder_input_ids,
                batch.encoder_segment_ids,
                batch.decoder_segment_ids,
            )
        return weighted_cross_entropy(logits, batch.targets, z_loss)

    def _step(
        self, step: int, items: list[dict[str, Any]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One optimizer step (``step`` is 0-based; the schedule sees ``step + 1``)."""
        nb = self.dev.kind == "cuda"
        batches = [to_device(it, self.dev.device, non_blocking=nb) for it in items]
        weight = torch.stack([b.weights().sum() for b in batches]).sum().float()
        dist.all_reduce_sum(weight, self.info)
        nonpad = torch.stack(
            [(b.input_ids != 0).sum() + (b.targets != 0).sum() for b in batches]
        ).sum()
        scale = self.info.world_size / weight.clamp_min(1.0)
        set_lr(self.optimizer, self.schedule(step + 1))
        loss_total = torch.zeros((), device=self.dev.device)
        z = float(self.training["z_loss"])
        last = len(batches) - 1
        for k, b in enumerate(batches):
            with dist.no_sync(self.train_model, self.info.enabled and k < last):
                loss_sum, _ = self._forward_loss(self.train_model, b, z)
                (loss_sum * scale).backward()
            loss_total = loss_total + loss_sum.detach()
        if self.training["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.training["grad_clip"])
        if self.dev.kind == "xla":
            import torch_xla.core.xla_model as xm

            xm.optimizer_step(self.optimizer)
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return loss_total, weight, nonpad

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float] | None:
        """Held-out log-perplexity over the first --eval-rows validation rows (model.md §3)."""
        if "validation" not in self.shards.index["splits"]:
            return None
        if not self.shards.split_shards("validation"):
            return None
        self.model.eval()
        sums = torch.zeros(2, dtype=torch.float64, device=self.dev.device)
        for data in eval_batches(
            self.shards,
            self.opts.eval_rows,
            self.plan.micro_rows,
            self.info.rank,
            self.info.world_size,
        ):
            b = to_device(data, self.dev.device)
            loss_sum, weight = self._forward_loss(self.forward_model, b, 0.0)
            sums += torch.stack([loss_sum.double(), weight.double()])
        self.model.train()
        dist.all_reduce_sum(sums, self.info)
        total, weight = sums.tolist()
        if weight <= 0:
            return None
        nll = total / weight
        return nll, math.exp(min(nll, 700.0))

    def _save(self, step: int, nonpad: int) -> str | None:
        path = None
        if self.main:
            state = {
                "examples": step * self.plan.batch_size,
                "tokens": step * self.plan.batch_size * (self.inputs_length + self.targets_length),
                "nonpad_tokens": nonpad,
                "schedule": {
                    "name": self.training["schedule"],
                    "total_steps": self.opts.steps,
                    "warmup": self.training["warmup"],
                    "lr": self.training["lr"],
                    "value": self.schedule(max(step, 1)),
                },
                "data": {
                    "position_step": step,
                    "global_rows_consumed": step * self.plan.batch_size,
                },
                "rng": ckpt.rng_state(),
                "config": self.run_config(),
                "versions": _versions(),
            }
            path = ckpt.save_checkpoint(
                self.opts.output,
                step,
                self.model,
                self.optimizer,
                state,
                self.cfg.to_dict(),
                keep=self.opts.keep_checkpoints,
            )
        dist.barrier(self.info)
        return path

    def run_config(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "model": self.cfg.to_dict(),
            "training": dict(self.training),
            "steps": self.opts.steps,
            "inputs_length": self.inputs_length,
            "targets_length": self.targets_length,
            "shards": os.path.abspath(self.opts.shards),
            "shards_index_sha256": self.index_sha,
            "dataset_fingerprint": self.shards.fingerprint,
            "vocabulary": self.vocabulary,
            "vocab_dir": self.vocab_dir,
            "vocab_sha256": self.vocabulary["sha256"],
            "world_size": self.info.world_size,
            "device": self.dev.kind,
            "compile": self.compiled,
        }

    # ------------------------------------------------------------------------- the loop
    def run(self) -> RunSummary:
        o = self.opts
        os.makedirs(o.output, exist_ok=True)
        log = MetricsLog(o.output, self.start_step if self.state else None) if self.main else None
        t_start = time.perf_counter()
        bar = None
        if self.main and o.progress:
            from tqdm import tqdm

            bar = tqdm(
                total=o.steps,
                initial=self.start_step,
                unit="step",
                desc="train",
                dynamic_ncols=True,
            )
        window = {
            "loss": torch.zeros((), device=self.dev.device),
            "weight": torch.zeros((), device=self.dev.device),
            "nonpad": torch.zeros((), dtype=torch.int64, device=self.dev.device),
        }
        last: dict[str, Any] = {
            "loss": None,
            "tps": None,
            "nonpad_tps": None,
            "mfu": None,
            "eval": None,
            "nonpad_total": self.counters["nonpad_tokens"],
        }
        mark = {"time": time.perf_counter(), "step": self.start_step, "paused": 0.0}
        checkpoint_path = self.ckpt_path if self.state else None
        accum = self.plan.grad_accum
        it = iter(self._loader())
        step = self.start_step
        try:
            while step < o.steps:
                items = [next(it) for _ in range(accum)]
                if any(
                    x["step"] != step for x in items
                ):  # cannot happen unless the loader misorders
                    raise RuntimeError(f"data loader out of order at step {step}")
                try:
                    loss, weight, nonpad = self._step(step, items)
                except (RuntimeError, torch.OutOfMemoryError) as err:
                    if is_out_of_memory(err):
                        raise ConfigError(
                            f"out of memory on {self.dev.name} with micro-batches of "
                            f"{self.plan.micro_rows} rows × {self.inputs_length}/{self.targets_length} "
                            f"tokens: lower --batch-size or raise --grad-accum (now {accum})"
                        ) from None
                    raise
                window["loss"] += loss
                window["weight"] += weight
                window["nonpad"] += nonpad
                step += 1
                stopping = o.stop_after_step is not None and step >= o.stop_after_step
                is_last = step == o.steps
                if step % max(1, o.log_every) == 0 or is_last:
                    self._log(step, window, mark, last, log, bar)
                if bar is not None:
                    bar.update(1)
                paused = time.perf_counter()
                if (o.eval_every and step % o.eval_every == 0) or is_last:
                    result = self.evaluate()
                    if result is not None:
                        last["eval"] = result
                        if log is not None:
                            log.write({"step": step, "eval_nll": result[0], "eval_ppl": result[1]})
                        if bar is not None:
                            bar.write(
                                f"step {step}: held-out NLL {result[0]:.4f} (ppl {result[1]:.2f})"
                            )
                if (o.save_every and step % o.save_every == 0) or is_last or stopping:
                    pending = dist.all_reduce_sum(window["nonpad"].clone(), self.info)
                    nonpad_seen = last["nonpad_total"] + int(pending)  # a sync, once per save
                    checkpoint_path = self._save(step, nonpad_seen) or checkpoint_path
                mark["paused"] += time.perf_counter() - paused
                if o.crash_after_step is not None and step == o.crash_after_step:
                    os.kill(os.getpid(), signal.SIGKILL)  # a hard crash, for the resume test
                if stopping:
                    break
        finally:
            if bar is not None:
                bar.close()
            if log is not None:
                log.close()
        curve = None
        if self.main:
            curve = plot_loss_curve(
                os.path.join(o.output, "metrics.jsonl"),
                os.path.join(o.output, CURVE),
                title=f"{self.preset} / {self.cfg.ffn} / {self.training['optimizer']}",
            )
        ev = last["eval"]
        return RunSummary(
            steps=step,
            start_step=self.start_step,
            final_loss=last["loss"],
            eval_nll=ev[0] if ev else None,
            eval_ppl=ev[1] if ev else None,
            tokens_per_s=last["tps"],
            nonpad_tokens_per_s=last["nonpad_tps"],
            mfu=last["mfu"],
            seconds=time.perf_counter() - t_start,
            checkpoint=checkpoint_path,
            curve=curve,
            metrics=os.path.join(o.output, "metrics.jsonl"),
            tensorboard=log.tensorboard_dir if log is not None else None,
        )

    def _log(
        self, step: int, window: dict, mark: dict, last: dict, log: MetricsLog | None, bar: Any
    ) -> None:
        """Read the window's device sums back (the only host sync), write one record."""
        # loss and non-pad counts are per rank; the weight count is already global (all-reduced
        # in the step), so only the first two are summed over ranks.
        packed = torch.stack([window["loss"].double(), window["nonpad"].double()])
        weight_t = window["weight"].double().clone()

        def emit(values: torch.Tensor) -> None:
            dist.all_reduce_sum(values, self.info)
            loss_sum, nonpad = values.tolist()
            weight = float(weight_t)
            now = time.perf_counter()
            seconds = max(now - mark["time"] - mark["paused"], 1e-9)
            steps = step - mark["step"]
            examples = steps * self.plan.batch_size
            tps = examples * (self.inputs_length + self.targets_length) / seconds
            nonpad_tps = nonpad / seconds
            util = None
            if self.dev.peak_flops:
                util = mfu(
                    self.flops, examples / seconds, self.dev.peak_flops, self.info.world_size
                )
            loss = loss_sum / max(weight, 1.0)
            last.update(loss=loss, tps=tps, nonpad_tps=nonpad_tps, mfu=util)
            last["nonpad_total"] += int(nonpad)
            mark.update(time=now, step=step, paused=0.0)
            record = {
                "step": step,
                "loss": loss,
                "lr": self.schedule(step),
                "tokens_per_s": tps,
                "nonpad_tokens_per_s": nonpad_tps,
                "step_time_s": seconds / max(steps, 1),
                "examples": step * self.plan.batch_size,
            }
            if util is not None:
                record["mfu"] = util
            if log is not None:
                log.write(record)
            if bar is not None:
                post = {"loss": f"{loss:.4f}", "tok/s": f"{tps:,.0f}"}
                if util is not None:
                    post["MFU"] = f"{100 * util:.1f}%"
                bar.set_postfix(post, refresh=False)

        if self.dev.kind == "xla":
            import torch_xla.core.xla_model as xm

            xm.add_step_closure(emit, args=(packed,))
        else:
            emit(packed)
        for v in window.values():
            v.zero_()


def train(opts: TrainOptions) -> RunSummary:
    trainer = Trainer(opts)
    try:
        summary = trainer.run()
    except BaseException:
        dist.shutdown(synchronize=False)
        raise
    dist.shutdown()
    return summary
