"""Throughput of every ``c4forge clean --variant`` on the benchmark corpus (benchmarks/corpus.py).

Each variant runs end to end as ``python -m c4forge clean CORPUS -o TMP --workers N --variant
V`` (``benchmarks/clean.py``'s ``run_job``: wall time, CPU seconds of the job's process tree,
peak RSS). The figure to compare is **pages per CPU-second** (input pages / CPU s), which
stays meaningful on a shared machine where wall time does not.

``webtextlike`` needs a URL list: one is written from the corpus itself (every 10th page's
URL, rewritten as OpenWebText lists them: ``http://`` + host + path, so the join has to
normalise), plus as many URLs that match no page, so both sides of the join do work.

Usage: ``python benchmarks/variants.py [--workers 1] [--variants en realnewslike …]``
"""

from __future__ import annotations

import argparse
import gzip
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]


def _load(name: str, file: str):  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(name, _HERE / file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


bench_clean = _load("c4forge_bench_clean", "clean.py")
corpus_mod = bench_clean.corpus_mod

VARIANTS = ("en", "en.noclean", "en.noblocklist", "realnewslike", "webtextlike", "multilingual")


def corpus_urls(files: list[Path]) -> list[str]:
    """The target URIs of the corpus's conversion records, in file order."""
    from warcio.archiveiterator import ArchiveIterator

    urls = []
    for path in files:
        with open(path, "rb") as f:
            for record in ArchiveIterator(f):
                if record.rec_type == "conversion":
                    urls.append(record.rec_headers.get_header("WARC-Target-URI"))
    return urls


def write_url_list(files: list[Path], folder: Path) -> Path:
    """A gzip URL list: every 10th corpus URL as ``http://host/path`` plus unmatched URLs."""
    from urllib.parse import urlsplit

    lines = []
    for i, url in enumerate(corpus_urls(files)):
        if i % 10 == 0:
            parts = urlsplit(url)
            lines.append(f"http://{parts.netloc}{parts.path}")
            lines.append(f"http://unlisted-{i}.example.org/story/{i}")
    path = folder / "openwebtext-urls.txt.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--pages", type=int, default=20_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--engine", choices=["beam", "spark"], default="beam")
    ap.add_argument("--variants", nargs="*", default=list(VARIANTS), choices=VARIANTS)
    args = ap.parse_args(argv)

    out = corpus_mod.build(
        corpus_mod.default_out(args.pages, args.seed), args.pages, args.seed, 20, []
    )
    files = corpus_mod.corpus_files(out)
    text_mb = json.loads((out / "manifest.json").read_text())["text_bytes"] / 1e6
    print(
        f"corpus: {out} ({len(files)} files, {text_mb:.1f} MB text); host: {os.cpu_count()} CPUs; "
        f"engine {args.engine}, --workers {args.workers}"
    )
    with tempfile.TemporaryDirectory(prefix="c4forge-bench-variants-") as tmp:
        url_list = write_url_list(files, Path(tmp))
        rows = []
        for variant in args.variants:
            extra = ["--variant", variant, "--engine", args.engine]
            if variant == "webtextlike":
                extra += ["--url-list", str(url_list)]
            r = bench_clean.run_job(out, args.workers, "as-is", extra)
            rows.append((variant, r))
            print(
                f"--variant {variant:<15} {r['pages']:,} pages -> {r['docs_out']:,} docs; "
                f"wall {r['wall']:.1f} s ({r['pages'] / r['wall'] / args.workers:,.0f} pages/s per "
                f"core); CPU {r['cpu']:.1f} s -> {r['pages'] / r['cpu']:,.0f} pages per CPU-second; "
                f"peak RSS {r['peak_rss'] / 2**20:,.0f} MiB",
                flush=True,
            )
    print("\n| variant | docs out | CPU s | pages per CPU-second | wall s |")
    print("|---|---|---|---|---|")
    for variant, r in rows:
        print(
            f"| `{variant}` | {r['docs_out']:,} | {r['cpu']:.1f} | {r['pages'] / r['cpu']:,.0f} "
            f"| {r['wall']:.1f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
