"""Which engine runs a stage (``--engine auto|local|spark|beam``), and building it.

One policy for every stage (``clean``, ``shards``), so the same flags mean the same engine: a
Beam runner or Beam options given → Beam; otherwise a local run goes to the local engine when
its input is at least ``AUTO_LOCAL_BYTES``, else to Beam's DirectRunner. The job object only
needs ``engine``, ``runner``, ``workers``, ``master`` and ``passthrough`` (``CleanJob`` has
them; ``ShardsJob`` too).
"""

from __future__ import annotations

from typing import Any

ENGINES = ("auto", "beam", "spark", "local")
# --engine auto: a local run on at least this much input (compressed bytes) runs on the local
# engine, which spills its shuffles to disk; smaller ones on Beam's DirectRunner.
AUTO_LOCAL_BYTES = 64 << 20


def choose(engine: str, runner: str | None, passthrough: tuple[str, ...], size: int) -> tuple[str, str]:
    """``(engine, why)``: ``engine`` as given, or what ``auto`` picks for ``size`` input bytes
    (``why`` is empty unless ``auto`` decided, for the first log line)."""
    from c4forge.engines.beam_options import LOCAL_RUNNERS

    if engine != "auto":
        return engine, ""
    if runner not in LOCAL_RUNNERS or passthrough:
        return "beam", "auto: a Beam runner or Beam options given"
    limit = f"{AUTO_LOCAL_BYTES >> 20} MiB"
    if size >= AUTO_LOCAL_BYTES:
        return "local", f"auto: {size / 1e6:,.0f} MB of input ≥ {limit}"
    return "beam", f"auto: {size / 1e6:,.1f} MB of input < {limit}"


def make_engine(job: Any, spark_context: Any = None) -> Any:
    """The engine ``job.engine`` names (``auto`` already resolved by ``choose``)."""
    if job.engine == "spark":
        from c4forge.engines.spark import SparkEngine

        return SparkEngine(job, spark_context)
    if job.engine == "local":
        from c4forge.engines.local import LocalEngine

        return LocalEngine(job)
    from c4forge.engines.beam import BeamEngine

    return BeamEngine(job)
