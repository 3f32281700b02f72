"""Collect → plot → render → write the report folder (every file atomically)."""

from __future__ import annotations

import os

from c4forge.formats.clean_docs import STATS_NAME
from c4forge.io import ownership, storage

HTML_NAME = "index.html"
JSON_NAME = "report.json"
README_NAME = "README.md"


@ownership.owns_output("report", lambda clean_dir, out_dir, **_: out_dir)
def write_report(
    clean_dir: str,
    out_dir: str,
    *,
    vocab: str | None = None,
    shards: str | None = None,
    contamination: str | None = None,
    title: str | None = None,
    progress: bool = False,
) -> str:
    """Write the datasheet of ``clean_dir`` into ``out_dir``; returns the HTML page's path."""
    from c4forge.report.collect import collect
    from c4forge.report.plots import figures
    from c4forge.report.render import render_html, render_readme

    storage.check_output_folder(out_dir)  # before reading the corpus
    report, _ = collect(clean_dir, vocab, shards, contamination, progress)
    stats = storage.read_json(os.path.join(clean_dir, STATS_NAME))
    pngs = figures(report, stats)
    name = title or f"{os.path.basename(os.path.normpath(os.path.abspath(clean_dir)))} datasheet"
    report["figures"] = sorted(pngs)
    os.makedirs(out_dir, exist_ok=True)
    for fname, data in pngs.items():
        storage.write_bytes(os.path.join(out_dir, fname), data)
    storage.atomic_write_text(os.path.join(out_dir, JSON_NAME), storage.dumps_pretty(report))
    storage.atomic_write_text(os.path.join(out_dir, README_NAME), render_readme(report, name))
    page = os.path.join(out_dir, HTML_NAME)
    storage.atomic_write_text(page, render_html(report, pngs, name))
    return page
