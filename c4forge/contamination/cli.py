"""`c4forge contamination CORPUS --eval glue|NAME=FILE… -o DIR`: evaluation examples found in a
corpus (argparse only; the work is in ``c4forge.contamination.report``)."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "contamination",
        help="which evaluation examples a corpus contains (word n-gram overlap)",
        description=(
            "Match every document of CORPUS (a `c4forge clean` output folder, C4 shards, "
            "JSON-lines files with a 'text' field) against evaluation sets by word n-grams and "
            "report, per benchmark and split, the contaminated examples, their share, and the "
            "documents holding each: OUTPUT/contamination.json and contamination.md."
        ),
    )
    p.add_argument("corpus", nargs="+", metavar="CORPUS", help="folders or document files")
    p.add_argument(
        "--eval",
        nargs="+",
        action="extend",
        required=True,
        metavar="SPEC",
        help="glue (the bundled GLUE dev sets) and/or NAME=FILE[#FIELD,...] (.tsv, .csv, .jsonl)",
    )
    p.add_argument("--output", "-o", required=True, help="report folder")
    p.add_argument(
        "--ngram", type=int, default=13, metavar="N", help="word n-gram size (default 13)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    return p


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.contamination import report
    from c4forge.errors import ConfigError

    if args.ngram < 1:
        raise ConfigError(f"--ngram must be >= 1, got {args.ngram}")
    files = report.corpus_files(list(args.corpus))
    rep = report.build_report(list(args.eval), args.ngram, files, progress=not args.quiet)
    jpath, mpath = report.write_report(rep, args.output)
    if not args.quiet:
        c = rep["corpus"]
        print(
            f"c4forge contamination: {c['documents']:,} documents, "
            f"{c['contaminated_documents']:,} contaminated (n = {args.ngram})"
        )
        for name, b in rep["benchmarks"].items():
            for split, s in b["splits"].items():
                print(
                    f"  {name:>10} {split:<8} {s['contaminated']:>6,} / {s['examples']:<6,} "
                    f"examples ({100 * s['share']:.2f}%)"
                )
        print(f"  wrote {jpath}\n  wrote {mpath}")
    return 0
