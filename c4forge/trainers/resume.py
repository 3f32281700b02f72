"""A resumed run against its checkpoint: which checkpoint, and what of the run it fixes.

A run continued with ``--resume`` must follow the trajectory it started on, so the checkpoint's
trainer state decides the family, the vocabulary, the shard set, the trajectory options and the
model shape; the command line may repeat them, and an option that differs is refused naming both
values (only ``--attn``, the same maths, may change). A fresh run gets the same answers from its
options and defaults, so the trainer's setup reads one result either way.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

from c4forge.errors import ConfigError, OutputExistsError, VerificationError
from c4forge.formats.shards import INDEX_NAME
from c4forge.io.storage import read_json
from c4forge.trainers import checkpoint as ckpt
from c4forge.trainers import models
from c4forge.trainers.options import TrainOptions, Trajectory
from c4forge.vocab import vocab_files
from c4forge.vocab.vocab_files import read_descriptor

if TYPE_CHECKING:
    from c4forge.trainers.models.family import ModelConfig
    from c4forge.trainers.run_data import RunData

# Options that fix the data order or the optimisation trajectory: a resumed run takes them from
# the checkpoint, and refuses an explicit value that differs.
TRAJECTORY_OPTIONS = tuple(f.name for f in fields(Trajectory))
MODEL_OPTIONS = ("preset", "ffn", "d_ff", "tie_embeddings", "attn", "dropout")
MIXTURE_KEYS = ("strategy", "limit", "temperature", "pad", "rates", "block_counts")


@dataclass(frozen=True)
class Resume:
    """The checkpoint a run continues from (``path``/``state`` None for a fresh run)."""

    path: str | None = None
    state: dict[str, Any] | None = None

    @property
    def config(self) -> dict[str, Any] | None:
        """The checkpoint's ``config`` block (what every check below compares against)."""
        return None if self.state is None else self.state["config"]

    @property
    def lengths(self) -> dict[str, int]:
        """The row lengths the checkpoint trained (empty for a fresh run: the shards' own)."""
        c = self.config
        return {} if c is None else {k: c[k] for k in ("inputs_length", "targets_length")}


@dataclass(frozen=True)
class ModelChoice:
    """The model a run trains: its preset name and the family's config object."""

    preset: str
    cfg: ModelConfig


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


def family_of_shards(opts: TrainOptions, resume: Resume, path: str) -> str:
    """The family the shards at ``path`` train (read from index.json before anything else is
    checked); a preset or checkpoint of the other family is refused, naming both."""
    try:
        index = read_json(os.path.join(path, INDEX_NAME))
        objective = str(index["objective"]["name"])
        schema = {e["name"] for e in index["schema"]}
    except (OSError, ValueError, KeyError, TypeError):
        return models.default_family().name  # unreadable: open_shard_set reports it
    family = models.family_of_objective(objective, schema, path)
    rows = f"{path} holds {objective} rows, which train the {family} family"
    if resume.config is not None:
        saved = models.config_family(resume.config["model"])
        if saved != family:
            raise ConfigError(
                f"{resume.path} is a {saved}-family checkpoint "
                f"({resume.config['preset']}), but {rows}"
            )
    if opts.preset is not None:
        given = models.family_of_preset(opts.preset)
        if given != family:
            valid = [p for p, f in models.preset_families().items() if f == family]
            raise ConfigError(
                f"--preset {opts.preset} is a {given}-family preset, but {rows} "
                f"(presets {', '.join(valid)})"
            )
    own = models.get_family(family).options
    if "tie_embeddings" not in own and opts.tie_embeddings:
        raise ConfigError(
            f"--tie-embeddings is a {'/'.join(models.option_owners('tie_embeddings'))} option "
            f"({family} always ties its decoder)"
        )
    if "z_loss" not in own and opts.z_loss:
        raise ConfigError(
            f"--z-loss is a {'/'.join(models.option_owners('z_loss'))} option "
            "(t5x's auxiliary loss)"
        )
    return family


