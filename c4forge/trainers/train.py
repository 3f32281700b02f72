"""The training loop of ``c4forge train`` (model.md §4–§7, finetune.md §2), read top to bottom.

``train`` is the whole story: ``setup`` runs one function per concern, each returning what it
builds (the device and process group, the checkpoint to resume from, the data, the model, the
optimizer and schedule, the restored position), and ``run`` is the loop. Nothing talks through
shared mutable attributes; the loop's only state is its ``LogWindow`` and ``LastFigures``.

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

from c4forge import __version__
from c4forge.errors import ConfigError, OutputExistsError, VerificationError
from c4forge.io.storage import read_json
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
from c4forge.trainers.optim import build_optimizer, schedule_note, set_lr, weight_decay_groups
from c4forge.trainers.options import FAMILY_OPTIMIZER, TrainOptions
from c4forge.trainers.schedules import schedule_fn
from c4forge.trainers.summary import RunSummary
from c4forge.vocab import vocab_files
from c4forge.vocab.vocab_files import check_vocab_dir, copy_run_vocab, read_descriptor

__all__ = ["FAMILY_OPTIMIZER", "RunSummary", "TrainOptions", "setup", "run", "train"]

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
StepHook = Callable[[int], None]


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
class Runtime:
    """This process: its rank among the others, its device and precision."""

    info: dist.DistInfo
    dev: DeviceInfo

    @property
    def main(self) -> bool:
        return self.info.is_main


@dataclass(frozen=True)
class Resume:
    """The checkpoint a run continues from (``path``/``state`` None for a fresh run)."""

    path: str | None = None
    state: dict[str, Any] | None = None


@dataclass(frozen=True)
class Data:
    """The verified shard set and how this rank reads it."""

    family: str  # "t5" | "bert", from the shards' objective
    fam: Any  # families.T5Training | BertTraining: what differs between families
    shards: Any  # data.ShardSet
    index_sha: str
    vocabulary: dict[str, Any]  # the shards' vocabulary descriptor
    vocab_dir: str | None  # copied into RUN/vocab (export needs it)
    inputs_length: int
    targets_length: int
    training: dict[str, Any]  # the trajectory options, defaults resolved (or the checkpoint's)
    plan: DataPlan
    mixture: Any = None  # mixture_data.Mixture when several shard sets are mixed


@dataclass(frozen=True)
class Net:
    """The model and the views of it the loop calls (compiled forward, DDP-wrapped train)."""

    preset: str
    cfg: Any  # the family's model config
    model: torch.nn.Module  # the parameters (saved, clipped, exported)
    forward_model: torch.nn.Module  # evaluation path (compiled, no DDP)
    train_model: torch.nn.Module  # training path (compiled, DDP-wrapped)
    compiled: bool
    flops: float  # per example (MFU)
    row_tokens: int  # tokens per row (throughput)
    check: Callable[[dict[str, np.ndarray], str], None]  # the family's row checks


@dataclass(frozen=True)
class Optim:
    optimizer: torch.optim.Optimizer
    schedule: Callable[[int], float]  # learning rate at 1-based step n


@dataclass(frozen=True)
class Setup:
    """Everything ``run`` needs, built once by ``setup``."""

    opts: TrainOptions
    rt: Runtime
    resume: Resume
    data: Data
    net: Net
    optim: Optim
    start_step: int
    nonpad_tokens: int  # non-pad tokens trained before start_step


def setup(opts: TrainOptions) -> Setup:
    """Device, checkpoint, data, model, optimizer, restored state: in that order, since each
    needs the ones before (the family and vocabulary come from the shards and the checkpoint)."""
    rt = setup_runtime(opts)
    resume = find_resume(opts, rt.main)
    data = setup_data(opts, rt, resume)
    cfg, preset = model_config(opts, rt, resume, data)
    check = functools.partial(data.fam.check_rows, cfg=cfg)
    check_first_rows(data, check)
    torch.manual_seed(data.training["seed"])
    model = models.build_model(data.family, cfg).to(rt.dev.device)
    optim = setup_optimizer(opts, data.training, model)
    start_step, nonpad_tokens = 0, 0
    if resume.state is not None:
        state = ckpt.load_checkpoint(resume.path, model, optim.optimizer)  # + RNG
        start_step, nonpad_tokens = int(state["step"]), int(state.get("nonpad_tokens", 0))
    net = wrap_model(opts, rt, data, preset, cfg, model, check)
    note = schedule_note(data.training["optimizer"], data.training["schedule"])
    if note and rt.main:
        print(f"c4forge train: {note}", file=sys.stderr)
    return Setup(opts, rt, resume, data, net, optim, start_step, nonpad_tokens)


def setup_runtime(opts: TrainOptions) -> Runtime:
    """The device (and the process group under torchrun); refuse options no run can use."""
    info = dist.env_info()
    dev = resolve_device(opts.device, info.local_rank)
    dist.init(info, dev.kind)
    if opts.steps < 1:
        raise ConfigError(f"--steps must be >= 1, got {opts.steps}")
    if opts.verify_shards not in ("quick", "full"):
        raise ConfigError("--verify-shards must be quick or full")
    return Runtime(info, dev)


def find_resume(opts: TrainOptions, main: bool) -> Resume:
    """``--resume``: the checkpoint to continue (latest, or the newest intact one); a fresh run
    refuses an output folder that already holds checkpoints."""
    existing = ckpt.list_checkpoints(opts.output)
    if opts.resume is None:
        if existing:
            raise OutputExistsError(
                f"{opts.output} already holds checkpoints ({os.path.basename(existing[-1])}); "
                "pass --resume to continue it or choose another --output"
            )
        return Resume()
    if opts.resume == "auto":
        latest = ckpt.latest_checkpoint(opts.output)
        if latest is None:
            if existing:
                raise VerificationError(
                    f"{ckpt.checkpoints_dir(opts.output)}: checkpoints but no 'latest' pointer; "
                    f"pass --resume {existing[-1]} explicitly"
                )
            if main:
                print(
                    f"c4forge train: no checkpoint in {opts.output} yet; starting at step 0",
                    file=sys.stderr,
                )
            return Resume()
        return newest_intact(opts.output, latest, existing, main)
    if not os.path.isdir(opts.resume):
        raise VerificationError(f"{opts.resume}: checkpoint directory not found")
    return Resume(opts.resume, ckpt.read_trainer_state(opts.resume))  # explicit: no fallback


def newest_intact(output: str, latest: str, existing: list[str], main: bool) -> Resume:
    """``latest``, or with a warning the newest older checkpoint whose files verify."""
    order = [latest] + [p for p in reversed(existing) if p != latest and p < latest]
    problems = []
    for path in order:
        try:
            state = ckpt.read_trainer_state(path)
        except VerificationError as err:
            problems.append(str(err))
            continue
        if problems and main:
            print(
                f"c4forge train: warning: {'; '.join(problems)}; resuming from the newest "
                f"intact checkpoint {path}",
                file=sys.stderr,
            )
        return Resume(path, state)
    raise VerificationError(
        f"no intact checkpoint in {ckpt.checkpoints_dir(output)}: " + "; ".join(problems)
    )


def setup_data(opts: TrainOptions, rt: Runtime, resume: Resume) -> Data:
    """Open and verify the shards against the vocabulary and the checkpoint; resolve the
    trajectory options (a resumed run keeps the checkpoint's) and this rank's data plan."""
    st = resume.state
    spec = opts.mixture()  # a malformed mixture request fails first
    primary = opts.shards if spec is None else spec.sources[0].shards
    family = family_of_shards(opts, resume, primary)
    # the vocabulary: --vocab, else the copy a shard set carries (SHARDS/vocab), else what
    # the checkpoint recorded; every one is checked against the shards' fingerprint
    vocab_source = opts.vocab or vocab_files.copy_dir(primary)
    if vocab_source is None and st is not None:
        vocab_source = vocab_files.copy_dir(opts.output)  # the run's own copy
    run_vocab = read_descriptor(vocab_source) if vocab_source else None
    if st is not None:
        saved = st["config"]["vocabulary"]
        if run_vocab is not None and run_vocab["sha256"] != saved["sha256"]:
            raise VerificationError(
                f"{resume.path} was trained with vocabulary {saved['sha256']} "
                f"({saved.get('vocab_size')} ids); {vocab_source} is {run_vocab['sha256']} "
                f"({run_vocab.get('vocab_size')} ids)"
            )
        run_vocab = run_vocab or saved
    lengths = {}
    if st is not None:
        lengths = {k: st["config"][k] for k in ("inputs_length", "targets_length")}
    training = resolve_training(opts, family, resume)
    mixture = None
    if spec is not None:
        mixture = mixture_for(spec, st, run_vocab, training["seed"], opts, resume)
        shards = mixture.sources[0].shards
    else:
        shards = open_shard_set(
            primary, vocab=run_vocab, full=opts.verify_shards == "full", **lengths
        )
    index_sha = shards.index_sha256
    if st is not None and st["config"]["shards_index_sha256"] != index_sha:
        raise VerificationError(
            f"{resume.path} was trained on shards whose index.json has sha256 "
            f"{st['config']['shards_index_sha256']}; {primary}/index.json is {index_sha}"
        )
    vocabulary = dict(shards.vocab)
    own = vocab_files.copy_dir(opts.output)
    if own:  # a resumed run's copy must be the shards' vocabulary
        check_vocab_dir(own, vocabulary["sha256"])
    if vocab_source:
        vocab_dir = os.path.abspath(vocab_source)
    else:
        vocab_dir = st["config"].get("vocab_dir") if st else None
    if vocab_dir is None:
        vocab_dir = guess_vocab_dir(primary, vocabulary["sha256"])
    obj = shards.index["objective"]
    plan = DataPlan(
        batch_size=training["batch_size"],
        world_size=rt.info.world_size,
        rank=rt.info.rank,
        grad_accum=training["grad_accum"],
        seed=training["seed"],
        shuffle_window=training["shuffle_window"],
    )
    if mixture is not None:
        from c4forge.trainers.mixture_family import MixtureT5Training

        return Data(
            family=family,
            fam=MixtureT5Training(mixture.names, mixture.columns),
            shards=shards,
            index_sha=index_sha,
            vocabulary=vocabulary,
            vocab_dir=vocab_dir,
            inputs_length=mixture.inputs_length,
            targets_length=mixture.targets_length,
            training=training,
            plan=plan,
            mixture=mixture,
        )
    return Data(
        family=family,
        fam=training_for(family),
        shards=shards,
        index_sha=index_sha,
        vocabulary=vocabulary,
        vocab_dir=vocab_dir,
        inputs_length=int(obj["inputs_length"]),
        targets_length=int(obj["targets_length"]),
        training=training,
        plan=plan,
    )


def mixture_for(
    spec: Any, st: dict[str, Any] | None, vocab: Any, seed: int, opts: TrainOptions, resume: Resume
) -> Any:
    """Open and verify a mixture's sources; a resumed run must name the checkpoint's mixture."""
    from c4forge.trainers.mixture_data import open_mixture

    lengths = None
    if st is not None:
        lengths = {k: st["config"][k] for k in ("inputs_length", "targets_length")}
    mixture = open_mixture(
        spec, vocab=vocab, seed=seed, lengths=lengths, full=opts.verify_shards == "full"
    )
    if st is not None:
        saved = st["config"].get("mixture")
        if saved is None:
            raise ConfigError(f"{resume.path} was trained on one shard set, not a mixture")
        now = mixture.describe()
        for key in ("strategy", "limit", "temperature", "pad", "rates", "block_counts"):
            if saved.get(key) != now[key]:
                raise ConfigError(
                    f"mixture {key} {now[key]} differs from the checkpoint's {saved.get(key)} "
                    f"({resume.path}); a resumed run keeps its mixture"
                )
        for a, b in zip(saved["sources"], now["sources"]):
            if (a["name"], a["index_sha256"]) != (b["name"], b["index_sha256"]):
                raise VerificationError(
                    f"{resume.path} was trained on mixture source {a['name']!r} with index.json "
                    f"sha256 {a['index_sha256']}; {b['shards']} ({b['name']!r}) has "
                    f"{b['index_sha256']}"
                )
    return mixture


def resolve_training(opts: TrainOptions, family: str, resume: Resume) -> dict[str, Any]:
    """The trajectory options: the checkpoint's, unless given and equal (else a ConfigError)."""
    if resume.state is None:
        return opts.resolved_training(family)
    saved = resume.state["config"]["training"]
    for key in TRAJECTORY_OPTIONS:
        given = getattr(opts, key)
        if given is not None and given != saved[key]:
            raise ConfigError(
                f"--{key.replace('_', '-')} {given} differs from the checkpoint's "
                f"{saved[key]} ({resume.path}); a resumed run keeps its trajectory"
            )
    return dict(saved)


def family_of_shards(opts: TrainOptions, resume: Resume, path: str | None = None) -> str:
    """The family the shards train (read from index.json before anything else is checked);
    a preset or checkpoint of the other family is refused, naming both. ``path``: the shard
    set to read (a mixture's first source), default ``opts.shards``."""
    path = path or opts.shards
    try:
        index = read_json(os.path.join(path, "index.json"))
        objective = str(index["objective"]["name"])
        schema = {e["name"] for e in index["schema"]}
    except (OSError, ValueError, KeyError, TypeError):
        return "t5"  # unreadable: open_shard_set reports it; nothing is trained anyway
    family = models.family_of_objective(objective, schema, path)
    rows = f"{path} holds {objective} rows, which train the {family} family"
    if resume.state is not None:
        saved = models.config_family(resume.state["config"]["model"])
        if saved != family:
            raise ConfigError(
                f"{resume.path} is a {saved}-family checkpoint "
                f"({resume.state['config']['preset']}), but {rows}"
            )
    if opts.preset is not None:
        given = models.family_of_preset(opts.preset)
        if given != family:
            valid = [p for p, f in models.preset_families().items() if f == family]
            raise ConfigError(
                f"--preset {opts.preset} is a {given}-family preset, but {rows} "
                f"(presets {', '.join(valid)})"
            )
    if family != "t5" and opts.tie_embeddings:
        raise ConfigError("--tie-embeddings is a t5 option (bert always ties its decoder)")
    if family != "t5" and opts.z_loss:
        raise ConfigError("--z-loss is a t5 option (t5x's auxiliary loss)")
    return family


def guess_vocab_dir(shards: str, sha256: str) -> str | None:
    """``SHARDS/../vocab`` when its vocab.json has the shards' fingerprint (export needs it)."""
    cand = os.path.join(os.path.dirname(os.path.abspath(shards)), "vocab")
    if not vocab_files.is_vocab_dir(cand):  # only "no vocabulary there" means None
        return None
    desc = read_descriptor(cand)  # a damaged one is an error, not a silent None
    return cand if desc.get("sha256") == sha256 else None


def model_config(opts: TrainOptions, rt: Runtime, resume: Resume, data: Data) -> tuple[Any, str]:
    """The model config and preset name: the preset with the options on top for a new run; the
    checkpoint's for a resumed one (options may repeat it, or change only ``--attn``)."""
    st = resume.state
    family_module = models.family_module(data.family)
    if st is not None:
        _, cfg = models.read_config(st["config"]["model"])
        if opts.preset is not None or any(getattr(opts, k) is not None for k in MODEL_OPTIONS[1:]):
            overrides: dict[str, Any] = dict(
                ffn=opts.ffn or cfg.ffn, d_ff=opts.d_ff, attn=opts.attn, dropout_rate=opts.dropout
            )
            if data.family == "t5":
                overrides["tie_embeddings"] = (
                    cfg.tie_embeddings if opts.tie_embeddings is None else opts.tie_embeddings
                )
            wanted = family_module.make_config(
                opts.preset or st["config"]["preset"], cfg.embedding_size, **overrides
            )
            # attention implementation may change on resume (same maths); the shape may not
            diff = [
                k
                for k, v in wanted.to_dict().items()
                if k != "attn"
                and v != getattr(cfg, k)
                and (k != "d_ff" or opts.d_ff is not None or opts.ffn or opts.preset)
            ]
            if diff:
                raise ConfigError(
                    f"model options differ from the checkpoint's ({', '.join(diff)}); "
                    f"{resume.path}/config.json has {cfg.to_dict()}"
                )
            if opts.attn:
                cfg.attn = opts.attn
        preset = st["config"]["preset"]
    else:
        if opts.preset is None:
            valid = [p for p, f in models.preset_families().items() if f == data.family]
            raise ConfigError(
                f"--preset is required ({', '.join(valid)} for these shards) for a new run"
            )
        preset = opts.preset
        attn = opts.attn or ("eager" if rt.dev.kind == "xla" else None)
        overrides = dict(ffn=opts.ffn, d_ff=opts.d_ff, attn=attn, dropout_rate=opts.dropout)
        if data.family == "t5":
            overrides["tie_embeddings"] = opts.tie_embeddings
        cfg = family_module.make_config(
            opts.preset, int(data.vocabulary["embedding_size"]), **overrides
        )
    if cfg.embedding_size < int(data.vocabulary["vocab_size"]):
        raise ConfigError(
            f"model embedding_size {cfg.embedding_size} < vocabulary size "
            f"{data.vocabulary['vocab_size']}"
        )
    if opts.deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # cuBLAS needs it
        torch.use_deterministic_algorithms(True)
    if data.family == "bert" and data.inputs_length > cfg.max_position:
        raise ConfigError(
            f"{opts.shards}: rows of {data.inputs_length} tokens exceed the model's "
            f"{cfg.max_position} positions"
        )
    return cfg, preset


def check_first_rows(data: Data, check: Callable[[dict[str, np.ndarray], str], None]) -> None:
    """The family's row checks on the first shard of each split, before anything is written
    (every other shard is checked when the loader first decodes it)."""
    if not data.fam.checks_rows:
        return
    for split in ("train", "validation"):
        shards = data.shards.split_shards(split) if split in data.shards.index["splits"] else []
        if shards:
            reader = ShardReader(
                data.shards, [shards[0][0]], [shards[0][1]], cache=1, columns=data.fam.columns
            )
            check(reader.shard(0), shards[0][0])


def setup_optimizer(opts: TrainOptions, t: dict[str, Any], model: torch.nn.Module) -> Optim:
    """The optimizer (AdamW without decay on biases and norms) and the learning-rate schedule."""
    params = (
        weight_decay_groups(model.named_parameters())
        if t["optimizer"] == "adamw"
        else model.parameters()
    )
    # --no-compile / --compile decide for the optimizer's update too (None: compiled on CUDA)
    optimizer = build_optimizer(t["optimizer"], params, lr=t["lr"], compile=opts.compile)
    return Optim(optimizer, schedule_fn(t["schedule"], opts.steps, warmup=t["warmup"], lr=t["lr"]))


def wrap_model(
    opts: TrainOptions,
    rt: Runtime,
    data: Data,
    preset: str,
    cfg: Any,
    model: torch.nn.Module,
    check: Callable[[dict[str, np.ndarray], str], None],
) -> Net:
    """``torch.compile`` (default on CUDA; static shapes, model.md §4) and DDP."""
    use_compile = opts.compile if opts.compile is not None else rt.dev.kind == "cuda"
    fwd: torch.nn.Module = model
    if use_compile and rt.dev.kind != "xla":
        fwd = torch.compile(model, dynamic=False)
    return Net(
        preset=preset,
        cfg=cfg,
        model=model,
        forward_model=fwd,
        train_model=dist.wrap_ddp(fwd, rt.info, rt.dev.device),
        compiled=use_compile,
        flops=data.fam.flops_per_example(cfg, data.inputs_length, data.targets_length),
        row_tokens=data.fam.row_tokens(data.inputs_length, data.targets_length),
        check=check,
    )


def make_loader(s: Setup) -> Any:
    """Batches from ``start_step`` on, in the data plan's order (device-side on TPU)."""
    dev = s.rt.dev
    common = dict(host_dtype=np.int32 if dev.kind == "xla" else None, check=s.net.check)
    stream: Any
    if s.data.mixture is not None:
        from c4forge.trainers.mixture_data import MixtureStream

        stream = MixtureStream(s.data.mixture, s.data.plan, s.start_step, s.opts.steps, **common)
    else:
        stream = TrainStream(
            s.data.shards,
            s.data.plan,
            s.start_step,
            s.opts.steps,
            columns=s.data.fam.columns,
            **common,
        )
    workers = s.opts.num_workers
    if workers is None:
        workers = 2 if dev.kind in ("cuda", "xla") else 0
    loader = torch.utils.data.DataLoader(
        stream,
        batch_size=None,
        num_workers=workers,
        pin_memory=dev.kind == "cuda",
        prefetch_factor=4 if workers else None,
    )
    if dev.kind == "xla":
        import torch_xla.distributed.parallel_loader as pl

        return pl.MpDeviceLoader(loader, dev.device)
    return loader


# ============================================================================ one step


def seed_micro(s: Setup, step: int, micro: int) -> None:
    """Dropout randomness as a function of (seed, step, global micro-batch): a resumed run
    and any split of the batch over ranks and accumulation draw the same masks."""
    if not s.net.cfg.dropout_rate:
        return  # nothing random in the step (the t5 pretraining default)
    ss = np.random.SeedSequence([s.data.training["seed"], 0x44524F50, step, micro])
    value = int(ss.generate_state(1, np.uint64)[0] >> np.uint64(1))
    if s.rt.dev.kind == "xla":
        import torch_xla.core.xla_model as xm

        xm.set_rng_state(value)
    torch.manual_seed(value)


def train_step(
    s: Setup, step: int, items: list[dict[str, Any]]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One optimizer step (``step`` is 0-based; the schedule sees ``step + 1``).

    Returns the loss-part sums, their global counts, the metric sums and the non-pad tokens.
    """
    dev, info, fam, t = s.rt.dev, s.rt.info, s.data.fam, s.data.training
    nb = dev.kind == "cuda"
    batches = [fam.to_device(it, dev.device, non_blocking=nb) for it in items]
    counts = torch.stack([fam.counts(b) for b in batches]).sum(0).float()
    dist.all_reduce_sum(counts, info)
    nonpad = torch.stack([fam.nonpad(b) for b in batches]).sum()
    scale = info.world_size / counts.clamp_min(1.0)
    set_lr(s.optim.optimizer, s.optim.schedule(step + 1))
    sums_total = torch.zeros(len(fam.parts), device=dev.device)
    stats_total = torch.zeros(len(fam.stats), device=dev.device)
    z = float(t["z_loss"])
    last = len(batches) - 1
    first_micro = info.rank * len(batches)
    for k, b in enumerate(batches):
        seed_micro(s, step, first_micro + k)
        with dist.no_sync(s.net.train_model, info.enabled and k < last):
            sums, stats = fam.forward_sums(s.net.train_model, b, z, dev.autocast())
            (sums * scale).sum().backward()
        sums_total = sums_total + sums.detach()
        stats_total = stats_total + stats
    if t["grad_clip"] > 0:
        torch.nn.utils.clip_grad_norm_(s.net.model.parameters(), t["grad_clip"])
    if dev.kind == "xla":
        import torch_xla.core.xla_model as xm

        xm.optimizer_step(s.optim.optimizer)
    else:
        s.optim.optimizer.step()
    s.optim.optimizer.zero_grad(set_to_none=True)
    return sums_total, counts, stats_total, nonpad


def out_of_memory(s: Setup) -> ConfigError:
    plan = s.data.plan
    return ConfigError(
        f"out of memory on {s.rt.dev.name} with micro-batches of {plan.micro_rows} rows × "
        f"{s.data.inputs_length}/{s.data.targets_length} tokens: lower --batch-size or raise "
        f"--grad-accum (now {plan.grad_accum})"
    )


@torch.no_grad()
def evaluate(s: Setup) -> dict[str, float] | None:
    """Held-out loss over the first --eval-rows validation rows (model.md §3): the t5
    family's log-perplexity, the bert family's MLM/NSP losses and accuracies."""
    data, fam, info, dev = s.data, s.data.fam, s.rt.info, s.rt.dev
    batches: Any
    if data.mixture is not None:  # each source's validation split, marked with its source
        batches = data.mixture.eval_batches(
            s.opts.eval_rows, data.plan.micro_rows, info.rank, info.world_size, s.net.check
        )
    elif "validation" not in data.shards.index["splits"]:
        return None
    elif not data.shards.split_shards("validation"):
        return None
    else:
        batches = eval_batches(
            data.shards,
            s.opts.eval_rows,
            data.plan.micro_rows,
            info.rank,
            info.world_size,
            columns=fam.columns,
            check=s.net.check,
        )
    s.net.model.eval()
    k, m = len(fam.parts), len(fam.stats)
    acc = torch.zeros(2 * k + m, dtype=torch.float64, device=dev.device)
    for batch in batches:
        b = fam.to_device(batch, dev.device)
        sums, stats = fam.forward_sums(s.net.forward_model, b, 0.0, dev.autocast())
        acc += torch.cat([sums.double(), fam.counts(b).double(), stats.double()])
    s.net.model.train()
    dist.all_reduce_sum(acc, info)
    values = acc.tolist()
    record = fam.eval_record(values[:k], values[k : 2 * k], values[2 * k :])
    return record or None


# ============================================================================ checkpoints


def _versions() -> dict[str, str]:
    import numpy
    import pyarrow

    return {
        "c4forge": __version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "pyarrow": pyarrow.__version__,
    }


def run_config(s: Setup) -> dict[str, Any]:
    """The ``config`` block of every checkpoint's trainer state (what a resume checks)."""
    d = s.data
    config = {
        "family": d.family,
        "preset": s.net.preset,
        "model": s.net.cfg.to_dict(),
        "training": dict(d.training),
        "steps": s.opts.steps,
        "inputs_length": d.inputs_length,
        "targets_length": d.targets_length,
        "shards": os.path.abspath(d.mixture.sources[0].path if d.mixture else s.opts.shards),
        "shards_index_sha256": d.index_sha,
        "dataset_fingerprint": d.shards.fingerprint,
        "vocabulary": d.vocabulary,
        "vocab_dir": d.vocab_dir,
        "vocab_sha256": d.vocabulary["sha256"],
        "world_size": s.rt.info.world_size,
        "device": s.rt.dev.kind,
        "compile": s.net.compiled,
    }
    if d.mixture is not None:  # only then: a single-set checkpoint stays as it was
        config["mixture"] = d.mixture.describe()
    return config


def save(s: Setup, step: int, nonpad: int) -> str | None:
    """Checkpoint ``step`` (rank 0 writes; every rank waits for it)."""
    path = None
    if s.rt.main:
        batch, t = s.data.plan.batch_size, s.data.training
        state = {
            "examples": step * batch,
            "tokens": step * batch * s.net.row_tokens,
            "nonpad_tokens": nonpad,
            "schedule": {
                "name": t["schedule"],
                "total_steps": s.opts.steps,
                "warmup": t["warmup"],
                "lr": t["lr"],
                "value": s.optim.schedule(max(step, 1)),
            },
            "data": {"position_step": step, "global_rows_consumed": step * batch},
            "rng": ckpt.rng_state(),
            "config": run_config(s),
            "versions": _versions(),
        }
        path = ckpt.save_checkpoint(
            s.opts.output,
            step,
            s.net.model,
            s.optim.optimizer,
            state,
            s.net.cfg.to_dict(),
            keep=s.opts.keep_checkpoints,
        )
    dist.barrier(s.rt.info)
    return path


# ============================================================================ the loop


@dataclass
class LogWindow:
    """The device-side sums since the last log (read back only when logging) and the clock
    of the window: its start, its first step, and the seconds spent in eval/save inside it."""

    loss: torch.Tensor
    weight: torch.Tensor
    stats: torch.Tensor
    nonpad: torch.Tensor
    time: float
    step: int
    paused: float = 0.0

    @classmethod
    def empty(cls, s: Setup) -> LogWindow:
        k, m, device = len(s.data.fam.parts), len(s.data.fam.stats), s.rt.dev.device
        return cls(
            loss=torch.zeros(k, device=device),
            weight=torch.zeros(k, device=device),
            stats=torch.zeros(m, device=device),
            nonpad=torch.zeros((), dtype=torch.int64, device=device),
            time=time.perf_counter(),
            step=s.start_step,
        )

    def add(self, loss: Any, weight: Any, stats: Any, nonpad: Any) -> None:
        self.loss += loss
        self.weight += weight
        self.stats += stats
        self.nonpad += nonpad

    def zero(self) -> None:
        for v in (self.loss, self.weight, self.stats, self.nonpad):
            v.zero_()


@dataclass
class LastFigures:
    """The newest logged figures (the run summary's), and the non-pad tokens logged so far."""

    nonpad_total: int
    loss: float | None = None
    tps: float | None = None
    nonpad_tps: float | None = None
    mfu: float | None = None
    eval: dict[str, float] | None = None  # the last eval record


def run(s: Setup, hooks: Sequence[StepHook] = ()) -> RunSummary:
    """Train from ``start_step`` to ``--steps`` (or ``--stop-after-step``): step, log, eval,
    checkpoint, hooks."""
    o, main = s.opts, s.rt.main
    os.makedirs(o.output, exist_ok=True)
    if main and s.data.vocab_dir:
        copy_run_vocab(s.data.vocab_dir, o.output, s.data.vocabulary["sha256"])
    log = MetricsLog(o.output, s.start_step if s.resume.state else None) if main else None
    t_start = time.perf_counter()
    bar = progress_bar(s) if main and o.progress else None
    window, last = LogWindow.empty(s), LastFigures(nonpad_total=s.nonpad_tokens)
    checkpoint_path = s.resume.path if s.resume.state else None
    it, step = iter(make_loader(s)), s.start_step
    try:
        while step < o.steps:
            items = [next(it) for _ in range(s.data.plan.grad_accum)]
            if any(x["step"] != step for x in items):  # only if the loader misorders
                raise RuntimeError(f"data loader out of order at step {step}")
            try:
                window.add(*train_step(s, step, items))
            except (RuntimeError, torch.OutOfMemoryError) as err:
                if is_out_of_memory(err):
                    raise out_of_memory(s) from None
                raise
            step += 1
            stopping = o.stop_after_step is not None and step >= o.stop_after_step
            is_last = step == o.steps
            if step % max(1, o.log_every) == 0 or is_last:
                log_window(s, step, window, last, log, bar)
            if bar is not None:
                bar.update(1)
            paused = time.perf_counter()
            if (o.eval_every and step % o.eval_every == 0) or is_last:
                result = evaluate(s)
                if result is not None:
                    last.eval = result
                    if log is not None:
                        log.write({"step": step, **result})
                    if bar is not None:
                        bar.write(f"step {step}: {s.data.fam.eval_text(result)}")
            if (o.save_every and step % o.save_every == 0) or is_last or stopping:
                pending = dist.all_reduce_sum(window.nonpad.clone(), s.rt.info)
                nonpad_seen = last.nonpad_total + int(pending)  # a sync, once per save
                checkpoint_path = save(s, step, nonpad_seen) or checkpoint_path
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


def progress_bar(s: Setup) -> Any:
    from c4forge.progress import progress

    return progress(total=s.opts.steps, initial=s.start_step, unit="step", desc="train")


def summarize(
    s: Setup,
    step: int,
    last: LastFigures,
    t_start: float,
    checkpoint_path: str | None,
    log: MetricsLog | None,
) -> RunSummary:
    """The loss curve (rank 0) and the run's summary."""
    metrics = os.path.join(s.opts.output, "metrics.jsonl")
    curve = None
    if s.rt.main:
        curve = plot_loss_curve(
            metrics,
            os.path.join(s.opts.output, CURVE),
            title=f"{s.net.preset} / {s.net.cfg.ffn} / {s.data.training['optimizer']}",
        )
    ev = last.eval
    return RunSummary(
        steps=step,
        start_step=s.start_step,
        final_loss=last.loss,
        evaluation=ev,
        eval_line=s.data.fam.eval_text(ev) if ev else None,
        tokens_per_s=last.tps,
        nonpad_tokens_per_s=last.nonpad_tps,
        mfu=last.mfu,
        seconds=time.perf_counter() - t_start,
        checkpoint=checkpoint_path,
        curve=curve,
        metrics=metrics,
        tensorboard=log.tensorboard_dir if log is not None else None,
        mixture_lines=mixture_summary(s, step, ev),
    )


def mixture_summary(s: Setup, step: int, ev: dict[str, float] | None) -> list[str]:
    """Requested and realised rates over the rows of steps ``[0, step)``, and the last
    held-out NLL of each source."""
    mixture = s.data.mixture
    if mixture is None:
        return []
    from c4forge.trainers.mixture_data import rate_lines, realised_counts

    lines = rate_lines(mixture, realised_counts(mixture, s.data.plan, step))
    per = [f"{n} {ev[f'eval_nll_{n}']:.4f}" for n in mixture.names if f"eval_nll_{n}" in (ev or {})]
    if per:
        lines.append("held-out NLL per source: " + ", ".join(per))
    return lines


def log_window(
    s: Setup, step: int, window: LogWindow, last: LastFigures, log: MetricsLog | None, bar: Any
) -> None:
    """Read the window's device sums back (the only host sync), write one record."""
    # loss and non-pad counts are per rank; the weight count is already global (all-reduced
    # in the step), so only the first two are summed over ranks.
    parts, stat_names = s.data.fam.parts, s.data.fam.stats
    info, batch = s.rt.info, s.data.plan.batch_size
    packed = torch.cat([window.loss.double(), window.stats.double(), window.nonpad.double()[None]])
    weight_t = window.weight.double().clone()

    def emit(values: torch.Tensor) -> None:
        dist.all_reduce_sum(values, info)
        flat = values.tolist()
        sums, stat_sums, nonpad = flat[: len(parts)], flat[len(parts) : -1], flat[-1]
        weights = weight_t.tolist()
        now = time.perf_counter()
        seconds = max(now - window.time - window.paused, 1e-9)
        steps = step - window.step
        examples = steps * batch
        tps = examples * s.net.row_tokens / seconds
        nonpad_tps = nonpad / seconds
        util = None
        if s.rt.dev.peak_flops:
            util = mfu(s.net.flops, examples / seconds, s.rt.dev.peak_flops, info.world_size)
        means = [v / max(w, 1.0) for v, w in zip(sums, weights)]
        loss = means[0] if len(means) == 1 else sum(means)
        last.loss, last.tps, last.nonpad_tps, last.mfu = loss, tps, nonpad_tps, util
        last.nonpad_total += int(nonpad)
        window.time, window.step, window.paused = now, step, 0.0
        record = {
            "step": step,
            "loss": loss,
            "lr": s.optim.schedule(step),
            "tokens_per_s": tps,
            "nonpad_tokens_per_s": nonpad_tps,
            "step_time_s": seconds / max(steps, 1),
            "examples": step * batch,
        }
        if len(parts) > 1:
            record.update(zip(parts, means))
        if hasattr(s.data.fam, "stats_record"):  # a mixture's per-source figures
            record.update(s.data.fam.stats_record(stat_sums))
        else:
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

    if s.rt.dev.kind == "xla":
        import torch_xla.core.xla_model as xm

        xm.add_step_closure(emit, args=(packed,))
    else:
        emit(packed)
    window.zero()
