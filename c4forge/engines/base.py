"""The engine interface the stages (the clean plan, the shard build) are written against.

Collections are engine values (a Beam PCollection, a Spark RDD, a Python list); the plan never
looks inside them. Every function an engine calls gets a ``count(stage, reason, n=1)``
callback bound to the engine's counters (Beam metrics, a Spark accumulator, a ``CounterBag``).

Primitives (``label`` names the step: Beam needs unique labels, the others use it in logs):

* ``source(label, items, fn)``: ``fn(item, count)`` over a list of inputs (paths);
* ``flat_map(coll, label, fn)``: ``fn(item, count) -> iterable``;
* ``group(coll, label, fn)``: pairs ``(k, v)`` grouped by key, ``fn(k, values, count)``;
* ``combine(coll, label, fn)``: pairs reduced per key by ``fn(values) -> value`` (as Beam's
  callable combiners: ``min``, ``any``; applied to partial results too, so it must be
  associative and commutative);
* ``cogroup(label, left, right, fn)``: two pair collections, ``fn(k, lefts, rights, count)``;
* ``distinct(coll, label)``;
* ``broadcast(label, value)`` / ``flat_map_with(coll, label, fn, side)``: a small read-only
  value built on the driver, shipped once to the workers (Beam side input, Spark broadcast,
  the object itself locally); ``fn(item, count, value) -> iterable``;
* ``shared(coll)``: ``coll`` is about to be read twice (Spark computes it once first, so its
  counters are not added twice);
* ``loop(coll, label, body, rounds)``: ``body(engine, coll, label)`` repeated until the
  collection stops changing, at most ``rounds`` times (Beam graphs cannot loop on data: Beam
  unrolls ``rounds`` rounds, which gives the same result because a round on a fixed point
  changes nothing);
* ``drain(coll, label)``: run ``coll`` for its counters and side effects only (``execute``
  then runs what was built: Beam runs its graph there, the other engines already ran it);
* ``side_list(coll, label)``: a small collection as a side value for ``flat_map_with``;
* ``collect(coll, label)``: a small collection's items on the driver;
* ``counters()``: ``{stage: {reason: n}}`` of the finished run.

Job level: ``start`` (samples kept, partitions), ``list_inputs`` (the engine's filesystem),
``holds_collections`` (everything in this machine's memory: the job checks its inputs against
it), ``progress`` (a display per stage, described by ``stage_progress.ProgressPlan``; Beam's
from its steps' tallies, ``progress_bar``), ``samples``, ``close``. Nothing here knows a
stage: ``clean`` (``clean.passes``) and ``shards`` (``shards.stage``) are written once against
these primitives. Counters (``count(stage, reason, n)``) and dropped-item samples are generic
engine concepts; their types live in the base room ``c4forge.corpus``, below the engines.
"""

from __future__ import annotations

import contextlib
import functools
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from typing import Any

Fn = Callable[..., Any]

# The stage profile of a run (``benchmarks/scale.py``): when this variable names a file, the
# engine writes ``{"seconds": {stage: s}, "shuffle_bytes": {stage: bytes}, "out_bytes": {…}}``
# there on ``close``; a stage is the first part of a step label (``dedup`` of ``dedup/resolve``).
PROFILE_ENV = "C4FORGE_ENGINE_PROFILE"


def profile_path() -> str | None:
    """Where to write the stage profile; None (the normal case) when it is not asked for."""
    import os

    return os.environ.get(PROFILE_ENV) or None


def stage_of(label: str) -> str:
    """The stage of a step label: its first part (``dedup`` of ``dedup/resolve``)."""
    return label.split("/", 1)[0]


def write_profile(
    path: str,
    shuffle_bytes: dict[str, int],
    seconds: dict[str, float] | None = None,
    out_bytes: dict[str, int] | None = None,
    largest_element: dict[str, int] | None = None,
) -> None:
    """The stage profile JSON (``PROFILE_ENV``), atomically; ``largest_element`` (Beam): the
    encoded bytes of the largest element of every collection, by step label."""
    import json
    import os

    data: dict[str, Any] = {
        "seconds": seconds or {},
        "shuffle_bytes": shuffle_bytes,
        "out_bytes": out_bytes or {},
    }
    if largest_element is not None:
        data["largest_element"] = largest_element
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, sort_keys=True)
    os.replace(tmp, path)


