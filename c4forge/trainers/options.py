"""``TrainOptions``: the typed, frozen request of one ``c4forge train`` run, with its flags.

Torch-free (``c4forge --help`` imports it). The field order is the order of ``train --help``;
each field declares its flag (``c4forge.cliconfig.option``). ``None`` means "not given": the
default, or on resume the checkpoint's value.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from c4forge.cliconfig import CliConfig, flag, non_negative, option, positive
from c4forge.trainers.mixture_spec import STRATEGIES, MixtureSpec, load_mixture, spec_from_flags

_M, _O, _X, _R = "model", "optimisation", "mixture", "run"  # groups of `train --help`
DEVICES = ("auto", "cpu", "cuda", "xla")  # --device of train and finetune (trainers/device.py)


@dataclass(frozen=True)
class Trajectory:
    """The options that fix the data order and the optimisation path, defaults resolved. A
    resumed run takes them from its checkpoint (``config.training`` of the trainer state)."""

    batch_size: int
    grad_accum: int
    seed: int
    shuffle_window: int
    optimizer: str
    schedule: str
    lr: float
    warmup: int
    grad_clip: float
    z_loss: float

    @classmethod
    def from_dict(cls, saved: dict[str, Any]) -> Trajectory:
        return cls(**{f.name: saved[f.name] for f in fields(cls)})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True, kw_only=True)
class TrainOptions(CliConfig):
    """Everything ``c4forge train`` accepts; ``None`` = not given (default or checkpoint's)."""

    shards: str = option(
        "shards", help="shard directory (with index.json), or a mixture file (.toml)"
    )
    output: str = option(
        "--output", "-o", required=True, help="run directory (checkpoints, metrics, curve)"
    )
    steps: int = option("--steps", type=positive, required=True, help="total optimizer steps")
    # -- model
    preset: str | None = option(
        "--preset",
        default=None,
        group=_M,
        help="t5: tiny, small, base; bert: bert-tiny, bert-mini, bert-small, bert-medium, "
        "bert-base (required for a new run)",
    )
    ffn: str | None = option(
        "--ffn",
        default=None,
        group=_M,
        help="relu gelu swish glu bilinear reglu geglu swiglu (default t5 geglu, bert gelu)",
    )
    d_ff: int | None = option(
        "--d-ff",
        default=None,
        group=_M,
        type=positive,
        help="FFN width, used as given (no 2/3 rule)",
    )
    tie_embeddings: bool | None = option(
        "--tie-embeddings", default=None, group=_M, action="store_true", help="T5 1.0 tied head"
    )
    attn: str | None = option(
        "--attn",
        default=None,
        group=_M,
        choices=("sdpa", "eager", "flex"),
        help="attention path (default sdpa)",
    )
    dropout: float | None = option(
        "--dropout",
        default=None,
        group=_M,
        type=float,
        help="dropout rate (default t5 0.0, bert 0.1 as BERT)",
    )
    vocab: str | None = option(
        "--vocab",
        default=None,
        group=_M,
        help="vocabulary directory the shards must match (default SHARDS/vocab); the run keeps "
        "a copy in RUN/vocab",
    )
    # -- optimisation
    batch_size: int | None = option(
        "--batch-size",
        default=None,
        group=_O,
        type=positive,
        help="global rows per step (default 128)",
    )
    grad_accum: int | None = option(
        "--grad-accum",
        default=None,
        group=_O,
        type=positive,
        help="micro-steps per step (default 1)",
    )
    optimizer: str | None = option(
        "--optimizer",
        default=None,
        group=_O,
        choices=("adafactor", "adamwscale", "adamw"),
        help="default adafactor (t5), adamw (bert: wd 0.01 off biases/LayerNorm, eps 1e-6)",
    )
    schedule: str | None = option(
        "--schedule",
        default=None,
        group=_O,
        choices=("isr", "isr_decay", "cosine", "constant", "linear"),
        help="default isr_decay (adafactor) / cosine (adamwscale) / linear (adamw)",
    )
    lr: float | None = option(
        "--lr",
        default=None,
        group=_O,
        type=float,
        help="peak LR (adamwscale 2e-2, adamw 1e-4) or Adafactor's cap (1e-2)",
    )
    warmup: int | None = option(
        "--warmup",
        default=None,
        group=_O,
        type=non_negative,
        help="warm-up steps (default: linear 10 %% of --steps; cosine 10 %% of --steps, at "
        "most 10000; isr/isr_decay 10000, the plateau that holds the relative step at 0.01)",
    )
    grad_clip: float | None = option(
        "--grad-clip",
        default=None,
        group=_O,
        type=float,
        help="global norm clip (0 = off; adamwscale 1.0)",
    )
    z_loss: float | None = option(
        "--z-loss",
        default=None,
        group=_O,
        type=float,
        help="t5x z-loss coefficient (default 0; t5x 1e-4)",
    )
    seed: int | None = option(
        "--seed",
        default=None,
        group=_O,
        type=non_negative,
        help="model init and data order seed (default 0)",
    )
    shuffle_window: int | None = option(
        "--shuffle-batches",
        default=None,
        group=_O,
        type=non_negative,
        help="shuffle rows within windows of K global batches (default 0: shard order)",
    )
    # -- mixture (the sources' figures: loss_<name>, tokens_<name>, eval_nll_<name>)
    mix: tuple[str, ...] | None = option(
        "--mix",
        default=None,
        group=_X,
        action="append",
        metavar="[NAME=]SHARDS",
        convert=tuple,
        help="another shard set mixed with SHARDS (repeat for more)",
    )
    mix_rates: str | None = option(
        "--mix-rates",
        default=None,
        group=_X,
        metavar="R,R,…",
        help="strategy rates: one weight per source (SHARDS first), normalised",
    )
    mix_strategy: str | None = option(
        "--mix-strategy",
        default=None,
        group=_X,
        choices=tuple(STRATEGIES),
        help="T5 §3.5.2: rates, proportional (min(rows, K)), temperature, equal",
    )
    mix_limit: int | None = option(
        "--mix-limit",
        default=None,
        group=_X,
        type=positive,
        metavar="K",
        help="examples-proportional limit K in rows (proportional, temperature)",
    )
    mix_temperature: float | None = option(
        "--mix-temperature",
        default=None,
        group=_X,
        type=float,
        metavar="T",
        help="temperature T (rates ∝ min(rows, K)^(1/T))",
    )
    mix_pad: bool = option(
        "--mix-pad",
        default=False,
        group=_X,
        action="store_true",
        help="zero-pad sources with shorter rows to the longest (else an error)",
    )
    # -- run
    device: str = option(
        "--device",
        default="auto",
        group=_R,
        choices=DEVICES,
        help="auto: a CUDA GPU, else a TPU (torch_xla), else the CPU",
    )
    resume: str | None = option(
        "--resume",
        default=None,
        group=_R,
        nargs="?",
        const="auto",
        metavar="CKPT",
        help="continue from RUN/checkpoints/latest (or the checkpoint directory given)",
    )
    # resume: None = a fresh run; "auto" = RUN/checkpoints/latest; else a checkpoint directory
    eval_every: int = option(
        "--eval-every",
        default=0,
        group=_R,
        type=non_negative,
        help="held-out eval period (and at the end)",
    )
    eval_rows: int | None = option(
        "--eval-rows",
        default=None,
        group=_R,
        type=non_negative,
        help="validation rows to evaluate (default all)",
    )
    save_every: int = option(
        "--save-every",
        default=0,
        group=_R,
        type=non_negative,
        help="checkpoint period (and at the end)",
    )
    keep_checkpoints: int = option(
        "--keep-checkpoints",
        default=3,
        group=_R,
        type=positive,
        help="checkpoints kept under RUN/checkpoints (older ones are deleted)",
    )
    log_every: int = option(
        "--log-every",
        default=10,
        group=_R,
        type=positive,
        help="steps per metrics.jsonl line and progress update (the loss averaged over them)",
    )
    compile: bool | None = option(
        default=None,  # None: on for CUDA, off elsewhere
        group=_R,
        flags=(
            flag("--no-compile", action="store_false", help="no torch.compile (on CUDA too)"),
            flag("--compile", action="store_true", help="torch.compile off CUDA too"),
        ),
    )
    verify_shards: str = option(
        "--verify-shards",
        default="read",
        group=_R,
        choices=("read", "full", "quick"),
        help="read (default): each shard's sha256 checked on the bytes of its first read, as "
        "training reads it; full: every shard opened and hashed before training; quick: the "
        "manifest, vocabulary, and every file's existence and size only",
    )
    num_workers: int | None = option(
        "--num-workers",
        default=None,
        group=_R,
        type=non_negative,
        help="DataLoader workers (default 2 on GPU/TPU, 0 on CPU)",
    )
    threads: int | None = option(
        "--threads",
        default=None,
        group=_R,
        type=positive,
        help="torch CPU threads (default: the CPUs this process may use, from its affinity and "
        "cgroup quota, shared by the ranks; OMP_NUM_THREADS if set)",
    )
    deterministic: bool = option(
        "--deterministic",
        default=False,
        group=_R,
        action="store_true",
        help="torch.use_deterministic_algorithms",
    )
    progress: bool = option(
        "--no-progress",
        default=True,
        group=_R,
        action="store_false",
        help="no progress bar or periodic progress lines",
    )
    stop_after_step: int | None = option(
        "--stop-after-step",
        default=None,
        group=_R,
        type=positive,
        help="stop after this step with a checkpoint, keeping the --steps schedule (resume later)",
    )

    def resolved_training(self, family: str | None = None) -> dict[str, Any]:
        """The trajectory options with defaults filled in (the family picks the optimizer;
        ``None``: the default family's, ``models.default_family``)."""
        from c4forge.trainers.models import default_family, get_family
        from c4forge.trainers.optim import DEFAULT_GRAD_CLIP, DEFAULT_LR, DEFAULT_SCHEDULE
        from c4forge.trainers.schedules import default_warmup

        fam = default_family() if family is None else get_family(family)
        opt = self.optimizer or fam.optimizer  # the family's unless given
        schedule = self.schedule or DEFAULT_SCHEDULE.get(opt, "isr_decay")
        return {
            "batch_size": 128 if self.batch_size is None else self.batch_size,
            "grad_accum": self.grad_accum or 1,
            "seed": 0 if self.seed is None else self.seed,
            "shuffle_window": self.shuffle_window or 0,
            "optimizer": opt,
            "schedule": schedule,
            "lr": DEFAULT_LR.get(opt, 1e-2) if self.lr is None else self.lr,
            "warmup": default_warmup(schedule, self.steps) if self.warmup is None else self.warmup,
            "grad_clip": DEFAULT_GRAD_CLIP.get(opt, 0.0)
            if self.grad_clip is None
            else self.grad_clip,
            "z_loss": 0.0 if self.z_loss is None else self.z_loss,
        }

    def mixture(self) -> MixtureSpec | None:
        """The mixture asked for (a .toml SHARDS, or ``--mix``), None for one shard set; a
        malformed request is a ConfigError here, before any work."""
        from c4forge.errors import ConfigError
        from c4forge.trainers.mixture_spec import is_mixture_file

        given = [
            f"--{k.replace('_', '-')}"
            for k in ("mix_rates", "mix_strategy", "mix_limit", "mix_temperature")
            if getattr(self, k) is not None
        ] + (["--mix-pad"] if self.mix_pad else [])
        if is_mixture_file(self.shards):
            if self.mix or given:
                flags = (["--mix"] if self.mix else []) + given
                raise ConfigError(
                    f"{self.shards} is a mixture file: put {flags[0]} in it, not on the command line"
                )
            return load_mixture(self.shards)
        if not self.mix:
            if given:
                raise ConfigError(f"{given[0]} needs --mix (a second shard set) or a mixture file")
            return None
        return spec_from_flags(
            self.shards,
            self.mix,
            rates=self.mix_rates,
            strategy=self.mix_strategy,
            limit=self.mix_limit,
            temperature=self.mix_temperature,
            pad=self.mix_pad,
        )
