"""The data of one training run: the verified shard set (or mixture), the vocabulary, the
trajectory options, this rank's data plan, and the loaders built from them.

Opening checks everything a run reads against the vocabulary and, when resuming, against the
checkpoint (``resume.py``), before the first weight is built: a mismatch costs nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from c4forge.errors import C4ForgeError, ConfigError
from c4forge.trainers import distributed as dist
from c4forge.trainers import resume as resumed_run
from c4forge.trainers.data import DataPlan, ShardReader, TrainStream, eval_batches, open_shard_set
from c4forge.trainers.device import DeviceInfo
from c4forge.trainers.families import training_for
from c4forge.trainers.models import get_family
from c4forge.trainers.models.family import TrainingGlue
from c4forge.trainers.options import TrainOptions, Trajectory
from c4forge.vocab import vocab_files
from c4forge.vocab.vocab_files import check_vocab_dir, read_descriptor

RowCheck = Callable[[dict[str, np.ndarray], str], None]


@dataclass(frozen=True)
class RunData:
    """The verified shard set and how this rank reads it."""

    family: str  # a registered model family's name, from the shards' objective
    fam: TrainingGlue  # the family's training glue (a mixture's: Family.mixture_training)
    traj: Trajectory  # the trajectory options, defaults resolved (or the checkpoint's)
    plan: DataPlan
    shards: Any  # data.ShardSet (a mixture's first source)
    shards_path: str  # what the checkpoint records as the run's shards
    index_sha: str
    vocabulary: dict[str, Any]  # the shards' vocabulary descriptor
    vocab_dir: str | None  # copied into RUN/vocab (export needs it)
    inputs_length: int
    targets_length: int
    mixture: Any = None  # mixture_data.Mixture when several shard sets are mixed

    def describe(self) -> dict[str, Any]:
        """The data part of a checkpoint's ``config`` block (what a resume checks)."""
        config = {
            "family": self.family,
            "training": self.traj.to_dict(),
            "inputs_length": self.inputs_length,
            "targets_length": self.targets_length,
            "shards": self.shards_path,
            "shards_index_sha256": self.index_sha,
            "dataset_fingerprint": self.shards.fingerprint,
            "vocabulary": self.vocabulary,
            "vocab_dir": self.vocab_dir,
            "vocab_sha256": self.vocabulary["sha256"],
        }
        if self.mixture is not None:  # only then: a single-set checkpoint stays as it was
            config["mixture"] = self.mixture.describe()
        return config

    def out_of_memory(self, device: str) -> ConfigError:
        """What to change when a micro-batch does not fit ``device``."""
        return ConfigError(
            f"out of memory on {device} with micro-batches of {self.plan.micro_rows} rows × "
            f"{self.inputs_length}/{self.targets_length} tokens: lower --batch-size or raise "
            f"--grad-accum (now {self.plan.grad_accum})"
        )


def open_run_data(opts: TrainOptions, info: dist.DistInfo, resume: resumed_run.Resume) -> RunData:
    """Open and verify the shards against the vocabulary and the checkpoint; resolve the
    trajectory options (a resumed run keeps the checkpoint's) and this rank's data plan."""
    spec = opts.mixture()  # a malformed mixture request fails first
    primary = opts.shards if spec is None else spec.sources[0].shards
    family = resumed_run.family_of_shards(opts, resume, primary)
    vocab_source, run_vocab = resumed_run.run_vocabulary(opts, resume, primary)
    traj = resumed_run.trajectory(opts, family, resume)
    mixture = None
    if spec is not None:
        from c4forge.trainers.mixture_data import open_mixture

        mixture = open_mixture(
            spec,
            vocab=run_vocab,
            seed=traj.seed,
            lengths=resume.lengths or None,
            verify=opts.verify_shards,
        )
        resumed_run.check_mixture(resume, mixture.describe())
        shards = mixture.sources[0].shards
    else:
        shards = open_shard_set(
            primary, vocab=run_vocab, verify=opts.verify_shards, **resume.lengths
        )
    resumed_run.check_shards_index(resume, shards.index_sha256, primary)
    if vocab_source and shards.vocab_dir and same_folder(vocab_source, shards.vocab_dir):
        shards.verify_vocab_copy()  # the copy this run loads and copies into RUN/vocab
    vocabulary = dict(shards.vocab)
    own = vocab_files.copy_dir(opts.output)
    if own:  # a resumed run's copy must be the shards' vocabulary
        check_vocab_dir(own, vocabulary["sha256"])
    if vocab_source:
        vocab_dir = os.path.abspath(vocab_source)
    else:
        vocab_dir = resume.config.get("vocab_dir") if resume.config else None
    if vocab_dir is None:
        vocab_dir = guess_vocab_dir(primary, vocabulary["sha256"])
    plan = DataPlan(
        batch_size=traj.batch_size,
        world_size=info.world_size,
        rank=info.rank,
        grad_accum=traj.grad_accum,
        seed=traj.seed,
        shuffle_window=traj.shuffle_window,
    )
    if mixture is not None:
        fam: TrainingGlue = get_family(family).mixture_training(mixture.names, mixture.columns)
        lengths = (mixture.inputs_length, mixture.targets_length)
    else:
        obj = shards.index["objective"]
        fam = training_for(family)
        lengths = (int(obj["inputs_length"]), int(obj["targets_length"]))
    return RunData(
        family=family,
        fam=fam,
        traj=traj,
        plan=plan,
        shards=shards,
        shards_path=os.path.abspath(mixture.sources[0].path if mixture else opts.shards),
        index_sha=shards.index_sha256,
        vocabulary=vocabulary,
        vocab_dir=vocab_dir,
        inputs_length=lengths[0],
        targets_length=lengths[1],
        mixture=mixture,
    )


