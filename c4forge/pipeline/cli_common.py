"""Arguments every Beam-job subcommand shares (argparse only: `--help` must stay instant)."""

from __future__ import annotations

import argparse


def add_runner_args(p: argparse.ArgumentParser) -> None:
    """--workers and --runner; any other Beam option is passed through unrecognised."""
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="DirectRunner worker processes (default: all cores)",
    )
    p.add_argument(
        "--runner",
        default=None,
        help="Beam runner (DirectRunner default; DataflowRunner, FlinkRunner, SparkRunner)",
    )
