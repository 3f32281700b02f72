"""Run one stage into ``DIR/stages/<kind>-<key>/`` through its command's own ``run``.

Each stage kind builds its command's typed request (``CleanJob``, ``VocabOptions``,
``ShardsJob``, ``TaskShardsRequest``, ``TrainOptions``, ``FinetuneOptions``: the dataclasses
the command line builds too; ``COMMANDS``, one entry per kind) and runs it with
``c4forge.commands.run``, so a renamed option fails where the stage is written (and in its
tests), not as an unrecognised flag in the middle of an experiment; the output's fingerprint is
the result's. A stage is done
when its ``stage.json`` exists: it is written atomically, last, and records the configuration,
the input stages' keys, the output's own fingerprint (stats.json, index.json, checkpoint,
predictions) and the CPU and wall seconds spent.

Resume: a folder without ``stage.json`` is an interrupted stage. Pretraining and fine-tuning
continue from their last checkpoint (the trainers' own ``--resume``); the short stages (clean,
vocab, shards) are started again from an empty folder.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import resource
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from c4forge.experiments.stages import Stage
from c4forge.io.storage import write_json

if TYPE_CHECKING:
    from c4forge.trainers.options import TrainOptions

MARKER = "stage.json"
LOG = "log.txt"
RESUMABLE = ("pretrain", "finetune")


def stage_dir(store: str, stage: Stage) -> str:
    """``store`` is the stage folder (DIR/stages, or a store several experiments share)."""
    return os.path.join(store, stage.name)


def is_done(store: str, stage: Stage) -> bool:
    return os.path.isfile(os.path.join(stage_dir(store, stage), MARKER))


@contextlib.contextmanager
def stage_lock(store: str, stage: Stage):
    """An exclusive ``flock`` on ``<store>/<name>.lock`` while a stage runs: two experiments
    sharing a store never run the same stage at once (the second waits, then finds it done).
    The kernel drops the lock when its process dies, SIGKILL included."""
    import fcntl

    os.makedirs(store, exist_ok=True)
    with open(os.path.join(store, f"{stage.name}.lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _cpu_seconds() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


@contextlib.contextmanager
def torch_threads(n: int | None):
    """``n`` torch threads for the duration (None: leave as is). One thread is the CPU default
    of an experiment: the tiny models gain little from a second, and on a shared machine a
    spinning second thread multiplies the CPU time (the demo measured 5× when fine-tuning)."""
    if n is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _pinned_threads() -> int:
    """The torch threads ``run_stage`` pinned for a stage (``torch_threads``): train and
    finetune would otherwise choose their own."""
    import torch

    return torch.get_num_threads()


def run_stage(
    store: str,
    stage: Stage,
    device: str = "cpu",
    workers: int | None = None,
    threads: int | None = None,
) -> dict:
    """Run ``stage`` (its inputs are done) and write its marker; returns the marker's content."""
    out = stage_dir(store, stage)
    if os.path.isdir(out) and stage.kind not in RESUMABLE:
        shutil.rmtree(out)  # an interrupted short stage starts again
    os.makedirs(out, exist_ok=True)
    dirs = {s.kind: stage_dir(store, s) for s in stage.inputs}
    dirs.update({f"stage:{s.name}": stage_dir(store, s) for s in stage.inputs})  # mixtures
    dirs.update({f"after-{s.kind}": stage_dir(store, s) for s in stage.after})
    wall0, cpu0 = time.perf_counter(), _cpu_seconds()
    with open(os.path.join(out, LOG), "a", encoding="utf-8") as log:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            with torch_threads(threads if stage.kind in RESUMABLE else None):
                fingerprint = run_command(stage, out, dirs, device, workers)
    marker = {
        "format": "c4forge.experiment.stage",
        "format_version": 1,
        "kind": stage.kind,
        "key": stage.key,
        "config": stage.config,
        "inputs": {s.kind: s.name for s in stage.inputs},
        "fingerprint": fingerprint,
        "wall_seconds": round(time.perf_counter() - wall0, 3),
        "cpu_seconds": round(_cpu_seconds() - cpu0, 3),
        "device": device,
        "threads": threads if stage.kind in RESUMABLE else None,
    }
    write_json(os.path.join(out, MARKER), marker)  # atomic, and last: the stage is done
    return marker


