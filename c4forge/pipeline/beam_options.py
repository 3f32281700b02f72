"""Beam options and runner choice for c4forge jobs.

Why a module of its own: Beam 2.77's ``DirectRunner`` is a *switching* runner that first tries
the Prism runner, which downloads a Go binary from GitHub on first use. On a machine without
network (CI, air-gapped workers) that attempt fails or hangs before falling back. When no runner
is given (or ``DirectRunner`` is named) we therefore build the runner the switch would fall back
to ourselves, the portable ``FnApiRunner``, in ``multi_processing`` mode with one SDK worker
process per core. Any other runner (Dataflow, Flink, Spark, Prism if asked for by name) gets
the user's options unchanged.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

import c4forge

LOCAL_RUNNERS = {None, "", "DirectRunner", "FnApiRunner"}


@dataclass
class RunnerChoice:
    runner: Any  # a runner instance, or None to let Beam resolve --runner
    options: Any  # apache_beam.options.pipeline_options.PipelineOptions
    description: str  # for the log and summary, e.g. "FnApiRunner (2 worker processes)"
    local: bool  # True when workers run on this machine (the DirectRunner case)


def _ensure_workers_can_import_c4forge() -> None:
    """SDK worker subprocesses inherit the environment, not ``sys.path``: when c4forge is
    imported from a source tree (pytest's ``pythonpath``, no ``pip install``), put that tree on
    ``PYTHONPATH`` so ``python -m apache_beam.runners.worker.sdk_worker_main`` finds it."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(c4forge.__file__)))
    current = os.environ.get("PYTHONPATH", "")
    parts = [p for p in current.split(os.pathsep) if p]
    if root not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])


def make_runner(runner: str | None, workers: int | None, extra: list[str]) -> RunnerChoice:
    """Build PipelineOptions from the pass-through arguments and pick the runner.

    ``extra`` (unknown CLI arguments) goes to ``PipelineOptions`` unchanged, so
    ``--project``, ``--region``, ``--temp_location``, ``--setup_file`` … reach Dataflow as typed.
    """
    from apache_beam.options.pipeline_options import (
        DirectOptions,
        PipelineOptions,
        StandardOptions,
    )

    argv = list(extra)
    if runner not in LOCAL_RUNNERS:
        argv.append(f"--runner={runner}")
        options = PipelineOptions(argv)
        return RunnerChoice(None, options, runner or "", local=False)

    num_workers = workers or os.cpu_count() or 1
    if num_workers < 1:
        from c4forge.errors import ConfigError

        raise ConfigError(f"--workers must be >= 1, got {workers}")
    options = PipelineOptions(argv)
    direct = options.view_as(DirectOptions)
    direct.direct_num_workers = num_workers
    # One process per worker: Punkt and langdetect are pure Python, threads would share the GIL.
    # With a single worker, in-process execution avoids starting a gRPC subprocess.
    direct.direct_running_mode = "multi_processing" if num_workers > 1 else "in_memory"
    options.view_as(StandardOptions).runner = None
    if num_workers > 1:
        _ensure_workers_can_import_c4forge()

    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # Same construction as SwitchingDirectRunner's FnApiRunner branch (Beam 2.77,
    # runners/direct/direct_runner.py), minus the Prism attempt before it.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    runner_obj = fn_runner.FnApiRunner(provision_info=provision)
    mode = "processes" if num_workers > 1 else "in-process worker"
    desc = f"DirectRunner/FnApiRunner ({num_workers} {mode}, {sys.executable.split(os.sep)[-1]})"
    if num_workers == 1:
        desc = "DirectRunner/FnApiRunner (1 in-process worker)"
    return RunnerChoice(runner_obj, options, desc, local=True)
