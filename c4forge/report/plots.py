"""The datasheet's figures as PNG bytes (matplotlib, Agg backend: no display, no network).

Each function takes the report dict (``collect.py``), so the pictures show exactly the numbers
report.json holds. ``figures(report)`` returns ``{name: png bytes}`` for the figures that apply.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

PNG_META = {"Software": None}  # no version string in the file: same bytes for the same report


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata=PNG_META, bbox_inches="tight")
    _plt().close(fig)
    return buf.getvalue()


def histogram_png(hist: Mapping[str, list], title: str, xlabel: str) -> bytes:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.2))
    edges, counts = hist["edges"], hist["counts"]
    if counts:
        widths = [b - a for a, b in zip(edges, edges[1:])]
        ax.bar(edges[:-1], counts, width=widths, align="edge", color="#4c72b0", edgecolor="white")
        ax.set_xscale("log")
    ax.set_title(title)
    ax.set_xlabel(xlabel + " (log scale)")
    ax.set_ylabel("documents")
    return _png(fig)


def barh_png(pairs: list[list[Any]], title: str, xlabel: str, height_per: float = 0.22) -> bytes:
    plt = _plt()
    n = max(len(pairs), 1)
    fig, ax = plt.subplots(figsize=(6.4, max(1.6, 0.6 + height_per * n)))
    labels = [str(k) for k, _ in pairs][::-1]
    values = [v for _, v in pairs][::-1]
    ax.barh(range(len(values)), values, color="#55a868")
    ax.set_yticks(range(len(values)), labels, fontsize=7 if n > 20 else 9)
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    return _png(fig)


def months_png(months: list[list[Any]]) -> bytes:
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6.4, 3.0))
    labels = [m for m, _ in months]
    ax.bar(range(len(months)), [n for _, n in months], color="#c44e52")
    step = max(1, len(labels) // 12)
    ax.set_xticks(range(0, len(labels), step), labels[::step], rotation=45, ha="right", fontsize=8)
    ax.set_title("documents per crawl month (WARC-Date)")
    ax.set_ylabel("documents")
    return _png(fig)


def figures(report: Mapping[str, Any], stats: Mapping[str, Any]) -> dict[str, bytes]:
    """Every figure of the report that applies, by file name."""
    from c4forge.clean.funnel_chart import render_funnel_png

    h = report["histograms"]
    out = {
        "characters.png": histogram_png(h["characters"], "characters per document", "characters"),
        "lines.png": histogram_png(h["lines"], "lines per document", "lines"),
        "sentences.png": histogram_png(
            h["sentences"], "sentences per document (Punkt)", "sentences"
        ),
        "domains.png": barh_png(
            report["domains"]["top"], f"top {len(report['domains']['top'])} domains", "documents"
        ),
        "tlds.png": barh_png(report["tlds"]["top"], "top-level domains", "documents"),
        "months.png": months_png(report["months"]),
        "funnel.png": render_funnel_png(stats),
    }
    if "tokens" in h:
        out["tokens.png"] = histogram_png(h["tokens"], "tokens per document", "tokens")
    if report.get("languages"):
        langs = sorted(
            ([k, v["documents"]] for k, v in report["languages"].items()),
            key=lambda kv: (-kv[1], kv[0]),
        )
        out["languages.png"] = barh_png(langs, "documents per language (CLD3)", "documents")
    return out
