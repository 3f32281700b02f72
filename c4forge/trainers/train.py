"""The training loop of ``c4forge train`` (model.md §4–§7, finetune.md §2).

The shards' objective picks the model family (``models/``: t5 for span corruption and the other
encoder-decoder objectives, bert for ``bert_mlm_nsp``); what differs between families (columns,
device batches, loss parts, metrics, FLOPs) comes from ``families.py``, the rest is shared.

One process per device. The data position is the global step (data.py), so a resumed run rebuilds
its loader at ``step`` and continues with the exact next batch; weights, optimizer state and RNG
come from safetensors/JSON checkpoints (checkpoint.py). Inside a step nothing reads a value back
to the host: the loss and token counts accumulate on the device and are read every
``--log-every`` steps (through ``xm.add_step_closure`` on TPU).

Loss normalisation (model.md §5): the weight count ``W`` of the *global* batch is all-reduced
first; every rank back-propagates ``world · Σ_local w·CE / W`` per micro-batch, and DDP's
gradient average turns that into exactly the single-device gradient of ``Σ w·CE / W`` (for each
loss part of the family: bert's MLM and NSP parts have their own counts).

With dropout (bert's default 0.1) the masks of micro-batch ``m`` of step ``s`` come from a seed of
``(seed, s, m)`` counted over the global batch, so exact resume and "2 ranks = 1 rank × 2
accumulation steps" hold with dropout on.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from c4forge import __version__
from c4forge.errors import ConfigError, OutputExistsError, VerificationError
from c4forge.io.storage import read_json
from c4forge.tokenizers import vocab_files
from c4forge.tokenizers.vocab_files import check_vocab_dir, copy_run_vocab, read_descriptor
from c4forge.trainers import checkpoint as ckpt
from c4forge.trainers import distributed as dist
from c4forge.trainers import models
from c4forge.trainers.data import (
    DataPlan,
    ShardReader,
    TrainStream,
    eval_batches,
    open_shard_set,
)
from c4forge.trainers.device import DeviceInfo, is_out_of_memory, resolve_device
from c4forge.trainers.families import training_for
from c4forge.trainers.flops import mfu
from c4forge.trainers.metrics import CURVE, MetricsLog, plot_loss_curve
from c4forge.trainers.optim import (
    DEFAULT_GRAD_CLIP,
    DEFAULT_LR,
    DEFAULT_SCHEDULE,
    build_optimizer,
    schedule_note,
    set_lr,
    weight_decay_groups,
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
MODEL_OPTIONS = ("preset", "ffn", "d_ff", "tie_embeddings", "attn", "dropout")
# the optimizer each family trains with unless --optimizer says otherwise
FAMILY_OPTIMIZER = {"t5": "adafactor", "bert": "adamw"}
StepHook = Callable[[int], None]


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
    dropout: float | None = None
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

    def resolved_training(self, family: str = "t5") -> dict[str, Any]:
        """The trajectory options with defaults filled in (the family picks the optimizer)."""
        opt = self.optimizer or FAMILY_OPTIMIZER[family]
        schedule = self.schedule or DEFAULT_SCHEDULE.get(opt, "isr_decay")
        # BERT: warm-up over the first 10 % of the steps (10k of 1M); elsewhere 10,000 steps
        default_warmup = int(0.1 * self.steps) if schedule == "linear" else 10_000
        return {
            "batch_size": 128 if self.batch_size is None else self.batch_size,
            "grad_accum": self.grad_accum or 1,
            "seed": 0 if self.seed is None else self.seed,
            "shuffle_window": self.shuffle_window or 0,
            "optimizer": opt,
            "schedule": schedule,
            "lr": DEFAULT_LR.get(opt, 1e-2) if self.lr is None else self.lr,
            "warmup": default_warmup if self.warmup is None else self.warmup,
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
            latest = ckpt.latest_checkpoint(o.output)
            if latest is None:
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
            self.ckpt_path, self.state = self._newest_intact(latest, existing)
            return
        self.ckpt_path = o.resume
        if not os.path.isdir(self.ckpt_path):
            raise VerificationError(f"{self.ckpt_path}: checkpoint directory not found")
        self.state = ckpt.read_trainer_state(self.ckpt_path)  # an explicit choice: no fallback

    def _newest_intact(self, latest: str, existing: list[str]) -> tuple[str, dict[str, Any]]:
        """``latest``, or with a warning the newest older checkpoint whose files verify."""
        order = [latest] + [p for p in reversed(existing) if p != latest and p < latest]
        problems = []
        for path in order:
            try:
                state = ckpt.read_trainer_state(path)
            except VerificationError as err:
                problems.append(str(err))
                continue
            if problems and self.main:
                print(
                    f"c4forge train: warning: {'; '.join(problems)}; resuming from the newest "
                    f"intact checkpoint {path}",
                    file=sys.stderr,
                )
            return path, state
        raise VerificationError(
            f"no intact checkpoint in {ckpt.checkpoints_dir(self.opts.output)}: "
            + "; ".join(problems)
        )

    def _setup_data(self) -> None:
        o = self.opts
        st = self.state
        self.family = self._family_of_shards()
        self.fam = training_for(self.family)
        # the vocabulary: --vocab, else the copy a shard set carries (SHARDS/vocab), else what
        # the checkpoint recorded; every one is checked against the shards' fingerprint
        self.vocab_source = o.vocab or vocab_files.copy_dir(o.shards)
        if self.vocab_source is None and st is not None:
            self.vocab_source = vocab_files.copy_dir(o.output)  # the run's own copy
        run_vocab = read_descriptor(self.vocab_source) if self.vocab_source else None
        if st is not None:
            saved = st["config"]["vocabulary"]
            if run_vocab is not None and run_vocab["sha256"] != saved["sha256"]:
                raise VerificationError(
                    f"{self.ckpt_path} was trained with vocabulary {saved['sha256']} "
                    f"({saved.get('vocab_size')} ids); {self.vocab_source} is {run_vocab['sha256']} "
                    f"({run_vocab.get('vocab_size')} ids)"
                )
            run_vocab = run_vocab or saved
        lengths = {}
        if st is not None:
            lengths = {k: st["config"][k] for k in ("inputs_length", "targets_length")}
        self.shards = open_shard_set(
            o.shards, vocab=run_vocab, full=o.verify_shards == "full", **lengths
        )
        index_sha = self.shards.index_sha256
        if st is not None and st["config"]["shards_index_sha256"] != index_sha:
            raise VerificationError(
                f"{self.ckpt_path} was trained on shards whose index.json has sha256 "
                f"{st['config']['shards_index_sha256']}; {o.shards}/index.json is {index_sha}"
            )
        self.index_sha = index_sha
        self.vocabulary = dict(self.shards.vocab)
        own = vocab_files.copy_dir(o.output)
        if own:  # a resumed run's copy must be the shards' vocabulary
            check_vocab_dir(own, self.vocabulary["sha256"])
        self.vocab_dir = (
            os.path.abspath(self.vocab_source)
            if self.vocab_source
            else (st["config"].get("vocab_dir") if st else None)
        )
        if self.vocab_dir is None:
            self.vocab_dir = self._guess_vocab_dir()
        obj = self.shards.index["objective"]
        self.inputs_length, self.targets_length = (
            int(obj["inputs_length"]),
            int(obj["targets_length"]),
        )
        # training options: the checkpoint's, unless given and equal
        t = o.resolved_training(self.family)
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

    def _family_of_shards(self) -> str:
        """The family the shards train (read from index.json before anything else is checked);
        a preset or checkpoint of the other family is refused, naming both."""
        o = self.opts
        try:
            index = read_json(os.path.join(o.shards, "index.json"))
            objective = str(index["objective"]["name"])
            schema = {e["name"] for e in index["schema"]}
        except (OSError, ValueError, KeyError, TypeError):
            return "t5"  # unreadable: open_shard_set reports it; nothing is trained anyway
        family = models.family_of_objective(objective, schema, o.shards)
        rows = f"{o.shards} holds {objective} rows, which train the {family} family"
        if self.state is not None:
            saved = models.config_family(self.state["config"]["model"])
            if saved != family:
                raise ConfigError(
                    f"{self.ckpt_path} is a {saved}-family checkpoint ({self.state['config']['preset']})"
                    f", but {rows}"
                )
        if o.preset is not None:
            given = models.family_of_preset(o.preset)
            if given != family:
                valid = [p for p, f in models.preset_families().items() if f == family]
                raise ConfigError(
                    f"--preset {o.preset} is a {given}-family preset, but {rows} "
                    f"(presets {', '.join(valid)})"
                )
        if family != "t5" and o.tie_embeddings:
            raise ConfigError("--tie-embeddings is a t5 option (bert always ties its decoder)")
        if family != "t5" and o.z_loss:
            raise ConfigError("--z-loss is a t5 option (t5x's auxiliary loss)")
        return family

    def _guess_vocab_dir(self) -> str | None:
        """``SHARDS/../vocab`` when its vocab.json has the shards' fingerprint (export needs it)."""
        cand = os.path.join(os.path.dirname(os.path.abspath(self.opts.shards)), "vocab")
        if not vocab_files.is_vocab_dir(cand):  # only "no vocabulary there" means None
            return None
        desc = read_descriptor(cand)  # a damaged one is an error, not a silent None
        return cand if desc.get("sha256") == self.vocabulary["sha256"] else None

    def _setup_model(self) -> None:
        o, st = self.opts, self.state
        family_module = models.family_module(self.family)
        if st is not None:
            _, self.cfg = models.read_config(st["config"]["model"])
            if o.preset is not None or any(getattr(o, k) is not None for k in MODEL_OPTIONS[1:]):
                overrides: dict[str, Any] = dict(
                    ffn=o.ffn or self.cfg.ffn, d_ff=o.d_ff, attn=o.attn, dropout_rate=o.dropout
                )
                if self.family == "t5":
                    overrides["tie_embeddings"] = (
                        self.cfg.tie_embeddings if o.tie_embeddings is None else o.tie_embeddings
                    )
                wanted = family_module.make_config(
                    o.preset or st["config"]["preset"], self.cfg.embedding_size, **overrides
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
                valid = [p for p, f in models.preset_families().items() if f == self.family]
                raise ConfigError(
                    f"--preset is required ({', '.join(valid)} for these shards) for a new run"
                )
            self.preset = o.preset
            attn = o.attn or ("eager" if self.dev.kind == "xla" else None)
            overrides = dict(ffn=o.ffn, d_ff=o.d_ff, attn=attn, dropout_rate=o.dropout)
            if self.family == "t5":
                overrides["tie_embeddings"] = o.tie_embeddings
            self.cfg = family_module.make_config(
                o.preset, int(self.vocabulary["embedding_size"]), **overrides
            )
        if self.cfg.embedding_size < int(self.vocabulary["vocab_size"]):
            raise ConfigError(
                f"model embedding_size {self.cfg.embedding_size} < vocabulary size "
                f"{self.vocabulary['vocab_size']}"
            )
        if o.deterministic:
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it
            torch.use_deterministic_algorithms(True)
        if self.family == "bert" and self.inputs_length > self.cfg.max_position:
            raise ConfigError(
                f"{o.shards}: rows of {self.inputs_length} tokens exceed the model's "
                f"{self.cfg.max_position} positions"
            )
        self._check_first_rows()
        torch.manual_seed(self.training["seed"])
        model = models.build_model(self.family, self.cfg).to(self.dev.device)
        self.model = model
        t = self.training
        params = (
            weight_decay_groups(model.named_parameters())
            if t["optimizer"] == "adamw"
            else model.parameters()
        )
        self.optimizer = build_optimizer(t["optimizer"], params, lr=t["lr"])
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
        self.flops = self.fam.flops_per_example(self.cfg, self.inputs_length, self.targets_length)
        self.row_tokens = self.fam.row_tokens(self.inputs_length, self.targets_length)
        note = schedule_note(t["optimizer"], t["schedule"])
        if note and self.main:
            print(f"c4forge train: {note}", file=sys.stderr)

    def _check_first_rows(self) -> None:
        """The family's row checks on the first shard of each split, before anything is written
        (every other shard is checked when the loader first decodes it)."""
        if not self.fam.checks_rows:
            return
        for split in ("train", "validation"):
            shards = self.shards.split_shards(split) if split in self.shards.index["splits"] else []
            if shards:
                reader = ShardReader(
                    self.shards, [shards[0][0]], [shards[0][1]], cache=1, columns=self.fam.columns
                )
                self.fam.check_rows(reader.shard(0), shards[0][0], self.cfg)

    def _check(self, data: dict[str, np.ndarray], where: str) -> None:
        self.fam.check_rows(data, where, self.cfg)

    # ------------------------------------------------------------------------- pieces
    def _loader(self) -> Any:
        stream = TrainStream(
            self.shards,
            self.plan,
            self.start_step,
            self.opts.steps,
            host_dtype=np.int32 if self.dev.kind == "xla" else None,
            columns=self.fam.columns,
            check=self._check,
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

    def _seed_micro(self, step: int, micro: int) -> None:
        """Dropout randomness as a function of (seed, step, global micro-batch): a resumed run
        and any split of the batch over ranks and accumulation draw the same masks."""
        if not self.cfg.dropout_rate:
            return  # nothing random in the step (the t5 pretraining default)
        ss = np.random.SeedSequence([self.training["seed"], 0x44524F50, step, micro])
        value = int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))
        if self.dev.kind == "xla":
            import torch_xla.core.xla_model as xm

            xm.set_rng_state(value)
        torch.manual_seed(value)

    def _step(
        self, step: int, items: list[dict[str, Any]]
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """One optimizer step (``step`` is 0-based; the schedule sees ``step + 1``).

        Returns the loss-part sums, their global counts, the metric sums and the non-pad tokens.
        """
        nb = self.dev.kind == "cuda"
        fam = self.fam
        batches = [fam.to_device(it, self.dev.device, non_blocking=nb) for it in items]
        counts = torch.stack([fam.counts(b) for b in batches]).sum(0).float()
        dist.all_reduce_sum(counts, self.info)
        nonpad = torch.stack([fam.nonpad(b) for b in batches]).sum()
        scale = self.info.world_size / counts.clamp_min(1.0)
        set_lr(self.optimizer, self.schedule(step + 1))
        sums_total = torch.zeros(len(fam.parts), device=self.dev.device)
        stats_total = torch.zeros(len(fam.stats), device=self.dev.device)
        z = float(self.training["z_loss"])
        last = len(batches) - 1
        first_micro = self.info.rank * len(batches)
        for k, b in enumerate(batches):
            self._seed_micro(step, first_micro + k)
            with dist.no_sync(self.train_model, self.info.enabled and k < last):
                sums, stats = fam.forward_sums(self.train_model, b, z, self.dev.autocast())
                (sums * scale).sum().backward()
            sums_total = sums_total + sums.detach()
            stats_total = stats_total + stats
        if self.training["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.training["grad_clip"])
        if self.dev.kind == "xla":
            import torch_xla.core.xla_model as xm

            xm.optimizer_step(self.optimizer)
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return sums_total, counts, stats_total, nonpad

    @torch.no_grad()
    def evaluate(self) -> dict[str, float] | None:
        """Held-out loss over the first --eval-rows validation rows (model.md §3): the t5
        family's log-perplexity, the bert family's MLM/NSP losses and accuracies."""
        if "validation" not in self.shards.index["splits"]:
            return None
        if not self.shards.split_shards("validation"):
            return None
        self.model.eval()
        k, m = len(self.fam.parts), len(self.fam.stats)
        acc = torch.zeros(2 * k + m, dtype=torch.float64, device=self.dev.device)
        for data in eval_batches(
            self.shards,
            self.opts.eval_rows,
            self.plan.micro_rows,
            self.info.rank,
            self.info.world_size,
            columns=self.fam.columns,
            check=self._check,
        ):
            b = self.fam.to_device(data, self.dev.device)
            sums, stats = self.fam.forward_sums(self.forward_model, b, 0.0, self.dev.autocast())
            acc += torch.cat([sums.double(), self.fam.counts(b).double(), stats.double()])
        self.model.train()
        dist.all_reduce_sum(acc, self.info)
        values = acc.tolist()
        record = self.fam.eval_record(values[:k], values[k : 2 * k], values[2 * k :])
        return record or None

    def _save(self, step: int, nonpad: int) -> str | None:
        path = None
        if self.main:
            state = {
                "examples": step * self.plan.batch_size,
                "tokens": step * self.plan.batch_size * self.row_tokens,
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
            "family": self.family,
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
    def run(self, hooks: Sequence[StepHook] = ()) -> RunSummary:
        """Train to ``--steps``; each of ``hooks`` is called with the step number after every
        step's log, eval and checkpoint (an extension point; the resume tests kill from one)."""
        o = self.opts
        os.makedirs(o.output, exist_ok=True)
        if self.main and self.vocab_dir:
            copy_run_vocab(self.vocab_dir, o.output, self.vocabulary["sha256"])
        log = MetricsLog(o.output, self.start_step if self.state else None) if self.main else None
        t_start = time.perf_counter()
        bar = None
        if self.main and o.progress:
            from c4forge.progress import progress

            bar = progress(total=o.steps, initial=self.start_step, unit="step", desc="train")
        k, m = len(self.fam.parts), len(self.fam.stats)
        window = {
            "loss": torch.zeros(k, device=self.dev.device),
            "weight": torch.zeros(k, device=self.dev.device),
            "stats": torch.zeros(m, device=self.dev.device),
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
                    loss, weight, stats, nonpad = self._step(step, items)
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
                window["stats"] += stats
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
                            log.write({"step": step, **result})
                        if bar is not None:
                            bar.write(f"step {step}: {self.fam.eval_text(result)}")
                if (o.save_every and step % o.save_every == 0) or is_last or stopping:
                    pending = dist.all_reduce_sum(window["nonpad"].clone(), self.info)
                    nonpad_seen = last["nonpad_total"] + int(pending)  # a sync, once per save
                    checkpoint_path = self._save(step, nonpad_seen) or checkpoint_path
                mark["paused"] += time.perf_counter() - paused
                for hook in hooks:
                    hook(step)
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
            evaluation=ev,
            eval_line=self.fam.eval_text(ev) if ev else None,
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
        parts, stat_names = self.fam.parts, self.fam.stats
        packed = torch.cat(
            [window["loss"].double(), window["stats"].double(), window["nonpad"].double()[None]]
        )
        weight_t = window["weight"].double().clone()

        def emit(values: torch.Tensor) -> None:
            dist.all_reduce_sum(values, self.info)
            flat = values.tolist()
            sums, stat_sums, nonpad = flat[: len(parts)], flat[len(parts) : -1], flat[-1]
            weights = weight_t.tolist()
            now = time.perf_counter()
            seconds = max(now - mark["time"] - mark["paused"], 1e-9)
            steps = step - mark["step"]
            examples = steps * self.plan.batch_size
            tps = examples * self.row_tokens / seconds
            nonpad_tps = nonpad / seconds
            util = None
            if self.dev.peak_flops:
                util = mfu(
                    self.flops, examples / seconds, self.dev.peak_flops, self.info.world_size
                )
            means = [v / max(w, 1.0) for v, w in zip(sums, weights)]
            loss = means[0] if len(means) == 1 else sum(means)
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
            if len(parts) > 1:
                record.update(zip(parts, means))
            for (name, part), value in zip(stat_names, stat_sums):
                record[name] = value / max(weights[part], 1.0)
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


def train(opts: TrainOptions, hooks: Sequence[StepHook] = ()) -> RunSummary:
    """Train to ``opts.steps``; under torchrun, leave the process group cleanly.

    Teardown order matters with gloo: the DDP wrapper's reducer (and the optimizer and loader
    around it) hold the process group, whose C++ worker threads are joined only when the last
    reference goes. Left to the garbage collector (the trainer sits in reference cycles) that
    happened during interpreter shutdown, where a rank could abort with "terminate called
    without an active exception" while its peer was still in the final barrier. So the trainer
    is dropped and collected here, every rank then meets at a barrier, and only then is the
    group destroyed (``distributed.shutdown``)."""
    trainer: Trainer | None = None
    finished = False
    try:
        trainer = Trainer(opts)
        summary = trainer.run(hooks)
        finished = True
    finally:
        trainer = None  # drop DDP, optimizer, loader: the last references to the group
        gc.collect()
        dist.shutdown(synchronize=finished)  # after an error no barrier: peers may never come
    return summary
