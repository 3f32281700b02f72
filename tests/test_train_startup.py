"""What ``c4forge train`` says before and after it runs: the start-up summary (model, device,
threads, batch, epochs per source, schedule, held-out rows, resume point) and its warnings, the
warm-up default that follows ``--steps``, the thread choice, why a held-out NLL is n/a, and what
a mixture's overall held-out NLL is. Real tiny runs on real shards of the bundled C4 sample."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import train_fixtures as fx  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from c4forge.io.storage import read_json  # noqa: E402
from c4forge.trainers import checkpoint as ckpt  # noqa: E402
from c4forge.trainers import threads as th  # noqa: E402
from c4forge.trainers.data import eval_batches, open_shard_set  # noqa: E402
from c4forge.trainers.metrics import read_metrics  # noqa: E402
from c4forge.trainers.options import TrainOptions  # noqa: E402
from c4forge.trainers.summary import POOLED_NLL  # noqa: E402
from c4forge.trainers.train import train  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Shards of 40 documents (32-token rows), a set without a validation split, and a second
    set of other rows for a mixture; one vocabulary."""
    root = tmp_path_factory.mktemp("startup")
    desc = fx.build_data(root, docs=40, inputs_length=32)
    vocab = str(root / "vocab")
    fx.build_shards(
        str(root / "noval"), vocab, desc, docs=20, inputs_length=32, validation_shards=0
    )
    fx.build_shards(str(root / "other"), vocab, desc, docs=30, inputs_length=32, seed=7)
    fx.build_shards(str(root / "small"), vocab, desc, docs=2, inputs_length=32, train_shards=1)
    return root


def _rows(shards, split="train") -> int:
    return read_json(os.path.join(shards, "index.json"))["splits"][split]["rows"]


def _line(err: str, key: str) -> str:
    found = [ln for ln in err.splitlines() if ln.startswith(f"  {key} ")]
    assert len(found) == 1, err
    return found[0][len(key) + 3 :].strip()


def test_startup_summary_says_what_the_run_will_do(data, tmp_path, capsys):
    """128 rows a step over a set of a few dozen rows: the epochs are counted and warned
    about; every figure is the run's own (parameters from the checkpoint it writes)."""
    out = tmp_path / "run"
    small = data / "small"
    train(
        fx.tiny_options(
            data, out, steps=3, batch_size=128, optimizer="adamwscale", shards=str(small)
        )
    )
    err = capsys.readouterr().err
    weights = load_file(os.path.join(ckpt.latest_checkpoint(str(out)), "model.safetensors"))
    params = sum(t.numel() for t in weights.values())
    assert f"c4forge train: tiny (t5, geglu FFN), {params:,} parameters" in err
    assert _line(err, "device").startswith("cpu, fp32, 1 torch thread (OMP_NUM_THREADS), OpenMP")
    index = read_json(str(small / "index.json"))
    lin, lout = index["objective"]["inputs_length"], index["objective"]["targets_length"]
    assert _line(err, "batch") == (
        f"128 rows/step (128 per micro-batch × 1 accumulation × 1 rank) × {lin + lout} tokens "
        f"({lin} in + {lout} out) = {128 * (lin + lout):,} tokens/step"
    )
    assert _line(err, "run") == f"3 steps = 384 rows = {384 * (lin + lout):,} tokens"
    rows = _rows(small)
    epochs = 384 / rows
    assert _line(err, "data") == f"{small}: {rows:,} train rows; 384 read = {epochs:.2f} epochs"
    assert rows < 128 and epochs > 4
    assert (
        f"c4forge train: warning: {small} has {rows:,} train rows, fewer than one batch of 128: "
        f"the run reads each about {epochs:,.1f} times" in err
    )
    assert _line(err, "schedule") == (
        "adamwscale, cosine: no warm-up (default), lr 0.02, then cosine to 1e-05 at step 3; "
        "grad clip 1"
    )
    val = _rows(small, "validation")
    assert _line(err, "held-out") == f"the first 8 of {val:,} validation rows, at the end"
    assert _line(err, "start") == "step 0 (a fresh run)"


