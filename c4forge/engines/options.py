"""Options every Beam-job config shares (argparse only: `--help` must stay instant).

Field factories for ``c4forge.cliconfig`` dataclasses (``CleanJob``, ``ShardsJob``): each
call returns a new field with the same flag, so both commands declare ``--workers`` and
``--runner`` once, here. Any other Beam option is passed through unrecognised.
"""

from __future__ import annotations

from typing import Any

from c4forge.cliconfig import option


def workers_option() -> Any:
    """``--workers N``: processes on this machine, whichever engine (None: all cores)."""
    return option(
        "--workers",
        default=None,
        type=int,
        help="worker processes on this machine: the local engine's pool, Spark's local[N], "
        "the Beam DirectRunner's workers (default: all cores; a cluster sizes its own)",
    )


def runner_option() -> Any:
    """``--runner NAME``: the Beam runner (None: the DirectRunner of ``--engine beam``)."""
    return option(
        "--runner",
        default=None,
        help="Beam runner of --engine beam: DataflowRunner, FlinkRunner, SparkRunner … (naming "
        "one picks the Beam engine; default: Beam's DirectRunner on this machine)",
    )


def engine_option() -> Any:
    """``--engine auto|beam|spark|local``: which engine runs the stage (``engines.choose``)."""
    from c4forge.engines.choose import ENGINES

    return option(
        "--engine",
        default="auto",
        choices=list(ENGINES),
        help="auto (default): local for a run on this machine, beam when a Beam runner or Beam "
        "options are given; beam: Apache Beam (its DirectRunner, or --runner); spark: native "
        "PySpark (no Beam job server needed); local: a worker pool on this machine, shuffles "
        "spilled to disk",
    )


def master_option() -> Any:
    """``--master URL``: the Spark master of ``--engine spark``."""
    return option(
        "--master",
        default=None,
        help="Spark master URL for --engine spark (default local[*]; a local master without F "
        "in local[N,F] retries a failed task up to 4 attempts, as a cluster does)",
    )