def same_folder(a: str, b: str) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def guess_vocab_dir(shards: str, sha256: str) -> str | None:
    """``SHARDS/../vocab`` when its vocab.json has the shards' fingerprint (export needs it)."""
    cand = os.path.join(os.path.dirname(os.path.abspath(shards)), "vocab")
    if not vocab_files.is_vocab_dir(cand):  # only "no vocabulary there" means None
        return None
    desc = read_descriptor(cand)  # a damaged one is an error, not a silent None
    return cand if desc.get("sha256") == sha256 else None


def check_first_rows(data: RunData, check: RowCheck) -> None:
    """The family's row checks on the first shard of each split, before anything is written
    (every other shard is checked when the loader first decodes it)."""
    if not data.fam.checks_rows:
        return
    for split in ("train", "validation"):
        shards = data.shards.split_shards(split) if split in data.shards.index["splits"] else []
        if shards:
            reader = ShardReader(
                data.shards,
                [shards[0][0]],
                [shards[0][1]],
                cache=1,
                columns=data.fam.columns,
                check=check,
            )
            reader.shard(0)  # the family's checks, then the id ranges


def make_loader(
    data: RunData,
    dev: DeviceInfo,
    start_step: int,
    steps: int,
    check: RowCheck,
    num_workers: int | None,
) -> Any:
    """Batches from ``start_step`` on, in the data plan's order (device-side on TPU)."""
    common = dict(host_dtype=np.int32 if dev.kind == "xla" else None, check=check)
    stream: Any
    if data.mixture is not None:
        from c4forge.trainers.mixture_data import MixtureStream

        stream = MixtureStream(data.mixture, data.plan, start_step, steps, **common)
    else:
        stream = TrainStream(
            data.shards, data.plan, start_step, steps, columns=data.fam.columns, **common
        )
    workers = num_workers
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

        return OneLineErrors(pl.MpDeviceLoader(loader, dev.device))
    return OneLineErrors(loader)


class OneLineErrors:
    """A loader whose workers' user errors arrive as they were raised.

    A DataLoader worker's exception is re-raised in the trainer as the same type built from
    "Caught X in DataLoader worker process 0. Original Traceback …": a damaged shard found by
    a worker (sha256, an id out of range) would print a traceback. The original message is the
    last line of that text."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        try:
            yield from self.loader
        except C4ForgeError as err:
            raise type(err)(original_message(err)) from None


def original_message(err: BaseException) -> str:
    """The message a worker raised ``err`` with (``str(err)`` when it was raised here)."""
    text = str(err)
    if not text.startswith("Caught ") or "Traceback" not in text:
        return text
    prefix = f"{type(err).__module__}.{type(err).__qualname__}: "
    lines = [line for line in text.splitlines() if line.startswith(prefix)]
    return lines[-1][len(prefix) :] if lines else text.splitlines()[-1]


def validation_batches(
    data: RunData, rows: int, info: dist.DistInfo, check: RowCheck
) -> Iterable[dict[str, Any]] | None:
    """This rank's part of the first ``rows`` held-out rows (a mixture's: each source's
    validation split, marked with its source); None when the shards have no validation split."""
    if data.mixture is not None:
        return data.mixture.eval_batches(
            rows, data.plan.micro_rows, info.rank, info.world_size, check
        )
    if "validation" not in data.shards.index["splits"]:
        return None
    if not data.shards.split_shards("validation"):
        return None
    return eval_batches(
        data.shards,
        rows,
        data.plan.micro_rows,
        info.rank,
        info.world_size,
        columns=data.fam.columns,
        check=check,
    )
