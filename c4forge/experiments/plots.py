"""The experiment's two figures: loss curves per arm (mean over seeds) and a scores chart.

Both are drawn from what results.json records and the run folders' metrics.jsonl files, with
matplotlib's Agg backend, and written atomically (temp + rename) like the trainers' curve.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from c4forge.trainers.metrics import read_metrics


def _save(fig: Any, png_path: str) -> str:
    import matplotlib.pyplot as plt

    tmp = png_path + f".tmp-{os.getpid()}.png"
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, png_path)
    return png_path


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _mean_curve(paths: list[str], key: str) -> tuple[np.ndarray, np.ndarray]:
    """Steps every seed logged, and the mean over seeds of ``key`` there."""
    per_seed = []
    for path in paths:
        per_seed.append({r["step"]: r[key] for r in read_metrics(path) if key in r})
    steps = sorted(set.intersection(*(set(s) for s in per_seed))) if per_seed else []
    values = [np.mean([s[k] for s in per_seed]) for k in steps]
    return np.array(steps), np.array(values)


def plot_loss_curves(root: str, res: dict[str, Any], png_path: str) -> str:
    """Train loss (line) and held-out NLL (markers) per arm, averaged over seeds."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=110)
    colors = plt.get_cmap("tab10")
    for i, (name, arm) in enumerate(res["arms"].items()):
        per_seed = arm["held_out_loss"]["per_seed"]
        paths = [os.path.join(root, v["source"]) for v in per_seed]
        color = colors(i % 10)
        # a mixture arm: its own corpus's train loss and held-out NLL (the table's number)
        key = per_seed[0].get("key", "eval_nll") if per_seed else "eval_nll"
        steps, loss = _mean_curve(paths, key.replace("eval_nll", "loss", 1))
        if len(steps):
            ax.plot(steps, loss, color=color, linewidth=1.2, label=f"{name} train")
        steps, nll = _mean_curve(paths, key)
        if len(steps):
            ax.plot(
                steps,
                nll,
                "o--",
                color=color,
                markersize=4,
                linewidth=0.8,
                label=f"{name} held-out",
            )
    ax.set_xlabel("step")
    ax.set_ylabel("nats per target token")
    ax.set_title(f"{res['name']}: pretraining loss (mean over {len(res['seeds'])} seeds)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return _save(fig, png_path)


def plot_scores(res: dict[str, Any], png_path: str) -> str:
    """Per task, one bar per arm (pretrained, ± std over seeds) and its random start (dot)."""
    plt = _pyplot()
    tasks, arms = res["tasks"], list(res["arms"])
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(arms) * len(tasks)), 4.5), dpi=110)
    width = 0.8 / max(1, len(arms))
    colors = plt.get_cmap("tab10")
    for i, name in enumerate(arms):
        t = res["arms"][name]["tasks"]
        x = np.arange(len(tasks)) + (i - (len(arms) - 1) / 2) * width
        pre = [t.get(k, {}).get("pretrained", {"mean": np.nan, "std": 0}) for k in tasks]
        ax.bar(
            x,
            [p["mean"] for p in pre],
            width,
            yerr=[p["std"] for p in pre],
            color=colors(i % 10),
            label=name,
            capsize=2,
        )
        rnd = [t.get(k, {}).get("random", {}).get("mean", np.nan) for k in tasks]
        ax.plot(x, rnd, "k_", markersize=10, markeredgewidth=2)
    ax.plot([], [], "k_", markersize=10, markeredgewidth=2, label="random start")
    ax.set_xticks(np.arange(len(tasks)), tasks)
    ax.set_ylabel("dev score (points)")
    ax.set_title(f"{res['name']}: fine-tuned scores (mean ± std over seeds)")
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    return _save(fig, png_path)
