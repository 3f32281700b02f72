"""`--report`: the filter funnel of a clean run as a PNG (matplotlib, Agg: no display needed).

One centred horizontal bar per stage (width = pages leaving it), so the picture narrows like a
funnel; the right margin names the main drop reasons of each stage. Built from the counters in
stats.json with the text summary's ``funnel`` (same rows, same titles, near-dedup included when
it ran), along the plan recorded in its ``config``.
"""

from __future__ import annotations

import io
from collections.abc import Mapping

from c4forge.clean.summary import accounts_of, funnel, run_description


def _note(prev: int, value: int, drops: Mapping[str, int]) -> str:
    """Right-margin text of a row: pages dropped, share, the three biggest reasons."""
    dropped = prev - value
    if not dropped:
        return "nothing dropped"
    text = f"−{dropped:,} ({100 * dropped / prev:.1f}%)"
    top3 = sorted(drops.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
    if top3:
        text += ": " + ", ".join(f"{k} {v:,}" for k, v in top3)
    return text


def render_funnel_png(stats: Mapping) -> bytes:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgb

    config = stats["config"]
    counters = stats["counters"]
    steps = funnel(counters, config.get("input_format", "auto"), accounts_of(config))
    labels = ["records read"] + [s.title for s in steps]
    values = [steps[0].pages_in if steps else 0] + [s.pages_out for s in steps]
    notes = [""] + [_note(s.pages_in, s.pages_out, s.drops) for s in steps]
    split = counters.get("split", {})
    top = max(values) if values and max(values) > 0 else 1

    fig, ax = plt.subplots(figsize=(11, 0.55 * len(labels) + 1.6), dpi=110)
    ys = list(range(len(labels)))[::-1]
    colors = plt.cm.viridis([0.15 + 0.7 * i / max(1, len(labels) - 1) for i in range(len(labels))])
    for y, v, color in zip(ys, values, colors):
        w = max(v, top * 0.004) if v else 0  # a non-empty stage stays visible at any scale
        ax.barh(y, w, left=(top - w) / 2, height=0.7, color=color)
        # White on a dark bar wide enough to hold the number, dark text otherwise (a narrow bar
        # leaves the number on the white background).
        r, g, b = to_rgb(color)
        dark = 0.299 * r + 0.587 * g + 0.114 * b < 0.5
        ax.text(
            top / 2,
            y,
            f"{v:,}",
            ha="center",
            va="center",
            color="white" if dark and v >= 0.12 * top else "#222222",
            fontsize=9,
            fontweight="bold",
        )
    for y, note in zip(ys, notes):
        if note:
            color = "#888888" if note == "nothing dropped" else "#333333"
            ax.text(top * 1.03, y, note, va="center", fontsize=8, color=color)
    ax.set_yticks(ys)
    ax.set_yticklabels(labels, fontsize=9)
    ax.set_xlim(0, top * 2.1)
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(
        f"c4forge clean funnel: {values[-1]:,} documents written "
        f"(train {split.get('train', 0):,}, validation {split.get('validation', 0):,})\n"
        f"{run_description(config, counters)}",
        fontsize=10,
        loc="left",
    )
    fig.tight_layout()
    buf = io.BytesIO()
    # bbox_inches="tight" grows the canvas to every label and note, so long reason lists are
    # not cut at the edge. No timestamp in the metadata: same counters give the same bytes.
    fig.savefig(
        buf, format="png", metadata={"Software": None}, bbox_inches="tight", pad_inches=0.15
    )
    plt.close(fig)
    return buf.getvalue()


def write_funnel_png(stats: Mapping, path: str) -> str:
    from c4forge.io.storage import atomic_writer

    data = render_funnel_png(stats)
    with atomic_writer(path) as f:
        f.write(data)
    return path
