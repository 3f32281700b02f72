"""Training health on real shards (CPU, tiny T5): a diverging run stops with a one-line error
naming the step, ``checkpoints/latest`` keeps the last finite checkpoint, metrics.jsonl stays
strict JSON; ``--lr`` (and ``--grad-clip``, ``--z-loss``) must be finite and >= 0 for every
optimizer, refused before any work."""

from __future__ import annotations

import json
import math
import os
import re

import pytest

torch = pytest.importorskip("torch")

import train_fixtures as fx  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from c4forge.cli import main  # noqa: E402
from c4forge.trainers import checkpoint as ckpt  # noqa: E402
from c4forge.trainers.distributed import DistInfo  # noqa: E402
from c4forge.trainers.health import Health, TrainingDiverged  # noqa: E402
from c4forge.trainers.metrics import MetricsLog  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("healthdata")
    fx.build_data(root, docs=40)
    return root


def _argv(root, out, *extra):
    return [
        "train",
        str(root / "shards"),
        "--output",
        str(out),
        "--steps",
        "4",
        "--preset",
        "tiny",
        "--batch-size",
        "4",
        "--vocab",
        str(root / "vocab"),
        "--log-every",
        "1",
        "--eval-rows",
        "8",
        "--no-progress",
        *extra,
    ]


def _strict_records(path):
    """Every line of a metrics.jsonl as strict JSON (a bare NaN or Infinity fails)."""

    def refuse(name):
        raise AssertionError(f"{path}: bare {name} in metrics")

    return [json.loads(line, parse_constant=refuse) for line in open(path, encoding="utf-8")]


def test_a_diverging_run_stops_and_keeps_the_last_finite_checkpoint(data, tmp_path, capsys):
    out = tmp_path / "run"
    argv = _argv(
        data,
        out,
        "--optimizer",
        "adamw",
        "--lr",
        "1e30",
        "--warmup",
        "0",
        "--schedule",
        "constant",
        "--grad-clip",
        "0",
        "--save-every",
        "1",
    )
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err  # after the start-up summary, the error is its last line
    err = err.splitlines()[-1]
    assert re.search(r"non-finite (loss|gradient norm) at step 2: training stopped", err)
    assert "step-00000001" in err and "lower --lr (peak 1e+30)" in err
    latest = ckpt.latest_checkpoint(str(out))
    assert os.path.basename(latest) == "step-00000001"
    assert ckpt.list_checkpoints(str(out)) == [latest]  # the bad step-2 weights were never saved
    weights = load_file(os.path.join(latest, "model.safetensors"))
    assert all(torch.isfinite(t).all() for t in weights.values())
    records = _strict_records(out / "metrics.jsonl")
    assert [r["step"] for r in records if "loss" in r] == [1]
    assert all(math.isfinite(r["loss"]) for r in records if "loss" in r)


@pytest.mark.parametrize("optimizer", ["adafactor", "adamwscale", "adamw"])
@pytest.mark.parametrize(
    "flag, value",
    [
        ("--lr", "nan"),
        ("--lr", "-1"),
        ("--lr", "inf"),
        ("--grad-clip", "nan"),
        ("--z-loss", "-0.5"),
    ],
)
def test_bad_numbers_are_refused_before_any_work(data, tmp_path, capsys, optimizer, flag, value):
    out = tmp_path / "run"
    assert main(_argv(data, out, "--optimizer", optimizer, flag, value)) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{flag} must be a finite number >= 0, got {float(value)}" in err
    assert not out.exists()


def test_the_first_bad_step_of_each_kind_is_read_at_the_check():
    health = Health("cpu")
    one = DistInfo(rank=0, world_size=1, local_rank=0)
    finite, nan = torch.tensor([1.5]), torch.tensor(float("nan"))
    health.note(0, finite, torch.tensor(0.3))
    health.check(one, None, 1e-3)  # healthy: nothing raised
    health.note(1, finite, nan)  # gradient first
    health.note(2, finite * nan, nan)
    with pytest.raises(
        TrainingDiverged, match=r"non-finite gradient norm at step 2: .*no checkpoint"
    ):
        health.check(one, None, 1e-3)


def test_metrics_never_hold_a_bare_nan(tmp_path):
    log = MetricsLog(str(tmp_path), tensorboard=False)
    log.write({"step": 3, "eval_nll": float("nan"), "eval_ppl": float("inf"), "loss": 2.5})
    log.close()
    assert _strict_records(tmp_path / "metrics.jsonl") == [
        {"step": 3, "eval_nll": None, "eval_ppl": None, "loss": 2.5}
    ]


def test_finetune_refuses_a_bad_lr_before_reading_the_checkpoint(tmp_path, capsys):
    glue = os.path.join(os.path.dirname(__file__), "data", "glue")
    argv = [
        "finetune",
        str(tmp_path / "no-run"),
        "--task",
        "sst2",
        "--data",
        glue,
        "-o",
        str(tmp_path / "ft"),
        "--lr",
        "nan",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--lr must be a finite number >= 0, got nan" in err
