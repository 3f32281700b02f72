"""Options every Beam-job config shares (argparse only: `--help` must stay instant).

Field factories for ``c4forge.cliconfig`` dataclasses (``CleanJob``, ``ShardsOptions``): each
call returns a new field with the same flag, so both commands declare ``--workers`` and
``--runner`` once, here. Any other Beam option is passed through unrecognised.
"""

from __future__ import annotations

from typing import Any

from c4forge.cliconfig import option


def workers_option() -> Any:
    """``--workers N``: DirectRunner worker processes (None: all cores)."""
    return option(
        "--workers",
        default=None,
        type=int,
        help="DirectRunner worker processes (default: all cores)",
    )


def runner_option() -> Any:
    """``--runner NAME``: the Beam runner (None: DirectRunner)."""
    return option(
        "--runner",
        default=None,
        help="Beam runner (DirectRunner default; DataflowRunner, FlinkRunner, SparkRunner)",
    )
