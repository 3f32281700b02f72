"""Statistics of an experiment table: mean ± std over seeds and a paired bootstrap against the base.

The paired bootstrap resamples seeds and dev examples together: one resample draws seeds with
replacement (seed ``s`` of an arm is paired with seed ``s`` of the base: same initialisation
seed, same fine-tuning seed) and dev examples with replacement (the same rows for both arms),
recomputes the task metric of every drawn seed on the drawn rows for both arms, and averages the
differences. The 2.5 and 97.5 percentiles of those differences are the 95 % interval; the
two-sided p-value is twice the smaller tail mass at zero. The generator is seeded, so a table
recomputes to the same digits.

The metrics are recomputed vectorised over resamples (accuracy, F1 with invalid outputs turned
wrong, Matthews correlation in its multi-class form so an invalid class −1 counts as its own
class, Pearson, Spearman) and agree with ``c4forge.finetune.metrics`` on the full set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

LEVEL = 0.95


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value)."""
    a = np.asarray(values, dtype=np.float64)
    return float(a.mean()), float(a.std(ddof=1)) if len(a) > 1 else 0.0


def _mcc(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Multi-class Matthews correlation per row (sklearn's formula; 0 when undefined)."""
    classes = np.union1d(np.unique(y), np.unique(p))
    s = y.shape[1]
    c = (y == p).sum(1).astype(np.float64)
    pt = np.zeros(y.shape[0])
    pp = np.zeros(y.shape[0])
    tt = np.zeros(y.shape[0])
    for k in classes:
        tk = (y == k).sum(1).astype(np.float64)
        pk = (p == k).sum(1).astype(np.float64)
        pt += pk * tk
        pp += pk * pk
        tt += tk * tk
    denom = np.sqrt((s * s - pp) * (s * s - tt))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (c * s - pt) / denom
    return np.where(denom > 0, out, 0.0)


def _pearson(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    yc = y - y.mean(1, keepdims=True)
    pc = p - p.mean(1, keepdims=True)
    denom = np.sqrt((yc * yc).sum(1) * (pc * pc).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        out = (yc * pc).sum(1) / denom
    return np.where(denom > 0, out, 0.0)


def metric_rows(name: str, y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """One metric per row of (rows × examples) label and prediction matrices."""
    if name == "accuracy":
        return (y == p).mean(1)
    if name == "f1":
        p = np.where(p < 0, 1 - y, p)
        tp = ((p == 1) & (y == 1)).sum(1)
        fp = ((p == 1) & (y != 1)).sum(1)
        fn = ((p != 1) & (y == 1)).sum(1)
        denom = 2 * tp + fp + fn
        return np.where(denom > 0, 2 * tp / np.maximum(denom, 1), 0.0)
    if name == "matthews_corrcoef":
        return _mcc(y, p)
    if name == "pearson":
        return _pearson(y.astype(np.float64), p.astype(np.float64))
    if name == "spearman":
        from scipy.stats import rankdata

        return _pearson(rankdata(y, axis=1), rankdata(p, axis=1))
    raise ValueError(f"no vectorised form of metric {name!r}")


def task_score_rows(metrics: Sequence[str], y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """The task score (mean of its metrics) per row."""
    return np.mean([metric_rows(m, y, p) for m in metrics], axis=0)


def paired_bootstrap(
    metrics: Sequence[str],
    splits: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]],
    resamples: int = 1000,
    seed: int = 0,
) -> dict[str, float]:
    """Difference arm − base of the task score, averaged over seeds, with its bootstrap interval.

    ``splits``: per dev split (MNLI has two), ``(labels, arm, base)`` with labels
    (examples,) and arm / base (seeds × examples) predictions, row ``s`` of both from the same
    seed. The task score is the mean over splits of the mean of ``metrics``."""
    n_seeds = splits[0][1].shape[0]
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, n_seeds, size=(resamples, n_seeds))
    diffs = np.zeros(resamples)
    observed = 0.0
    pick = np.arange(resamples)[:, None]
    for labels, arm, base in splits:
        rows = rng.integers(0, len(labels), size=(resamples, len(labels)))
        y = labels[rows]
        for j in range(n_seeds):
            a = arm[seeds[:, j]][pick, rows]
            b = base[seeds[:, j]][pick, rows]
            diffs += task_score_rows(metrics, y, a) - task_score_rows(metrics, y, b)
        full_y = np.broadcast_to(labels, arm.shape)
        observed += float(
            np.mean(task_score_rows(metrics, full_y, arm) - task_score_rows(metrics, full_y, base))
        )
    diffs /= n_seeds * len(splits)
    return _summary(observed / len(splits), diffs)


def paired_bootstrap_seeds(
    arm: Sequence[float], base: Sequence[float], resamples: int = 1000, seed: int = 0
) -> dict[str, float]:
    """The same for one number per seed (held-out loss): seeds resampled, pairs kept."""
    d = np.asarray(arm, dtype=np.float64) - np.asarray(base, dtype=np.float64)
    rng = np.random.default_rng(seed)
    draws = d[rng.integers(0, len(d), size=(resamples, len(d)))].mean(1)
    return _summary(float(d.mean()), draws)


def _summary(observed: float, draws: np.ndarray) -> dict[str, float]:
    lo, hi = np.quantile(draws, [(1 - LEVEL) / 2, 1 - (1 - LEVEL) / 2])
    p = min(1.0, 2 * min(float(np.mean(draws <= 0)), float(np.mean(draws >= 0))))
    return {"difference": observed, "ci_low": float(lo), "ci_high": float(hi), "p_value": p}


def digits_for(*values: float, least: int = 2, most: int = 8) -> int:
    """Decimals that show the smallest non-zero magnitude among ``values`` with two significant
    digits (at least ``least``): a difference of 0.0004 nats reads +0.00040, not +0.00."""
    small = [abs(v) for v in values if v and math.isfinite(v)]
    if not small:
        return least
    return max(least, min(most, 1 - math.floor(math.log10(min(small)))))


def is_tested(n_seeds: int, unit: str) -> bool:
    """Per-seed numbers (held-out loss) are tested only from 3 paired seeds; task scores are
    resampled over dev examples too, so one seed already gives an interval."""
    return not (n_seeds and n_seeds < 3 and unit != "points")


def verdict(
    test: dict[str, float], what: str, unit: str, higher_is_better: bool = True, n_seeds: int = 0
) -> str:
    """A plain-words reading of a bootstrap result; without a test, the difference alone (no
    interval, no p-value)."""
    d, lo, hi = test["difference"], test["ci_low"], test["ci_high"]
    if not is_tested(n_seeds, unit):
        n = digits_for(d)
        return (
            f"{what}: {d:+.{n}f} {unit} (mean of {n_seeds} paired seed(s)); too few seeds to "
            "test, so no interval and no p-value"
        )
    n = digits_for(d, lo, hi)
    p = "p < 0.001" if test["p_value"] < 0.001 else f"p = {test['p_value']:.3f}"
    ci = f"{d:+.{n}f} {unit}, 95 % CI {lo:+.{n}f} … {hi:+.{n}f}, {p}"
    if lo <= 0 <= hi or math.isclose(lo, hi):
        return f"{what}: inside the noise ({ci})"
    better = (d > 0) == higher_is_better
    return f"{what}: {'better' if better else 'worse'} than the base ({ci})"