def _maybe(kind: Callable[[Any], Any], value: Any) -> Any:
    """``value`` as the option's type (what argparse's ``type`` made of it), None kept."""
    return None if value is None else kind(value)


def _given(**values: Any) -> dict[str, Any]:
    """The options a stage sets: a None leaves the option's default (a flag not passed)."""
    return {k: v for k, v in values.items() if v is not None}


def run_command(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> str:
    """Build the stage's request, run its command (``c4forge.commands.run``), write what the
    stage's log keeps; returns the output's fingerprint (the result's own)."""
    from c4forge.commands import run

    command = COMMANDS[stage.kind]
    result = run(command.request(stage, out, dirs, device, workers))
    if command.echo:
        print(result.text())
    if command.note is not None:
        print(command.note(stage), file=sys.stderr)
    return result.fingerprint()


def _clean(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> Any:
    from c4forge.clean.config import CleanJob
    from c4forge.experiments.schema import SAMPLE
    from c4forge.samples import demo_inputs

    c, p = stage.config, stage.params
    inputs = p["inputs"]
    if inputs == SAMPLE:
        inputs = demo_inputs(os.path.join(os.path.dirname(out), "input"))
    fraction = c.get("badwords_fraction")
    return CleanJob.from_mapping(
        _given(
            inputs=tuple(inputs),
            output=out,
            variant=c["variant"],
            quiet=True,
            dedup=c.get("dedup"),
            url_list=p.get("url_list"),
            domain_list=p.get("domain_list"),
            badwords_fraction=None if fraction is None else float(fraction),
            workers=workers,
        )
    )


def _vocab(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> Any:
    from c4forge.vocab.options import VocabOptions

    c = stage.config
    return VocabOptions.from_mapping(
        _given(
            docs=dirs["clean"],
            output=out,
            vocab_size=int(c["size"]),
            quiet=True,
            sample_chars=_maybe(int, c.get("sample_chars")),
            seed=_maybe(int, c.get("seed")),
        )
    )


def _shards(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> Any:
    from c4forge.shards.job import ShardsJob

    c = stage.config
    return ShardsJob.from_mapping(
        _given(
            docs=dirs["clean"],
            vocab=dirs["vocab"],
            output=out,
            quiet=True,
            objective=c["objective"],
            inputs_length=_maybe(int, c.get("inputs_length")),
            targets_length=_maybe(int, c.get("targets_length")),
            noise_density=_maybe(float, c.get("noise_density")),
            mean_noise_span_length=_maybe(float, c.get("mean_noise_span_length")),
            packing=c.get("packing"),
            seed=_maybe(int, c.get("seed")),
            workers=workers,
        )
    )


def train_options(stage: Stage, out: str, dirs: dict, device: str) -> TrainOptions:
    """The ``TrainOptions`` of a pretraining stage (always resumed: continues a killed run from
    its last checkpoint, starts at step 0 when there is none)."""
    from c4forge.trainers.options import TrainOptions

    c, m = stage.config, stage.config["model"]
    steps = int(c["steps"])
    shards = dirs["shards"]
    mix: dict[str, Any] = {}
    if "mix" in c:  # the arm's own shard stage is the first input
        shards = f"{stage.params['mix_base']}={dirs['stage:' + stage.inputs[0].name]}"
        spec, rates = c["mix"], c["mix"].get("rates")
        mix = dict(
            mix=tuple(f"{name}={dirs['stage:' + s]}" for name, s in stage.params["mix"]),
            mix_rates=None if rates is None else ",".join(str(v) for v in rates),
            mix_strategy=spec["strategy"] if rates is None else None,
            mix_limit=_maybe(int, spec.get("limit")),
            mix_temperature=_maybe(float, spec.get("temperature")),
            mix_pad=True,
        )
    return TrainOptions.from_mapping(
        _given(
            shards=shards,
            output=out,
            steps=steps,
            **mix,
            preset=m["preset"],
            vocab=dirs["vocab"],
            device=device,
            batch_size=int(c["batch_size"]),
            seed=int(c["seed"]),
            eval_every=int(c.get("eval_every") or max(1, steps // 4)),
            save_every=int(c.get("save_every") or max(1, steps // 4)),
            warmup=int(c["warmup"] if "warmup" in c else max(1, steps // 10)),
            resume="auto",
            progress=False,
            keep_checkpoints=1,
            eval_rows=_maybe(int, c.get("eval_rows")),
            log_every=_maybe(int, c.get("log_every")),
            optimizer=c.get("optimizer"),
            schedule=c.get("schedule"),
            lr=_maybe(float, c.get("lr")),
            grad_clip=_maybe(float, c.get("grad_clip")),
            ffn=m.get("ffn"),
            d_ff=_maybe(int, m.get("d_ff")),
            dropout=_maybe(float, m.get("dropout")),
            tie_embeddings=True if m.get("tie_embeddings") else None,
        )
    )


def _pretrain(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> Any:
    return dataclasses.replace(train_options(stage, out, dirs, device), threads=_pinned_threads())


def _taskshards(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> Any:
    from c4forge.shards.tasks import TaskShardsRequest

    c = stage.config
    return TaskShardsRequest(
        **_given(
            task=c["task"],
            vocab=dirs["vocab"],
            output=out,
            quiet=True,
            data=stage.params["data"],
            targets_length=int(c["targets_length"]),
            inputs_length=_maybe(int, c.get("inputs_length")),
        )
    )


def _zero_shot(stage: Stage, out: str, dirs: dict, device: str) -> Any:
    """finetune.steps = 0: the pretraining checkpoint's text head scored on the dev split."""
    from c4forge.finetune.options import EvaluateOptions

    c = stage.config
    return EvaluateOptions(
        ft=dirs["pretrain"],
        task=c["task"],
        data=stage.params["data"],
        output=out,
        batch_size=c["batch_size"],
        device=device,
        progress=False,
    )


def _finetune(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> Any:
    from c4forge.finetune.options import FinetuneOptions

    c = stage.config
    if c["steps"] == 0:
        return _zero_shot(stage, out, dirs, device)
    random = c["init"] == "random"
    checkpoint = dirs["after-pretrain"] if random else dirs["pretrain"]
    return FinetuneOptions(
        checkpoint=checkpoint,
        task=c["task"],
        data=stage.params["data"],
        output=out,
        head=c["head"],
        steps=c["steps"],
        lr=c["lr"],
        batch_size=c["batch_size"],
        max_length=c["max_length"],
        seed=c["seed"],
        device=device,
        resume=True,
        random_init=random,
        max_train_examples=c.get("max_train_examples"),
        save_every=c.get("save_every") or max(1, c["steps"] // 2),
        progress=False,
        threads=_pinned_threads(),
    )


def _finetuned(stage: Stage) -> str:
    c = stage.config
    if c["steps"] == 0:
        return f"scored {c['task']} with the checkpoint's own text head"
    return f"finished {c['task']} ({c['init']})"


@dataclass(frozen=True)
class StageCommand:
    """How a stage kind runs: ``request`` builds its command's typed request from the stage
    (``(stage, out, dirs, device, workers)``); ``echo``: the command's closing summary goes to
    the stage's log (the stages that run quiet leave it out); ``note``: a last line for the log."""

    request: Callable[[Stage, str, dict, str, int | None], Any]
    echo: bool = False
    note: Callable[[Stage], str] | None = None


COMMANDS: dict[str, StageCommand] = {
    "clean": StageCommand(_clean),
    "vocab": StageCommand(_vocab),
    "shards": StageCommand(_shards),
    "taskshards": StageCommand(_taskshards),
    "pretrain": StageCommand(_pretrain, echo=True),
    "finetune": StageCommand(_finetune, note=_finetuned),
}
