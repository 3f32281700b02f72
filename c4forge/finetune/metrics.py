"""GLUE metrics from scikit-learn / scipy (finetune.md §3) and the task and GLUE scores.

Metrics are fractions (accuracy 0.85, not 85); tables multiply by 100. Invalid text-head outputs
(class −1) follow t5.evaluation.metrics: accuracy and Matthews correlation see −1 as a class of
its own (so it is never right); F1 first turns an invalid prediction into the wrong class
(``f1_score_with_invalid``). A correlation of constant predictions is undefined; it is reported as
0.0 with ``"constant_predictions": true`` so the task score stays a number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from c4forge.glue.tasks import TaskSpec


def _f1_with_invalid(labels: np.ndarray, preds: np.ndarray) -> float:
    from sklearn.metrics import f1_score

    preds = np.where(preds < 0, 1 - labels, preds)
    return float(f1_score(labels, preds, average="binary", pos_label=1, zero_division=0.0))


def compute_metrics(spec: TaskSpec, labels: Sequence, preds: Sequence) -> dict[str, float]:
    """Every metric of ``spec`` on one split."""
    from scipy.stats import pearsonr, spearmanr
    from sklearn.metrics import accuracy_score, matthews_corrcoef

    y = np.asarray(labels, dtype=np.float64 if spec.regression else np.int64)
    p = np.asarray(preds, dtype=np.float64 if spec.regression else np.int64)
    out: dict[str, float] = {}
    for name in spec.metrics:
        if name == "accuracy":
            out[name] = float(accuracy_score(y, p))
        elif name == "f1":
            if spec.num_labels == 2:
                out[name] = _f1_with_invalid(y, p)
            else:  # a custom multi-class task: macro F1
                from sklearn.metrics import f1_score

                out[name] = float(f1_score(y, p, average="macro", zero_division=0.0))
        elif name == "matthews_corrcoef":
            out[name] = float(matthews_corrcoef(y, p))
        elif name in ("pearson", "spearman"):
            if len(y) < 2 or np.all(p == p[0]) or np.all(y == y[0]):
                out[name] = 0.0
                out["constant_predictions"] = True
            else:
                fn = pearsonr if name == "pearson" else spearmanr
                out[name] = float(fn(y, p)[0])
        else:  # pragma: no cover - TaskSpec names only the metrics above
            raise ValueError(name)
    return out


def task_score(spec: TaskSpec, per_split: dict[str, dict[str, float]]) -> float:
    """Mean of the task's metrics; MNLI: mean over matched and mismatched of accuracy."""
    values = [m[name] for m in per_split.values() for name in spec.metrics]
    return float(np.mean(values))


def glue_score(task_scores: dict[str, float]) -> float | None:
    """Mean of the task scores (None when there are none)."""
    vals = [v for v in task_scores.values() if v is not None and not math.isnan(v)]
    return float(np.mean(vals)) if vals else None
