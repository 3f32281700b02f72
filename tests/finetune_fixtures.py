"""A tiny real T5 checkpoint for the fine-tuning tests: a SentencePiece vocabulary and span-
corruption shards of the bundled C4 sample (train_fixtures), then a few real training steps."""

from __future__ import annotations

import os

from c4forge.finetune.outputs import read_predictions

GLUE = os.path.join(os.path.dirname(__file__), "data", "glue")
BUNDLED_GLUE = os.path.join(os.path.dirname(__file__), "..", "c4forge", "data", "glue")


def tiny_t5_run(root) -> str:
    from train_fixtures import build_data, tiny_options

    from c4forge.trainers.train import train

    build_data(root, docs=60)
    train(tiny_options(root, root / "run", steps=4))
    return str(root / "run")


def finetune_argv(checkpoint: str, task: str, out: str, *extra: str, **options) -> list[str]:
    argv = ["finetune", checkpoint, "--task", task, "--data", GLUE, "-o", out, "--no-progress"]
    defaults = {"steps": 4, "batch_size": 8, "max_length": 48, "device": "cpu"}
    for name, value in {**defaults, **options}.items():
        argv += [f"--{name.replace('_', '-')}", str(value)]
    return [*argv, *extra]


def predictions_by_split(ft_dir: str) -> dict[str, tuple[list, list]]:
    """(labels, predictions) per split, read back from predictions.jsonl."""
    out: dict[str, tuple[list, list]] = {}
    for rec in read_predictions(os.path.join(ft_dir, "predictions.jsonl")):
        labels, preds = out.setdefault(rec["split"], ([], []))
        labels.append(rec["label"])
        preds.append(rec["prediction"])
    return out