def test_a_resumed_run_says_which_checkpoint_it_took(data, tmp_path, capsys):
    out = tmp_path / "run"
    train(fx.tiny_options(data, out, steps=4, save_every=1, stop_after_step=2))
    capsys.readouterr()
    train(fx.tiny_options(data, out, steps=4, resume="auto"))
    err = capsys.readouterr().err
    step2 = os.path.join(ckpt.checkpoints_dir(str(out)), "step-00000002")
    assert _line(err, "start") == f"step 2 of 4, from {step2} (checkpoints/latest)"
    assert (
        "adafactor, isr_decay: relative step 1/√max(n, 10,000) (the checkpoint's, T5): 0.01 "
        "through step 3, then linear to 0 over step 4" in err
    )
    # the 10,000-step ISR plateau outlasts the run: said, not warned
    assert "ISR plateau is longer than the run (4 steps)" in err and "warning" not in err


@pytest.mark.parametrize(
    "schedule, steps, want",
    [
        ("cosine", 20, 2),  # nanoT5's 10,000 would never end
        ("cosine", 65_536, 6_553),
        ("cosine", 1_000_000, 10_000),  # at most nanoT5's
        ("linear", 1_000_000, 100_000),  # BERT: 10 % (unchanged)
        ("isr_decay", 20, 10_000),  # T5's plateau: 1/√W is the largest relative step
        ("isr", 65_536, 10_000),
    ],
)
def test_warmup_default_follows_steps(schedule, steps, want):
    opts = TrainOptions(shards="s", output="o", steps=steps, schedule=schedule)
    assert opts.resolved_training()["warmup"] == want
    given = TrainOptions(shards="s", output="o", steps=steps, schedule=schedule, warmup=7)
    assert given.resolved_training()["warmup"] == 7


def test_a_short_cosine_run_reaches_its_peak_and_a_long_warmup_is_warned(data, tmp_path, capsys):
    """``--optimizer adamwscale --steps 20`` used to spend every step in a 10,000-step warm-up
    (lr 0.010005 → 0.01002); now it warms up over 2 steps, reaches 0.02 and decays. A warm-up
    given longer than the run is kept (bytes of such runs stay) and warned about."""
    out = tmp_path / "short"
    train(fx.tiny_options(data, out, steps=20, optimizer="adamwscale", log_every=1, eval_rows=4))
    lrs = [r["lr"] for r in read_metrics(str(out / "metrics.jsonl")) if "lr" in r]
    assert lrs[0] == pytest.approx(0.02 * 0.75) and lrs[1] == pytest.approx(0.02)
    assert lrs[-1] < 0.001
    capsys.readouterr()
    long = tmp_path / "long"
    summary = train(
        fx.tiny_options(data, long, steps=3, optimizer="adamwscale", warmup=10_000, eval_rows=4)
    )
    err = capsys.readouterr().err
    assert (
        "c4forge train: warning: the warm-up (10,000 steps) is longer than the run (3 steps): "
        "the learning rate only goes 0.010001 → 0.010003 and never reaches its peak" in err
    )
    state = read_json(os.path.join(summary.checkpoint, "trainer_state.json"))
    assert state["schedule"]["warmup"] == 10_000


def test_heldout_na_says_why(data, tmp_path, capsys):
    summary = train(fx.tiny_options(data, tmp_path / "a", steps=1, shards=str(data / "noval")))
    err = capsys.readouterr().err
    reason = f"{data / 'noval'} has no validation split"
    assert _line(err, "held-out") == f"none: {reason} (held-out NLL will read n/a)"
    assert f"held-out NLL n/a nats/token, perplexity n/a ({reason})" in summary.text()
    stopped = train(fx.tiny_options(data, tmp_path / "b", steps=4, stop_after_step=2))
    assert "held-out NLL n/a" in stopped.text()
    assert "the run stops at step 2, before its end (4) where it evaluates" in stopped.text()


