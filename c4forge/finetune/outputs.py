"""What a fine-tuning run leaves behind (finetune.md §6), written atomically:

```
FT/finetune.json        the run's configuration (task, head, init, labels, lengths, recipe, files)
FT/vocab/               a copy of the vocabulary, so `c4forge evaluate FT` needs nothing else
FT/checkpoints/step-N/  the trainers' checkpoint layout (exact resume)
FT/metrics.jsonl        training loss per log step; loss_curve.png
FT/results.json         every metric, the task score, invalid outputs, HIRE scores, timings
FT/predictions.jsonl    one line per evaluated row: split, index, label, prediction (+ output)
```
"""

from __future__ import annotations

import json
import os
from typing import Any

from c4forge.errors import InputError
from c4forge.finetune.metrics import task_score
from c4forge.glue.tasks import TaskSpec, custom_spec, get_task
from c4forge.io.storage import atomic_write_text, read_json, write_json

RUN_CONFIG = "finetune.json"
RESULTS = "results.json"
PREDICTIONS = "predictions.jsonl"
VOCAB_DIR = "vocab"


def read_run_config(ft_dir: str) -> dict[str, Any]:
    path = os.path.join(ft_dir, RUN_CONFIG)
    if not os.path.isfile(path):
        raise InputError(f"{ft_dir}: not a fine-tuning output (no {RUN_CONFIG})")
    return read_json(path)


def spec_of(run_cfg: dict[str, Any]) -> TaskSpec:
    if run_cfg["task"] != "custom":
        return get_task(run_cfg["task"])
    from c4forge.glue.tasks import CustomFields

    labels = tuple(run_cfg["labels"]) if run_cfg["labels"] else None
    return custom_spec(CustomFields(**run_cfg["custom"]), labels)


def copy_vocabulary(vocab, ft_dir: str) -> str:
    """Copy the vocabulary folder (or, for a plain model given with --extra-ids, that model
    file) into ``FT/vocab``."""
    from c4forge.io import storage
    from c4forge.vocab import vocab_files

    out = os.path.join(ft_dir, VOCAB_DIR)
    src = os.path.dirname(os.path.abspath(vocab.plain_model_path))
    if vocab_files.is_vocab_dir(src):
        vocab_files.copy_vocab(src, out)
    else:
        name = os.path.basename(vocab.plain_model_path)
        vocab_files.write_files(out, ((name, storage.read_bytes(vocab.plain_model_path)),))
    return out


def write_predictions(path: str, records: list[dict[str, Any]]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in records))


def read_predictions(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def write_results(
    ft_dir: str,
    run_cfg: dict[str, Any],
    results: dict[str, Any],
    truncated: dict[str, int],
    timing: dict[str, Any],
    final_loss: float | None,
    name: str = RESULTS,
    predictions_name: str = PREDICTIONS,
) -> dict[str, Any]:
    """results.json + predictions.jsonl of the evaluated splits; returns the results dict."""
    spec = spec_of(run_cfg)
    per_split = {k: r.metrics for k, r in results.items()}
    out = {
        "task": run_cfg["task"],
        "splits": list(results),
        "metrics": per_split,
        "task_score": task_score(spec, per_split),
        "examples": {k: len(r.predictions) for k, r in results.items()},
        "invalid_outputs": {k: r.invalid for k, r in results.items()},
        "truncated_examples": truncated,
        "head": run_cfg["head"],
        "family": run_cfg["family"],
        "init": run_cfg["init"],
        "seed": run_cfg["seed"],
        "hyper_parameters": {
            k: run_cfg[k] for k in ("steps", "batch_size", "max_length", "max_train_examples")
        }
        | {"recipe": run_cfg["recipe"], "train_examples": run_cfg["train_examples"]},
        "checkpoint": run_cfg["checkpoint"],
        "checkpoint_fingerprint": run_cfg["checkpoint_fingerprint"],
        "data_files_sha256": run_cfg["data_files"],
        "final_train_loss": final_loss,
        "timing": timing,
    }
    hire = {k: r.hire_scores for k, r in results.items() if r.hire_scores}
    if hire:
        out["hire_contribution_scores"] = hire  # mean and std over the split, H_0 … H_L
    records = [rec for r in results.values() for rec in r.predictions]
    write_predictions(os.path.join(ft_dir, predictions_name), records)
    write_json(os.path.join(ft_dir, name), out)
    return out


def _pct(v: float) -> str:
    return f"{100 * v:.2f}"


def summary_text(res: dict[str, Any], ft_dir: str, command: str = "finetune") -> str:
    """The human-readable end of a fine-tuning or evaluation job."""
    lines = [
        f"c4forge {command}: {res['task']} with head {res['head']} ({res['family']}, "
        f"{res['init']} init, seed {res['seed']})"
    ]
    for split, metrics in res["metrics"].items():
        shown = ", ".join(f"{k} {_pct(v)}" for k, v in metrics.items() if isinstance(v, float))
        lines.append(
            f"  {split:15s} {shown}  ({res['examples'][split]} examples, "
            f"{res['invalid_outputs'][split]} invalid outputs)"
        )
    lines.append(f"  task score      {_pct(res['task_score'])}")
    trunc = res["truncated_examples"]
    if any(trunc.values()):
        lines.append(
            "  truncated       "
            + ", ".join(f"{k} {v}" for k, v in trunc.items())
            + f" examples cut to {res['hyper_parameters']['max_length']} tokens"
        )
    for split, s in res.get("hire_contribution_scores", {}).items():
        layers = " ".join(f"{m:.3f}" for m in s["mean"])
        lines.append(f"  HIRE scores     {split}: H_0…H_L = {layers} (sum 1)")
    t = res.get("timing") or {}
    if t.get("train_examples_per_s"):
        lines.append(
            f"  time            train {t['train_seconds']:.1f} s "
            f"({t['train_examples_per_s']:.1f} examples/s), eval {t['eval_seconds']:.1f} s"
        )
    files = f"{os.path.join(ft_dir, RESULTS)}, {PREDICTIONS}"
    if command == "finetune":
        files += ", metrics.jsonl, loss_curve.png, checkpoints/"
    lines.append(f"  outputs         {files}")
    return "\n".join(lines)