def _with_value(item: Any, count: Any, *, fn: Fn, value: Any) -> Any:
    return fn(item, count, value)


class Engine(ABC):
    name: str = "engine"
    tag: str = "engine"  # how the start-up log line names ``description``
    description: str = ""
    counter_source: str = "exact"
    keep_samples: int = 0  # --keep-samples of the job being run (``start`` sets it)
    # every collection held in this machine's memory (Beam's DirectRunner): a job checks its
    # inputs against the available memory before any work (``clean.memory_fit``)
    holds_collections: bool = False

    # -- primitives -----------------------------------------------------------------------------
    @abstractmethod
    def source(self, label: str, items: list[Any], fn: Fn) -> Any: ...

    @abstractmethod
    def flat_map(self, coll: Any, label: str, fn: Fn) -> Any: ...

    @abstractmethod
    def group(self, coll: Any, label: str, fn: Fn) -> Any: ...

    @abstractmethod
    def combine(self, coll: Any, label: str, fn: Fn) -> Any: ...

    @abstractmethod
    def cogroup(self, label: str, left: Any, right: Any, fn: Fn) -> Any: ...

    @abstractmethod
    def distinct(self, coll: Any, label: str) -> Any: ...

    def shared(self, coll: Any) -> Any:
        return coll

    def broadcast(self, label: str, value: Any) -> Any:
        """A handle on ``value`` for ``flat_map_with`` (here: the value itself)."""
        return value

    def flat_map_with(self, coll: Any, label: str, fn: Fn, side: Any) -> Any:
        """``fn(item, count, value)`` over ``coll``; ``side`` from ``broadcast``."""
        return self.flat_map(coll, label, functools.partial(_with_value, fn=fn, value=side))

    @abstractmethod
    def loop(self, coll: Any, label: str, body: Fn, rounds: int) -> Any: ...

    @abstractmethod
    def drain(self, coll: Any, label: str) -> None: ...

    def execute(self) -> None:
        """Run what was built so far (Beam builds a graph, then runs it here; the local engine
        and Spark's ``drain`` have already run it). A stage with two jobs (a count decides
        the second) calls it between them."""
        return None

    def side_list(self, coll: Any, label: str) -> Any:
        """A small collection as a side value for ``flat_map_with`` (its items as a list)."""
        return list(coll)

    def collect(self, coll: Any, label: str) -> list[Any]:
        """A small collection's items on the driver (runs what it needs)."""
        return list(coll)

    @abstractmethod
    def counters(self) -> dict[str, dict[str, int]]: ...

    # -- job level ------------------------------------------------------------------------------
    def start(self, keep_samples: int = 0, partitions: int = 2) -> None:
        """Before a stage wires its steps: ``keep_samples`` dropped items kept per reason,
        ``partitions`` the parallel units the stage has (Spark sizes its shuffles by it)."""
        self.keep_samples = keep_samples

    def list_inputs(self, specs: list[str], input_format: str) -> list[Any]:
        """The input files of ``specs`` (paths, globs, ``@lists``) as this engine's
        filesystem sees them (Spark: also Hadoop paths, through its JVM)."""
        from c4forge.io.inputs import resolve_inputs

        return resolve_inputs(specs, input_format)

    bars: Any = None  # the job's ``StageBars`` while ``progress`` runs; the steps report to it

    @contextlib.contextmanager
    def progress(self, files: int, quiet: bool, plan: Any = None) -> Iterator[None]:
        """Progress of the job on the driver while it runs: a display per stage
        (``stage_progress.StageBars``, described by ``plan``, a ``ProgressPlan``), which the
        engine's steps feed through ``self.bars``; none when ``quiet`` or without a plan."""
        if quiet or plan is None:
            yield
            return
        from c4forge.engines.stage_progress import StageBars

        self.progress_note()
        with StageBars(plan, self.counters) as bars:
            self.bars = bars
            try:
                yield
            finally:
                self.bars = None

    def progress_note(self) -> None:
        """A line before the progress displays (Spark: where its web UI is)."""
        return None

    def samples(self) -> dict[str, list]:
        """``--keep-samples``: ``{stage/reason: [(hash, text, url), …]}`` of the finished run,
        the combine (``drop_samples.merge``) of what every worker kept."""
        return {}

    def close(self) -> None:
        """Release what the engine started (a Spark context it created)."""
        return None
