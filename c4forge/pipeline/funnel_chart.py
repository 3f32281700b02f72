"""`--report`: the filter funnel of a clean run as a PNG (matplotlib, Agg: no display needed).

One centred horizontal bar per stage (width = pages leaving it), so the picture narrows like a
funnel; the right margin names the main drop reasons of each stage. Built from the counters in
stats.json, like the text summary.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

from c4forge.pipeline.summary import funnel


def render_funnel_png(stats: Mapping) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = funnel(stats["counters"])
    labels = ["records read"] + [s.title for s in steps]
    values = [steps[0].pages_in if steps else 0] + [s.pages_out for s in steps]
    notes = [""] + [
        ", ".join(f"{k} {v:,}" for k, v in sorted(s.drops.items(), key=lambda kv: -kv[1])[:3])
        for s in steps
    ]
    split = stats["counters"].get("split", {})
    top = max(values) if values and max(values) > 0 else 1

    fig, ax = plt.subplots(figsize=(11, 0.55 * len(labels) + 1.6), dpi=110)
    ys = list(range(len(labels)))[::-1]
    colors = plt.cm.viridis([0.15 + 0.7 * i / max(1, len(labels) - 1) for i in range(len(labels))])
    for i, (y, v, color) in enumerate(zip(ys, values, colors)):
        ax.barh(y, v, left=(top - v) / 2, height=0.7, color=color)
        ax.text(
            top / 2,
            y,
            f"{v:,}",
            ha="center",
            va="center",
            color="white" if i < len(values) * 0.6 else "black",
            fontsize=9,
            fontweight="bold",
        )
    for y, note, prev, v in zip(ys, notes, [None, *values[:-1]], values):
        if prev:
            dropped = prev - v
            text = f"−{dropped:,} ({100 * dropped / prev:.1f}%)"
            if note:
                text += f": {note}"
            ax.text(top * 1.03, y, text, va="center", fontsize=8, color="#333333")
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_xlim(0, top * 2.1)
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(
        f"c4forge clean funnel (dedup={stats['config']['dedup']}): "
        f"{values[-1]:,} documents written "
        f"(train {split.get('train', 0):,}, validation {split.get('validation', 0):,})",
        fontsize=10,
        loc="left",
    )
    fig.tight_layout()
    buf = io.BytesIO()
    # No timestamp in the PNG metadata, so the same counters give the same bytes.
    fig.savefig(buf, format="png", metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def write_funnel_png(stats: Mapping, path: str) -> str:
    from c4forge.pipeline.clean_output import atomic_output

    data = render_funnel_png(stats)
    with atomic_output(path) as f:
        f.write(data)
    return path