def test_a_mixtures_overall_nll_is_pooled_over_held_out_tokens(data, tmp_path):
    """The overall figure is Σ_s NLL_s · T_s / Σ_s T_s over the sources' held-out target tokens
    T_s (the same first --eval-rows rows of each), not the rates' mean; both are printed."""
    summary = train(
        fx.tiny_options(
            data,
            tmp_path / "mix",
            steps=2,
            shards=f"c4={data / 'shards'}",
            mix=(f"other={data / 'other'}",),
            mix_rates="0.9,0.1",
        )
    )
    ev = summary.evaluation
    tokens = {}
    for name, folder in (("c4", "shards"), ("other", "other")):
        batches = eval_batches(open_shard_set(str(data / folder)), 8, 8)
        tokens[name] = sum(int(np.count_nonzero(b["targets"])) for b in batches)
    pooled = sum(ev[f"eval_nll_{n}"] * t for n, t in tokens.items()) / sum(tokens.values())
    assert ev["eval_nll"] == pytest.approx(pooled, rel=1e-6)
    rated = 0.9 * ev["eval_nll_c4"] + 0.1 * ev["eval_nll_other"]
    text = summary.text()
    assert f"held-out NLL {ev['eval_nll']:.4f} nats/token" in text and POOLED_NLL in text
    assert re.search(
        rf"held-out NLL per source: .*; weighted by the mixing rates {rated:.4f}", text
    )


# ----------------------------------------------------------------------------- threads


def test_default_threads_are_the_usable_cpus_and_the_load_only_warns():
    assert th.default_threads(2) == 2 and th.default_threads(16, local_ranks=2) == 8
    assert th.default_threads(1, local_ranks=4) == 1
    busy = th.load_warning(2, 2, 12.4)  # the shared 2-core machine, loaded
    assert busy is not None and "--threads 1 may be faster" in busy
    assert th.load_warning(2, 2, 0.3) is None  # idle
    assert th.load_warning(1, 2, 12.4) is None  # one thread: nothing to gain
    assert th.load_warning(4, 64, 30.0) is None  # 4 of a big host's CPUs, the host half busy
    assert th.load_warning(2, 2, None) is None  # no load average
    assert th.load_warning(2, 2, 12.4, "PASSIVE") is None  # waiting threads sleep: no harm


def test_the_command_line_makes_openmp_waits_passive(data, tmp_path):
    """A CLI run's torch (and every process it starts) sleeps while it waits for a core,
    unless the user chose otherwise: the start-up summary says which policy the run has."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    base = [
        sys.executable,
        "-m",
        "c4forge",
        "train",
        str(data / "shards"),
        "--vocab",
        str(data / "vocab"),
        "--preset",
        "tiny",
        "--steps",
        "1",
        "--batch-size",
        "4",
        "--no-progress",
        "--threads",
        "2",
    ]
    run = subprocess.run(
        base + ["-o", str(tmp_path / "a")], env=env, capture_output=True, text=True, check=True
    )
    assert "2 torch threads (--threads), OpenMP waits passive" in run.stderr
    env["OMP_WAIT_POLICY"] = "active"
    run = subprocess.run(
        base + ["-o", str(tmp_path / "b")], env=env, capture_output=True, text=True, check=True
    )
    assert "OpenMP waits active" in run.stderr


def test_cgroup_quota_caps_the_usable_cpus(tmp_path):
    v2 = tmp_path / "cpu.max"
    v2.write_text("150000 100000\n")
    assert th.cgroup_quota(str(v2)) == 1.5
    assert th.usable_cpus(affinity=8, quota=1.5) == 2  # a 1.5-CPU quota runs 2 threads
    v2.write_text("max 100000\n")
    assert th.cgroup_quota(str(v2)) is None
    quota, period = tmp_path / "quota", tmp_path / "period"
    quota.write_text("300000\n")
    period.write_text("100000\n")
    missing = str(tmp_path / "none")
    assert th.cgroup_quota(missing, (str(quota), str(period))) == 3.0
    quota.write_text("-1\n")
    assert th.cgroup_quota(missing, (str(quota), str(period))) is None


def test_threads_flag_and_default_reach_torch(data, tmp_path, capsys, monkeypatch):
    before = torch.get_num_threads()
    try:
        train(fx.tiny_options(data, tmp_path / "a", steps=1, threads=2))
        assert torch.get_num_threads() == 2
        assert "2 torch threads (--threads)" in _line(capsys.readouterr().err, "device")
        monkeypatch.delenv("OMP_NUM_THREADS")
        monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
        train(fx.tiny_options(data, tmp_path / "b", steps=1))
        usable = min(th.usable_cpus(quota=th.cgroup_quota()), th.torch_default_threads())
        assert torch.get_num_threads() == usable
        assert f"{usable} torch thread" in _line(capsys.readouterr().err, "device")
    finally:
        torch.set_num_threads(before)