def run_vocabulary(
    opts: TrainOptions, resume: Resume, primary: str
) -> tuple[str | None, dict[str, Any] | None]:
    """Where the vocabulary comes from and its descriptor: ``--vocab``, else the copy a shard
    set carries (SHARDS/vocab), else the run's own copy or what the checkpoint recorded. A
    resumed run refuses a vocabulary other than its checkpoint's."""
    source = opts.vocab or vocab_files.copy_dir(primary)
    if source is None and resume.config is not None:
        source = vocab_files.copy_dir(opts.output)  # the run's own copy
    descriptor = read_descriptor(source) if source else None
    if resume.config is not None:
        saved = resume.config["vocabulary"]
        if descriptor is not None and descriptor["sha256"] != saved["sha256"]:
            raise VerificationError(
                f"{resume.path} was trained with vocabulary {saved['sha256']} "
                f"({saved.get('vocab_size')} ids); {source} is {descriptor['sha256']} "
                f"({descriptor.get('vocab_size')} ids)"
            )
        descriptor = descriptor or saved
    return source, descriptor


def check_shards_index(resume: Resume, index_sha: str, primary: str) -> None:
    """A resumed run reads the very shard set it started on (its index.json's sha256)."""
    c = resume.config
    if c is not None and c["shards_index_sha256"] != index_sha:
        raise VerificationError(
            f"{resume.path} was trained on shards whose index.json has sha256 "
            f"{c['shards_index_sha256']}; {primary}/index.json is {index_sha}"
        )


def check_mixture(resume: Resume, now: dict[str, Any]) -> None:
    """A resumed run names the checkpoint's mixture (``now``: ``Mixture.describe()``)."""
    if resume.config is None:
        return
    saved = resume.config.get("mixture")
    if saved is None:
        raise ConfigError(f"{resume.path} was trained on one shard set, not a mixture")
    for key in MIXTURE_KEYS:
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


def trajectory(opts: TrainOptions, family: str, resume: Resume) -> Trajectory:
    """The trajectory options: the checkpoint's, unless given and equal (else a ConfigError)."""
    if resume.config is None:
        return Trajectory.from_dict(opts.resolved_training(family))
    saved = resume.config["training"]
    for key in TRAJECTORY_OPTIONS:
        given = getattr(opts, key)
        if given is not None and given != saved[key]:
            raise ConfigError(
                f"--{key.replace('_', '-')} {given} differs from the checkpoint's "
                f"{saved[key]} ({resume.path}); a resumed run keeps its trajectory"
            )
    return Trajectory.from_dict(saved)


def model_choice(opts: TrainOptions, data: RunData, resume: Resume, xla: bool) -> ModelChoice:
    """The preset with the options on top for a new run; the checkpoint's model for a resumed
    one (options may repeat it, or change only ``--attn``); it must hold the vocabulary and,
    for bert (learned positions), the rows."""
    family, vocabulary = data.family, data.vocabulary
    make_config = models.get_family(family).make_config
    c = resume.config
    if c is not None:
        _, cfg = models.read_config(c["model"])
        if opts.preset is not None or any(getattr(opts, k) is not None for k in MODEL_OPTIONS[1:]):
            overrides: dict[str, Any] = dict(
                ffn=opts.ffn or cfg.ffn, d_ff=opts.d_ff, attn=opts.attn, dropout_rate=opts.dropout
            )
            if "tie_embeddings" in models.get_family(family).options:
                overrides["tie_embeddings"] = (
                    cfg.tie_embeddings if opts.tie_embeddings is None else opts.tie_embeddings
                )
            wanted = make_config(opts.preset or c["preset"], cfg.embedding_size, **overrides)
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
        preset = c["preset"]
    else:
        if opts.preset is None:
            valid = [p for p, f in models.preset_families().items() if f == family]
            raise ConfigError(
                f"--preset is required ({', '.join(valid)} for these shards) for a new run"
            )
        preset = opts.preset
        attn = opts.attn or ("eager" if xla else None)
        overrides = dict(ffn=opts.ffn, d_ff=opts.d_ff, attn=attn, dropout_rate=opts.dropout)
        if "tie_embeddings" in models.get_family(family).options:
            overrides["tie_embeddings"] = opts.tie_embeddings
        cfg = make_config(opts.preset, int(vocabulary["embedding_size"]), **overrides)
    if cfg.embedding_size < int(vocabulary["vocab_size"]):
        raise ConfigError(
            f"model embedding_size {cfg.embedding_size} < vocabulary size "
            f"{vocabulary['vocab_size']}"
        )
    if models.get_family(family).learned_positions and data.inputs_length > cfg.max_position:
        raise ConfigError(
            f"{opts.shards}: rows of {data.inputs_length} tokens exceed the model's "
            f"{cfg.max_position} positions"
        )
    return ModelChoice(preset, cfg)
