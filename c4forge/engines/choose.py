"""Which engine runs a stage (``--engine auto|local|spark|beam``), and building it.

One policy for every stage (``clean``, ``shards``), so the same flags mean the same engine: a
Beam runner or Beam options given → Beam; otherwise (a run on this machine) the local engine,
whatever the input size: it uses less CPU and memory than Beam's DirectRunner even on small
inputs (benchmarks/RESULTS.md §15, "Small inputs").
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from c4forge.errors import ConfigError

# The engines, one line each: the ``--engine`` name → ``"module:Class"``, imported only when
# chosen (``--help`` and the other engines never import Beam, PySpark or the worker pool); a
# class is built as ``Class(job)``.
ENGINE_CLASSES: dict[str, str] = {
    "beam": "c4forge.engines.beam:BeamEngine",
    "spark": "c4forge.engines.spark:SparkEngine",
    "local": "c4forge.engines.local:LocalEngine",
}
ENGINES = ("auto", *ENGINE_CLASSES)  # the --engine choices


class EngineRequest(Protocol):
    """What building an engine reads of a command's request (``CleanJob`` and ``ShardsJob``
    are such requests): the engine, its workers and runner or master, Beam's own options, and
    the output folder (Beam hands collected items to the driver there)."""

    engine: str
    runner: str | None
    workers: int | None
    master: str | None
    passthrough: tuple[str, ...]
    output: str | None  # set by the time an engine is built (ShardsJob checks it)


def check_runner(engine: str, runner: str | None) -> None:
    """``--runner`` names a Beam runner: with ``--engine local`` or ``spark`` it would be
    ignored (the job would run on this machine, or on Spark, not where the user asked), so it
    is refused before any work."""
    if runner and engine in ("local", "spark"):
        where = "on this machine" if engine == "local" else "on Spark (--master)"
        raise ConfigError(
            f"--runner {runner} is a Beam runner, but --engine {engine} runs the job {where}; "
            "use --engine beam (or auto) with --runner, or drop --runner"
        )


def choose(
    engine: str, runner: str | None, passthrough: tuple[str, ...], size: int
) -> tuple[str, str]:
    """``(engine, why)``: ``engine`` as given, or what ``auto`` picks for ``size`` input bytes
    (``why`` is empty unless ``auto`` decided, for the first log line)."""
    check_runner(engine, runner)
    if engine != "auto":
        return engine, ""
    if runner or passthrough:  # a runner named (the DirectRunner too) or Beam options
        return "beam", "auto: a Beam runner or Beam options given"
    return "local", f"auto: {size / 1e6:,.1f} MB of input on this machine"


def make_engine(job: EngineRequest, spark_context: Any = None) -> Any:
    """The engine ``job.engine`` names (``auto`` already resolved by ``choose``);
    ``spark_context``: a running Spark context for the Spark engine to use."""
    module, attr = ENGINE_CLASSES[job.engine].split(":")
    engine_class = getattr(importlib.import_module(module), attr)
    if spark_context is not None:
        return engine_class(job, spark_context=spark_context)  # the Spark engine's keyword
    return engine_class(job)
