"""Run one stage into ``DIR/stages/<kind>-<key>/`` through the stage's own entry point.

clean, vocab, shards and pretraining go through their real subcommands (``c4forge.cli.main``,
the demo's path, so an experiment runs exactly what a user's command line would); fine-tuning
goes through ``FinetuneOptions`` / ``finetune`` (the demo's fine-tuning path). A stage is done
when its ``stage.json`` exists: it is written atomically, last, and records the configuration,
the input stages' keys, the output's own fingerprint (stats.json, index.json, checkpoint,
predictions) and the CPU and wall seconds spent.

Resume: a folder without ``stage.json`` is an interrupted stage. Pretraining and fine-tuning
continue from their last checkpoint (the trainers' own ``--resume``); the short stages (clean,
vocab, shards) are started again from an empty folder.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import sys
import time
from typing import Any

from c4forge.errors import C4ForgeError
from c4forge.experiments.stages import Stage
from c4forge.io.storage import read_json, sha256, write_json

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


def run_stage(
    store: str, stage: Stage, device: str = "cpu", workers: int | None = None,
    threads: int | None = None,
) -> dict:  # fmt: skip
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
                fingerprint = RUNNERS[stage.kind](stage, out, dirs, device, workers)
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


def read_marker(store: str, stage: Stage) -> dict[str, Any]:
    return read_json(os.path.join(stage_dir(store, stage), MARKER))


def _cli(argv: list[str]) -> None:
    from c4forge.cli import main

    code = main(argv)
    if code != 0:
        raise C4ForgeError(f"stage `c4forge {' '.join(argv[:2])} …` failed (exit {code})")


def _opt(argv: list[str], flag: str, value: Any) -> None:
    if value is not None:
        argv += [flag, str(value)]


def _clean(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> str:
    from c4forge.experiments.schema import SAMPLE
    from c4forge.samples import demo_inputs

    c, p = stage.config, stage.params
    inputs = p["inputs"]
    if inputs == SAMPLE:
        inputs = demo_inputs(os.path.join(os.path.dirname(out), "input"))
    argv = ["clean", *inputs, "--output", out, "--variant", c["variant"], "--quiet"]
    _opt(argv, "--dedup", c.get("dedup"))
    _opt(argv, "--badwords-fraction", c.get("badwords_fraction"))
    _opt(argv, "--url-list", p.get("url_list"))
    _opt(argv, "--domain-list", p.get("domain_list"))
    _opt(argv, "--workers", workers)
    _cli(argv)
    return sha256(os.path.join(out, "stats.json"))


def _vocab(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> str:
    c = stage.config
    argv = ["vocab", dirs["clean"], "--output", out, "--vocab-size", str(c["size"]), "--quiet"]
    _opt(argv, "--sample-chars", c.get("sample_chars"))
    _opt(argv, "--seed", c.get("seed"))
    _cli(argv)
    return sha256(os.path.join(out, "sentencepiece.model"))


def _shards(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> str:
    c = stage.config
    argv = ["shards", dirs["clean"], "--vocab", dirs["vocab"], "--output", out, "--quiet"]
    argv += ["--objective", c["objective"]]
    for key in ("inputs_length", "targets_length", "noise_density", "mean_noise_span_length",
                "packing", "seed"):  # fmt: skip
        _opt(argv, "--" + key.replace("_", "-"), c.get(key))
    _opt(argv, "--workers", workers)
    _cli(argv)
    return read_json(os.path.join(out, "index.json"))["dataset_fingerprint"]


def train_argv(stage: Stage, out: str, dirs: dict, device: str) -> list[str]:
    """The `c4forge train` command of a pretraining stage (always --resume: continues a killed
    run from its last checkpoint, starts at step 0 when there is none)."""
    c, m = stage.config, stage.config["model"]
    steps = c["steps"]
    shards = dirs["shards"]
    if "mix" in c:  # the arm's own shard stage is the first input
        shards = f"{stage.params['mix_base']}={dirs['stage:' + stage.inputs[0].name]}"
    argv = ["train", shards, "--output", out, "--steps", str(steps)]
    if "mix" in c:
        for name, stage_name in stage.params["mix"]:
            argv += ["--mix", f"{name}={dirs['stage:' + stage_name]}"]
        mix = c["mix"]
        if mix.get("rates") is not None:
            argv += ["--mix-rates", ",".join(str(v) for v in mix["rates"])]
        else:
            argv += ["--mix-strategy", mix["strategy"]]
        _opt(argv, "--mix-limit", mix.get("limit"))
        _opt(argv, "--mix-temperature", mix.get("temperature"))
        argv.append("--mix-pad")
    argv += ["--preset", m["preset"], "--vocab", dirs["vocab"], "--device", device]
    argv += ["--batch-size", str(c["batch_size"]), "--seed", str(c["seed"])]
    argv += ["--eval-every", str(c.get("eval_every") or max(1, steps // 4))]
    argv += ["--save-every", str(c.get("save_every") or max(1, steps // 4))]
    argv += ["--warmup", str(c["warmup"] if "warmup" in c else max(1, steps // 10))]
    argv += ["--resume", "auto", "--no-progress", "--keep-checkpoints", "1"]
    _opt(argv, "--eval-rows", c.get("eval_rows"))
    _opt(argv, "--log-every", c.get("log_every"))
    for key in ("optimizer", "schedule", "lr", "grad_clip"):
        _opt(argv, "--" + key.replace("_", "-"), c.get(key))
    _opt(argv, "--ffn", m.get("ffn"))
    _opt(argv, "--d-ff", m.get("d_ff"))
    _opt(argv, "--dropout", m.get("dropout"))
    if m.get("tie_embeddings"):
        argv.append("--tie-embeddings")
    return argv


def _pretrain(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> str:
    from c4forge.trainers import checkpoint as ckpt

    _cli(train_argv(stage, out, dirs, device))
    latest = ckpt.latest_checkpoint(out)
    if latest is None:
        raise C4ForgeError(f"{out}: training finished without a checkpoint")
    return sha256(os.path.join(latest, "model.safetensors"))


def _taskshards(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> str:
    c = stage.config
    argv = ["shards", "task", c["task"], "--vocab", dirs["vocab"], "--output", out, "--quiet"]
    argv += ["--data", stage.params["data"], "--targets-length", str(c["targets_length"])]
    _opt(argv, "--inputs-length", c.get("inputs_length"))
    _cli(argv)
    return read_json(os.path.join(out, "index.json"))["dataset_fingerprint"]


def _zero_shot(stage: Stage, out: str, dirs: dict, device: str) -> str:
    """finetune.steps = 0: the pretraining checkpoint's text head scored on the dev split."""
    from c4forge.finetune.evaluate_run import evaluate_run
    from c4forge.finetune.options import EvaluateOptions

    c = stage.config
    opts = EvaluateOptions(
        ft=dirs["pretrain"], task=c["task"], data=stage.params["data"], output=out,
        batch_size=c["batch_size"], device=device, progress=False,
    )  # fmt: skip
    evaluate_run(opts)
    print(f"scored {c['task']} with the checkpoint's own text head", file=sys.stderr)
    return sha256(os.path.join(out, "predictions.jsonl"))


def _finetune(stage: Stage, out: str, dirs: dict, device: str, workers: int | None) -> str:
    from c4forge.finetune.loop import FinetuneOptions, finetune

    c = stage.config
    if c["steps"] == 0:
        return _zero_shot(stage, out, dirs, device)
    random = c["init"] == "random"
    checkpoint = dirs["after-pretrain"] if random else dirs["pretrain"]
    opts = FinetuneOptions(
        checkpoint=checkpoint, task=c["task"], data=stage.params["data"], output=out,
        head=c["head"], steps=c["steps"], lr=c["lr"], batch_size=c["batch_size"],
        max_length=c["max_length"], seed=c["seed"], device=device, resume=True,
        random_init=random, max_train_examples=c.get("max_train_examples"),
        save_every=c.get("save_every") or max(1, c["steps"] // 2), progress=False,
    )  # fmt: skip
    finetune(opts)
    print(f"finished {c['task']} ({c['init']})", file=sys.stderr)
    return sha256(os.path.join(out, "predictions.jsonl"))


RUNNERS = {
    "clean": _clean,
    "vocab": _vocab,
    "shards": _shards,
    "taskshards": _taskshards,
    "pretrain": _pretrain,
    "finetune": _finetune,
}
