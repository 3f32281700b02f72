"""Pictures of a GLUE comparison: task scores per head/init with error bars (glue.png), and the
HIRE contribution scores as HIRE's Figure 3 — a heat map of tasks × layers (hire_scores.png)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def _save(fig, path: str) -> str:
    import matplotlib.pyplot as plt

    tmp = path + f".tmp-{os.getpid()}.png"
    fig.tight_layout()
    fig.savefig(tmp)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def plot_glue(rows: list[dict[str, Any]], tasks: list[str], path: str) -> str | None:
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [*tasks, "GLUE"]
    x = np.arange(len(labels))
    width = 0.8 / len(rows)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.1 * len(labels) + 2), 4.2), dpi=110)
    for i, row in enumerate(rows):
        entries = [row["tasks"][t] for t in tasks] + [row["glue"]]
        means = [100 * e["mean"] for e in entries]
        stds = [100 * e["std"] for e in entries]
        ax.bar(
            x + (i - (len(rows) - 1) / 2) * width,
            means,
            width,
            yerr=stds,
            capsize=3,
            label=f"{row['head']} / {row['init']}",
        )
    ax.set_xticks(x, labels)
    ax.set_ylabel("task score × 100 (mean ± std over seeds)")
    ax.axhline(0, color="black", linewidth=0.6)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("c4forge glue")
    return _save(fig, path)


def plot_hire_scores(rows: list[dict[str, Any]], tasks: list[str], path: str) -> str | None:
    """One heat map per HIRE row (init): rows = tasks, columns = H_0 … H_L."""
    hire = [r for r in rows if r["head"] == "hire"]
    if not hire:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(hire), figsize=(4.5 * len(hire), 0.5 * len(tasks) + 2), dpi=110, squeeze=False
    )
    for ax, row in zip(axes[0], hire):
        grid = np.array([row["tasks"][t]["hire_scores"] for t in tasks])
        im = ax.imshow(
            grid, cmap="Blues", vmin=0.0, vmax=max(float(grid.max()), 1e-6), aspect="auto"
        )
        ax.set_yticks(range(len(tasks)), tasks)
        ax.set_xticks(range(grid.shape[1]), [f"H{i}" for i in range(grid.shape[1])])
        ax.set_xlabel("hidden state (H0 = embeddings)")
        ax.set_title(f"HIRE contribution scores ({row['init']})")
        for (i, j), v in np.ndenumerate(grid):
            dark = v > 0.6 * grid.max()
            ax.text(
                j,
                i,
                f"{v:.2f}",
                ha="center",
                va="center",
                fontsize=7,
                color="white" if dark else "black",
            )
        fig.colorbar(im, ax=ax, fraction=0.046)
    return _save(fig, path)
