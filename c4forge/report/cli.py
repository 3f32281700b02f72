"""`c4forge report CLEAN_DIR -o REPORT_DIR`: the corpus datasheet.

Writes `index.html` (one self-contained page: images inlined, no network), its PNGs,
`report.json` and a dataset-card `README.md` with the same numbers.
"""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "report",
        help="datasheet of a clean corpus: HTML page, PNGs, report.json, dataset-card README.md",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("clean_dir", metavar="CLEAN_DIR", help="a finished `c4forge clean` output")
    p.add_argument("--output", "-o", required=True, help="report folder")
    p.add_argument("--vocab", help="a `c4forge vocab` folder: count tokens per document")
    p.add_argument("--shards", help="a `c4forge shards` output: packing and token numbers")
    p.add_argument(
        "--contamination",
        metavar="REPORT",
        help="a `c4forge contamination` report (contamination.json or its folder)",
    )
    p.add_argument("--title", help="page title (default: the clean folder's name)")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    return p


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.report.write import write_report

    path = write_report(
        args.clean_dir,
        args.output,
        vocab=args.vocab,
        shards=args.shards,
        contamination=args.contamination,
        title=args.title,
        progress=not args.quiet,
    )
    print(f"c4forge report: {path}")
    return 0
