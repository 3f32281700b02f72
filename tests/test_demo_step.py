"""The demo's closing lines: held-out NLL of the pretrained model vs the same
architecture at random init, on a real (tiny) training run, and the text that says only that."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

import train_fixtures as fx  # noqa: E402

from c4forge.finetune import demo_step  # noqa: E402
from c4forge.trainers.metrics import read_metrics  # noqa: E402
from c4forge.trainers.train import train  # noqa: E402


def test_heldout_nll_is_the_runs_own_eval_and_random_init_is_worse(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    fx.build_data(root, docs=60, packed_docs=20)
    run = tmp_path / "run"
    opts = fx.tiny_options(
        root,
        run,
        steps=30,
        batch_size=8,
        optimizer="adamwscale",
        lr=1e-2,
        warmup=5,
        eval_every=30,
        eval_rows=32,
        save_every=30,
    )
    train(opts)
    evals = [r["eval_nll"] for r in read_metrics(str(run / "metrics.jsonl")) if "eval_nll" in r]
    from c4forge.trainers.export import load_model

    shards = os.path.join(root, "shards")
    got = demo_step.heldout_nll(load_model(str(run)), shards, rows=32, batch_rows=8)
    assert got == pytest.approx(evals[-1], rel=1e-5)
    pair = demo_step.heldout_nll_pair(str(run), shards)
    assert pair["random"] > pair["pretrained"] + 0.5


def test_the_closing_lines_claim_only_what_the_budget_shows():
    text = demo_step.summary_text(
        {"pretrained": 0.61, "random": 0.609}, {"pretrained": 5.03, "random": 8.2}
    )
    assert "pretrained 5.030 vs 8.200" in text and "random init" in text
    assert "+10.1 points over the majority class" in text
    assert "benchmarks/RESULTS.md §8" in text
    assert "pretrained 61.0 % vs random" not in text  # the old comparison line is gone
