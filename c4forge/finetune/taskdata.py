"""The files of one fine-tuning job: the training split and the evaluation split(s) of a GLUE
task or of the user's own data, with the sha256 of every file read (recorded in results.json)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from c4forge.errors import ConfigError, InputError
from c4forge.glue.tasks import (
    CustomFields,
    Example,
    TaskSpec,
    custom_spec,
    get_task,
    load_custom,
    load_glue,
    split_file,
)
from c4forge.io.storage import sha256


@dataclass
class TaskData:
    spec: TaskSpec
    train: list[Example] | None
    evals: dict[str, list[Example]]
    files: dict[str, str]  # path -> sha256


def subset(rows: list[Example], limit: int | None) -> list[Example]:
    """``limit`` rows drawn without replacement with a fixed seed (0), kept in file order, so
    every seed and every init of a comparison trains on the same rows."""
    if limit is None or limit >= len(rows):
        return rows
    import numpy as np

    keep = np.sort(np.random.default_rng(0).choice(len(rows), size=limit, replace=False))
    return [rows[i] for i in keep]


def _custom_dev_path(train_path: str) -> str:
    folder, name = os.path.split(train_path)
    ext = os.path.splitext(name)[1]
    return os.path.join(folder, f"dev{ext}")


def load_task_data(
    task: str,
    data: str,
    *,
    train: bool = True,
    split: str | None = None,
    limit: int | None = None,
    custom: CustomFields | None = None,
    eval_data: str | None = None,
    labels: tuple[str, ...] | None = None,
) -> TaskData:
    """Train rows (``limit``: a fixed random subset of that size; none when ``train`` is False) and the evaluation splits.

    GLUE: ``data`` is the GLUE folder; evaluation uses ``split`` or the task's dev split(s).
    custom: ``data`` is the training file, ``eval_data`` the evaluation file (default: ``dev.EXT``
    beside it); when evaluating only, ``data`` is the file to evaluate and ``labels`` the label set
    of the fine-tuned model."""
    files: dict[str, str] = {}
    if task == "custom":
        if custom is None or not custom.text or not custom.label:
            raise ConfigError("--task custom needs --text-field and --label-field")
        rows = None
        if train:
            rows, labels = load_custom(custom, data)
            rows = subset(rows, limit)
            files[os.path.abspath(data)] = sha256(data)
            eval_path = eval_data or _custom_dev_path(data)
        else:
            eval_path = eval_data or data
        if not os.path.isfile(eval_path):
            raise InputError(f"{eval_path}: no evaluation file (pass --eval-data FILE)")
        evals, _ = load_custom(custom, eval_path, labels if not custom.regression else None)
        files[os.path.abspath(eval_path)] = sha256(eval_path)
        spec = custom_spec(custom, None if custom.regression else labels)
        return TaskData(spec, rows, {"dev": evals}, files)
    spec = get_task(task)
    rows = None
    if train:
        path = split_file(spec, data, "train")
        rows = subset(load_glue(spec, path), limit)
        files[os.path.abspath(path)] = sha256(path)
    evals = {}
    for name in (split,) if split else spec.dev_splits:
        path = split_file(spec, data, name)
        evals[name] = load_glue(spec, path)
        files[os.path.abspath(path)] = sha256(path)
    return TaskData(spec, rows, evals, files)
