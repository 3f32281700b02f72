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

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import c4forge
from c4forge.errors import C4ForgeError

LOCAL_RUNNERS = {None, "", "DirectRunner", "FnApiRunner"}


@dataclass
class RunnerChoice:
    runner: Any  # a runner instance, or None to let Beam resolve --runner
    options: Any  # apache_beam.options.pipeline_options.PipelineOptions
    description: str  # for the log and summary, e.g. "FnApiRunner (2 worker processes)"
    local: bool  # True when workers run on this machine (the DirectRunner case)


# Log lines of Beam 2.77 that say nothing about a local c4forge job:
# - "apitools not found": import-time warning of Beam without the GCP extras;
# - "Discarding unparseable args: ['--direct_runner_use_stacked_bundle', …]": every portable
#   run re-parses its own encoded defaults and cannot read back two store_false flags;
# - worker start-up lines (semi-persistent directory, logging handler).
BEAM_NOISE = (
    "apitools not found",
    "--direct_runner_use_stacked_bundle",
    "No semi_persistent_directory found",
    "Logging handler created",
)
NOISY_LOGGERS = (
    "",  # root
    "apache_beam.options.pipeline_options",
    "apache_beam.runners.portability.local_job_service",
    "apache_beam.runners.worker.sdk_worker_main",
    "apache_beam.runners.common",
    "apache_beam.runners.worker.sdk_worker",
)


class _DropBeamNoise(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        if any(n in msg for n in BEAM_NOISE):
            return False
        # A c4forge user error (bad input file) raised inside a DoFn: Beam logs it with a
        # worker traceback; the CLI prints it once, cleanly (c4forge.engines.errors.user_error_from).
        exc = record.exc_info[1] if record.exc_info else None
        return not (isinstance(exc, C4ForgeError) or "c4forge.errors." in msg)


def quiet_beam_logging() -> None:
    """Filter ``BEAM_NOISE`` from the loggers that emit it; call before ``import apache_beam``
    (driver and worker processes); idempotent. Other warnings and errors still show."""
    for name in NOISY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropBeamNoise) for f in logger.filters):
            logger.addFilter(_DropBeamNoise())


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
    quiet_beam_logging()
    from apache_beam.options.pipeline_options import (
        DirectOptions,
        PipelineOptions,
        StandardOptions,
        WorkerOptions,
    )

    argv = list(extra)
    if runner not in LOCAL_RUNNERS:
        argv.append(f"--runner={runner}")
        options = PipelineOptions(argv)
        return RunnerChoice(None, options, runner or "", local=False)

    options = PipelineOptions(argv)
    direct = options.view_as(DirectOptions)
    # --workers wins; else a --direct_num_workers passed through; else every core.
    passed = direct.direct_num_workers if "--direct_num_workers" in " ".join(argv) else None
    num_workers = workers or passed or os.cpu_count() or 1
    if num_workers < 1:
        from c4forge.errors import ConfigError

        raise ConfigError(f"--workers must be >= 1, got {workers}")
    direct.direct_num_workers = num_workers
    # One process per worker: Punkt and langdetect are pure Python, threads would share the GIL.
    # With a single worker, in-process execution avoids starting a gRPC subprocess (same
    # output: tests compare 1 in-process worker with 2 processes byte for byte).
    direct.direct_running_mode = "multi_processing" if num_workers > 1 else "in_memory"
    harness = options.view_as(WorkerOptions)  # Beam 2.77 keeps the harness flags here
    if "--default_sdk_harness_log_level" not in " ".join(argv):
        harness.default_sdk_harness_log_level = "WARNING"  # workers log every channel at INFO
    options.view_as(StandardOptions).runner = None
    if num_workers > 1:
        _ensure_workers_can_import_c4forge()

    return RunnerChoice(_local_runner(options, num_workers), options, _describe(num_workers), True)


def _describe(num_workers: int) -> str:
    if num_workers > 1:
        return f"DirectRunner/FnApiRunner ({num_workers} worker processes)"
    return "DirectRunner/FnApiRunner (1 in-process worker)"


@contextlib.contextmanager
def no_data_flush_timer() -> Iterator[None]:
    """Beam's runner-side data channels without their flush timer, for the ``with`` block.

    Why: the multi-process FnApiRunner (Beam 2.77) builds its gRPC data server with
    ``worker_handlers.DATA_BUFFER_TIME_LIMIT_MS`` (1,000 ms), so every runner → worker stream
    is a ``data_plane.TimeBasedBufferingClosableOutputStream``. Its timer thread flushes with
    ``callback(get())`` then ``_clear()`` under a lock that ``write()`` does not take; when the
    send queue is full (a slow worker), the callback blocks, the runner keeps writing, and
    ``_clear()`` wipes what was written meanwhile: whole elements lost, no error. With the
    limit at 0 Beam builds size-buffered streams (flushed by their writer, on close), which
    have no second thread. The limit is a module constant read when a run starts its servers,
    so it is set for the run and put back after."""
    from apache_beam.runners.portability.fn_api_runner import worker_handlers

    before = worker_handlers.DATA_BUFFER_TIME_LIMIT_MS
    worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = 0
    try:
        yield
    finally:
        worker_handlers.DATA_BUFFER_TIME_LIMIT_MS = before


def _local_runner(options: Any, num_workers: int) -> Any:
    """Beam's FnApiRunner, built as SwitchingDirectRunner builds it (Beam 2.77,
    runners/direct/direct_runner.py) minus the Prism attempt before it; worker processes start
    through ``c4forge.engines.beam_worker`` (Beam's worker main, minus its start-up chatter)."""
    from apache_beam.options.pipeline_options import DirectOptions
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle
    from apache_beam.transforms import environments

    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    if num_workers == 1:
        return fn_runner.FnApiRunner(provision_info=provision)

    class _C4ForgeFnApiRunner(fn_runner.FnApiRunner):
        def run_pipeline(self, pipeline, options):  # noqa: ANN001, ANN202 - Beam's signature
            # FnApiRunner.run_pipeline replaces the worker command for "multi_processing";
            # any other mode keeps the environment given to the constructor (ours). The
            # workers still see "multi_processing": their options come from `provision`.
            direct = options.view_as(DirectOptions)
            mode, direct.direct_running_mode = direct.direct_running_mode, "c4forge_processes"
            try:
                with no_data_flush_timer():
                    return super().run_pipeline(pipeline, options)
            finally:
                direct.direct_running_mode = mode

    command = f"{sys.executable} -m c4forge.engines.beam_worker"
    env = environments.SubprocessSDKEnvironment.from_command_string(command_string=command)
    return _C4ForgeFnApiRunner(default_environment=env, provision_info=provision)
