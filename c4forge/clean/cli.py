"""`c4forge clean`: WET (or WARC) files → C4 documents, on Beam or natively on Spark.

Argparse only; the job itself is imported lazily in ``run`` so `--help` stays instant.
Unrecognised arguments are engine options (Beam ``PipelineOptions`` such as ``--runner
DataflowRunner --project P``, or ``--conf spark.KEY=V`` with ``--engine spark``); ``c4forge.cli``
checks them against the engine's own option set first (``c4forge.passthrough``), so a typo is an
error, not a silently different corpus.
"""

from __future__ import annotations

import argparse

from c4forge.clean.config import CleanJob
from c4forge.filters.variants import variants_help
from c4forge.pipeline.cli_common import add_runner_args


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "clean",
        help="WET files → C4 documents (Beam job; --engine spark for native PySpark)",
        description=(
            "Read Common Crawl WET files, apply the C4 rules (line/page heuristics, "
            "three-sentence-span dedup, langdetect >= 0.99, bad words) and write C4-release "
            "shards plus stats.json. Unknown options are passed to Beam unchanged, e.g. "
            "--runner DataflowRunner --project P --region R --temp_location gs://B/tmp "
            "--setup_file ./setup.py"
        ),
    )
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="WET files, globs, directories, gs:// or s3:// paths, or @paths.txt (one path per line)",
    )
    p.add_argument("--output", "-o", required=True, help="output folder (local, gs://, s3://)")
    p.add_argument(
        "--variant",
        default="en",
        metavar="NAME",
        help="corpus variant (TFDS c4 configs; default en): " + variants_help(),
    )
    p.add_argument(
        "--dedup",
        choices=["spans", "lines", "none"],
        default=None,
        help="corpus-wide dedup: paper's 3-sentence spans, TFDS lines, none; default per "
        "variant: spans for en, en.noblocklist, realnewslike, webtextlike; none for en.noclean; "
        "lines (no sentence minimum) for multilingual",
    )
    p.add_argument(
        "--url-list",
        default=None,
        metavar="FILE|GLOB",
        help="webtextlike: OpenWebText URL files (one URL per line, plain or .gz)",
    )
    p.add_argument(
        "--languages",
        default=None,
        metavar="CODES",
        help="multilingual: CLD3 codes to keep, e.g. en,de,fr (default: mC4's 107; und is "
        "always kept)",
    )
    p.add_argument(
        "--domain-list",
        default=None,
        metavar="JSON",
        help="realnewslike: a domain_to_allowed_subdomains.json to use instead of the bundled "
        "RealNews list",
    )
    p.add_argument(
        "--format",
        choices=["jsonl", "parquet"],
        default="jsonl",
        help="jsonl = c4-*.json.gz as the C4 release (default); parquet = c4-*.parquet",
    )
    p.add_argument("--language", default="en", help="target language (only 'en' today)")
    add_runner_args(p)
    p.add_argument(
        "--engine",
        choices=["auto", "beam", "spark", "local"],
        default="auto",
        help="auto (default): local for inputs of 64 MiB or more run on this machine, else beam; "
        "beam: a Beam job (DirectRunner, or --runner); spark: native PySpark (no Beam job "
        "server needed); local: in-process worker pool, shuffles spilled to disk",
    )
    p.add_argument(
        "--master", default=None, help="Spark master URL for --engine spark (default local[*])"
    )
    p.add_argument("--train-shards", default="auto", help="train shard count or 'auto'")
    p.add_argument("--validation-shards", default="auto", help="validation shard count or 'auto'")
    p.add_argument(
        "--max-record-bytes",
        type=int,
        default=64 << 20,
        help="skip (and count) WARC payloads larger than this (default 64 MiB)",
    )
    p.add_argument(
        "--input-format",
        choices=["auto", "wet", "warc"],
        default="auto",
        help="wet (conversion records) or warc (HTML responses → text); auto detects",
    )
    p.add_argument(
        "--near-dedup",
        choices=["none", "minhash"],
        default="none",
        help="MinHash-LSH near-duplicate removal after exact dedup (off by default)",
    )
    p.add_argument("--ngram", type=int, default=5, help="near-dedup word n-gram size")
    p.add_argument("--num-perm", type=int, default=128, help="near-dedup MinHash permutations")
    p.add_argument("--threshold", type=float, default=0.8, help="near-dedup Jaccard threshold")
    p.add_argument(
        "--badwords-fraction",
        type=float,
        default=None,
        help="fraction of bad-word pages dropped (default per variant: 1.0 = C4; mC4 0.999)",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="continue an interrupted run of the same job: chunks (input files) whose records "
        "under OUTPUT/_work/ are complete are not read again",
    )
    p.add_argument("--overwrite", action="store_true", help="replace a finished run in --output")
    p.add_argument(
        "--report", action="store_true", help="also write the filter funnel as funnel.png"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    p.add_argument(
        "--estimate",
        action="store_true",
        help="do not clean: run the plan on a sample of the inputs and write only "
        "OUTPUT/estimate.json (CPU per stage, shuffle bytes, memory, CPU-hours, cost)",
    )
    p.add_argument(
        "--estimate-mb", type=float, default=16.0, help="--estimate: compressed MB sampled"
    )
    p.add_argument(
        "--price-per-vcpu-hour", type=float, default=0.04, help="--estimate: USD per vCPU-hour"
    )
    return p


def job_from_args(args: argparse.Namespace, extra: list[str]) -> CleanJob:
    """The typed job (validated: a bad value is a ConfigError here, before any work)."""
    return CleanJob.from_args(args, extra)


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.clean.driver import run_clean

    job = job_from_args(args, extra)
    if getattr(args, "estimate", False):
        from c4forge.clean.estimate import run_estimate

        return run_estimate(job, args.estimate_mb, args.price_per_vcpu_hour)
    return run_clean(job)
