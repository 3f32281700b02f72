"""The training loop on real shards (CPU, tiny): the loss falls, accumulation and DDP give the
single-device update, packed shards train, and bad input gets a clear error."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import train_fixtures as fx  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from c4forge.cli import main  # noqa: E402
from c4forge.errors import ConfigError  # noqa: E402
from c4forge.trainers import checkpoint as ckpt  # noqa: E402
from c4forge.trainers.metrics import read_metrics  # noqa: E402
from c4forge.trainers.train import TrainOptions, run, setup, train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("loopdata")
    return root, fx.build_data(root, docs=60, packed_docs=20)


def _opts(root, out, **kw) -> TrainOptions:
    return fx.tiny_options(root, out, **{"steps": 2, **kw})


def _losses(run):
    return [r["loss"] for r in read_metrics(os.path.join(run, "metrics.jsonl")) if "loss" in r]


def _weights(run):
    return load_file(os.path.join(ckpt.latest_checkpoint(str(run)), "model.safetensors"))


def test_loss_falls_on_real_shards(data, tmp_path):
    root, desc = data
    out = tmp_path / "run"
    summary = train(
        _opts(
            root,
            out,
            steps=30,
            batch_size=8,
            optimizer="adamwscale",
            lr=1e-2,
            warmup=5,
            eval_every=10,
            eval_rows=32,
        )
    )
    losses = _losses(out)
    assert len(losses) == 30
    ln_e = math.log(desc["embedding_size"])
    assert ln_e - 0.5 <= losses[0] <= ln_e + 1.5  # t5x init: first loss ≈ ln E + 0.5
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 1.0
    evals = [r["eval_nll"] for r in read_metrics(str(out / "metrics.jsonl")) if "eval_nll" in r]
    assert len(evals) == 3 and evals[-1] < evals[0]
    assert summary.eval_nll == evals[-1] and math.isclose(summary.eval_ppl, math.exp(evals[-1]))
    assert summary.curve and os.path.getsize(summary.curve) > 10_000  # a real PNG was drawn
    assert "held-out NLL" in summary.text() and summary.tokens_per_s > 0


def test_accumulation_gives_the_single_batch_update(data, tmp_path):
    root, _ = data
    one = tmp_path / "one"
    two = tmp_path / "two"
    train(_opts(root, one))
    train(_opts(root, two, grad_accum=2))
    assert _losses(one) == pytest.approx(_losses(two), rel=1e-5)
    a, b = _weights(one), _weights(two)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)


def test_ddp_two_ranks_match_one_rank_with_accumulation(data, tmp_path):
    """torchrun × 2 (gloo): global weight all-reduce + world·Σ/W normalisation (model.md §5)."""
    root, _ = data
    single = tmp_path / "single"
    train(_opts(root, single, grad_accum=2))
    ddp = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "c4forge",
        "train",
        str(root / "shards"),
        "--output",
        str(ddp),
        "--steps",
        "2",
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
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("trained steps 0 → 2") == 1  # only rank 0 reports
    assert _losses(ddp) == pytest.approx(_losses(single), rel=1e-5)
    a, b = _weights(single), _weights(ddp)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)
    ev_single = [r for r in read_metrics(str(single / "metrics.jsonl")) if "eval_nll" in r]
    ev_ddp = [r for r in read_metrics(str(ddp / "metrics.jsonl")) if "eval_nll" in r]
    assert ev_ddp[0]["eval_nll"] == pytest.approx(ev_single[0]["eval_nll"], rel=1e-5)


def test_packed_shards_train(data, tmp_path):
    root, _ = data
    summary = train(_opts(root, tmp_path / "p", shards=str(root / "packed"), ffn="relu"))
    assert summary.steps == 2 and math.isfinite(summary.final_loss)
    assert math.isfinite(summary.eval_nll)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--preset", "huge"], "unknown preset 'huge'; valid: tiny, small, base"),
        (["--preset", "tiny", "--ffn", "swoosh"], "valid: relu, gelu, swish, glu"),
        (["--preset", "tiny", "--device", "cuda"], "CUDA is not available"),
        (["--preset", "tiny", "--batch-size", "6", "--grad-accum", "4"], "multiple of"),
        ([], "--preset is required"),
    ],
)
def test_bad_options_exit_2_with_a_clear_message(data, tmp_path, capsys, args, message):
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    root, _ = data
    argv = ["train", str(root / "shards"), "--output", str(tmp_path / "r"), "--steps", "1", *args]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("c4forge train: error:") and message in err


def test_out_of_memory_says_what_to_lower(data, tmp_path, monkeypatch):
    root, _ = data
    s = setup(_opts(root, tmp_path / "oom"))

    def exhausted(*args, **kwargs):  # what the CUDA caching allocator raises
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(s.net.model, "forward", exhausted)
    with pytest.raises(ConfigError, match="lower --batch-size or raise --grad-accum"):
        run(s)
