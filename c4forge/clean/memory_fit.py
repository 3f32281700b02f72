"""Whether a clean run fits an engine that holds every collection in memory (Beam's
DirectRunner, ``Engine.holds_collections``): refused before any work, with a one-line error.

The fit is clean's, not the engine's: it is measured per byte of crawl input on the clean plan.
Peak PSS of the process tree with 2 workers (``benchmarks/scale.py``): 2.50 GiB for 659 MB of
WET.gz (250k pages), 5.72 GiB for 2,623 MB (1M pages), a fit of 1.42 GiB + 1.76 bytes per input
byte; the check takes 1.5 GiB + 2.5 bytes per byte, 21-33 % above the measured points
(benchmarks/RESULTS.md has the runs).
"""

from __future__ import annotations

from c4forge.engines.base import Engine
from c4forge.errors import ConfigError
from c4forge.proctree import available_memory

DIRECT_MEMORY_PER_INPUT_BYTE = 2.5
DIRECT_MEMORY_BASE = 1536 << 20


def check_memory(engine: Engine, input_bytes: int) -> None:
    """Refuse, before any work, inputs whose run would not fit in this machine's available
    memory on an engine that holds every collection in it."""
    if not engine.holds_collections:
        return
    need = DIRECT_MEMORY_BASE + int(DIRECT_MEMORY_PER_INPUT_BYTE * input_bytes)
    have = available_memory()
    if have is not None and need > have:
        raise ConfigError(
            f"--engine beam with the DirectRunner holds every collection in memory: about "
            f"{need / 2**30:.1f} GiB for {input_bytes / 1e6:,.0f} MB of input, "
            f"{have / 2**30:.1f} GiB available; use --engine local (shuffles spill to disk) "
            "or a cluster runner (--runner DataflowRunner, FlinkRunner, SparkRunner)"
        )
