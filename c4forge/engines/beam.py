"""The Beam engine: the plan's primitives as Beam transforms (DirectRunner/FnApiRunner,
Dataflow, Flink, Spark runner).

The per-element functions live in ``c4forge.clean.steps`` (module level), wrapped here in four
generic DoFns whose ``count`` is bound to Beam counters (namespace = stage, name = reason), so
every drop is a counter on every runner. DoFns live in a module (not ``__main__``), so remote
workers unpickle them from the installed package and ``save_main_session`` is not needed.

The plan runs keys-only (``c4forge.clean.passes``) in ONE pipeline, so it means the same on
Dataflow as on the DirectRunner: the per-chunk passes are ordinary steps whose records live under
``OUTPUT/_work/``; with ``--resume`` a chunk whose front record exists is re-emitted from it
without being read, and a runner's bundle retries reuse finished chunks too.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from c4forge.clean import output as co
from c4forge.engines.base import Engine, Fn
from c4forge.errors import ConfigError, VerificationError
from c4forge.io import storage

MANIFEST_NAME = "_c4forge_shards.json"
# The DirectRunner holds every collection in memory: measured peak PSS of the process tree per
# compressed input byte with the keys-only plan (benchmarks/scale.py), plus a fixed base.
DIRECT_MEMORY_PER_INPUT_BYTE = 6.0
DIRECT_MEMORY_BASE = 600 << 20


def available_memory() -> int | None:
    """MemAvailable of this machine in bytes (None where /proc/meminfo is absent)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


class BeamCount:
    """The ``Count`` callback of the filters, backed by Beam counters (cached per name)."""

    def __init__(self) -> None:
        self._counters: dict[tuple[str, str], Any] = {}

    def __call__(self, stage: str, reason: str, n: int = 1) -> None:
        key = (stage, reason)
        c = self._counters.get(key)
        if c is None:
            c = self._counters[key] = Metrics.counter(stage, reason)
        c.inc(n)


class CountingDoFn(beam.DoFn):
    def setup(self) -> None:
        self.count = BeamCount()


class _MapFn(CountingDoFn):
    def __init__(self, fn: Fn) -> None:
        self.fn = fn

    def process(self, item: Any) -> Iterator[Any]:
        yield from self.fn(item, self.count)


class _GroupFn(_MapFn):
    def process(self, element: tuple[Any, Iterable[Any]]) -> Iterator[Any]:
        key, values = element  # re-iterable grouped values; never copied into a list here
        yield from self.fn(key, values, self.count)


class _CoGroupFn(_MapFn):
    def process(self, element: tuple[Any, dict]) -> Iterator[Any]:
        key, joined = element
        yield from self.fn(key, joined["left"], joined["right"], self.count)


def counters_from_metrics(result: Any) -> tuple[dict[str, dict[str, int]], str]:
    """``{namespace: {name: value}}`` of every Beam counter, summed over steps.

    Committed values where the runner reports them; attempted otherwise (returns which).
    """
    from apache_beam.metrics.metric import MetricsFilter

    from c4forge.filters.counting import CounterBag

    query = result.metrics().query(MetricsFilter())
    bag = CounterBag()
    source = "committed"
    for m in query["counters"]:
        value = m.committed
        if value is None:
            value, source = m.attempted, "attempted"
        bag(m.key.metric.namespace, m.key.metric.name, int(value or 0))
    return bag.counts, source


def mark_file_read(progress_dir: str | None, path: str) -> None:
    """An empty marker per finished input, counted by the driver's progress bar."""
    if progress_dir:
        import hashlib
        import os

        marker = hashlib.md5(path.encode("utf-8")).hexdigest()
        with open(os.path.join(progress_dir, marker), "wb"):
            pass


class _SourceFn(_MapFn):
    """One input path → its items; ``progress_dir`` (local runners): a marker per input."""

    def __init__(self, fn: Fn, progress_dir: str | None) -> None:
        super().__init__(fn)
        self.progress_dir = progress_dir

    def process(self, item: Any) -> Iterator[Any]:
        yield from self.fn(item, self.count)
        for f in getattr(item, "files", ()):  # a chunk of the job's inputs
            mark_file_read(self.progress_dir, f.path)


# --- output ------------------------------------------------------------------------------------


class CountSplitsFn(beam.CombineFn):
    """Documents per output key (``shard_counts`` adds the empty sets, so an empty corpus
    still gets its empty shards)."""

    def create_accumulator(self) -> dict[str, int]:
        return {}

    def add_input(self, acc: dict[str, int], element: tuple[str, Any]) -> dict[str, int]:
        acc[element[0]] = acc.get(element[0], 0) + 1
        return acc

    def merge_accumulators(self, accs: Iterable[dict[str, int]]) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in accs:
            for k, v in a.items():
                out[k] = out.get(k, 0) + v
        return out

    def extract_output(self, acc: dict[str, int]) -> dict[str, int]:
        return acc


class WriteShardFn(beam.DoFn):
    """One (split, shard) group → one file, written whole by this worker (atomic rename)."""

    def __init__(self, directory: str, fmt: str) -> None:
        self.directory = directory
        self.fmt = fmt

    def process(self, element, shards: dict) -> Iterator[dict]:
        shard, values = element
        yield co.write_shard_group(self.directory, self.fmt, shards, shard, values)


class WriteShards(beam.PTransform):
    """(split, OutDoc) → shard files; returns the PCollection of per-shard stats dicts.

    The shard count may depend on the document count (``auto``), so it is computed first and
    read as a side input; one empty marker per shard makes every shard exist, even if empty.
    """

    def __init__(self, directory: str, fmt: str, shard_options: dict[str, Any]) -> None:
        super().__init__()
        self.directory = directory
        self.fmt = fmt
        self.shard_options = shard_options

    def expand(self, split_docs):
        counts = split_docs | "CountPerSplit" >> beam.CombineGlobally(CountSplitsFn())
        shards = counts | "ShardCounts" >> beam.Map(co.shard_counts, self.shard_options)
        shards_si = beam.pvalue.AsSingleton(shards)
        keyed = split_docs | "AssignShard" >> beam.Map(co.assign_shard, shards_si)
        markers = shards | "ShardMarkers" >> beam.FlatMap(co.shard_markers)
        return (
            (keyed, markers)
            | "WithMarkers" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShard" >> beam.ParDo(WriteShardFn(self.directory, self.fmt), shards_si)
        )


def write_manifest(shards: list[dict], path: str) -> None:
    """Hand the per-shard stats to the driver through a file (works on every runner)."""
    data = json.dumps(sorted(shards, key=lambda s: (s["split"], s["index"]))).encode("utf-8")
    with storage.atomic_writer(path) as f:
        f.write(data)


# --- the engine --------------------------------------------------------------------------------


class BeamEngine(Engine):
    name = "beam"
    tag = "runner"

    def __init__(self, job: Any = None) -> None:
        """``job`` gives the runner, workers and pass-through options (none: one in-process
        DirectRunner worker, for tests)."""
        from c4forge.pipeline.beam_options import make_runner, quiet_beam_logging

        quiet_beam_logging()
        runner, workers = (job.runner, job.workers) if job is not None else (None, 1)
        extra = list(job.passthrough) if job is not None else []
        self.choice = make_runner(runner, workers, extra)
        self.description = self.choice.description
        self.pipeline = beam.Pipeline(runner=self.choice.runner, options=self.choice.options)
        self.progress_dir: str | None = None
        self._labels: Counter[str] = Counter()
        self._counters: dict[str, dict[str, int]] = {}

    def _label(self, label: str) -> str:
        self._labels[label] += 1
        n = self._labels[label]
        return label if n == 1 else f"{label}#{n}"

    def check_inputs(self, input_bytes: int, job: Any) -> None:
        """The DirectRunner keeps every collection in memory: refuse, before any work, inputs
        whose run would not fit in this machine's available memory."""
        if not self.choice.local:
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

    # -- primitives -----------------------------------------------------------------------------
    def source(self, label: str, items: list[Any], fn: Fn) -> Any:
        lbl = self._label(label)
        return (
            self.pipeline
            | f"{lbl}/inputs" >> beam.Create(items)
            | f"{lbl}/spread" >> beam.Reshuffle()
            # the progress bar counts the job's input files only (not, e.g., a URL list)
            | lbl >> beam.ParDo(_SourceFn(fn, self.progress_dir if label == "wet" else None))
        )

    def flat_map(self, coll: Any, label: str, fn: Fn) -> Any:
        return coll | self._label(label) >> beam.ParDo(_MapFn(fn))

    def group(self, coll: Any, label: str, fn: Fn) -> Any:
        lbl = self._label(label)
        return coll | f"{lbl}/group" >> beam.GroupByKey() | lbl >> beam.ParDo(_GroupFn(fn))

    def combine(self, coll: Any, label: str, fn: Fn) -> Any:
        return coll | self._label(label) >> beam.CombinePerKey(fn)

    def cogroup(self, label: str, left: Any, right: Any, fn: Fn) -> Any:
        lbl = self._label(label)
        return (
            {"left": left, "right": right}
            | f"{lbl}/join" >> beam.CoGroupByKey()
            | lbl >> beam.ParDo(_CoGroupFn(fn))
        )

    def distinct(self, coll: Any, label: str) -> Any:
        return coll | self._label(label) >> beam.Distinct()

    def loop(self, coll: Any, label: str, body: Fn, rounds: int) -> Any:
        for r in range(rounds):  # unrolled: a round on a converged edge set changes nothing
            coll = body(self, coll, f"{label}{r}")
        return coll

    def drain(self, coll: Any, label: str) -> None:
        return None  # a Beam step without consumers still runs (and counts)

    # -- job level ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def progress(self, files: int, quiet: bool) -> Iterator[None]:
        from c4forge.engines.progress_bar import FileProgress

        with FileProgress(files, enabled=self.choice.local and not quiet) as bar:
            self.progress_dir = bar.directory
            yield

    def write_shards(self, coll: Any, job: Any) -> list[dict]:
        manifest = storage.join(job.output, MANIFEST_NAME)
        shards = coll | "output" >> WriteShards(job.output, job.format, job.output_options)
        _ = (
            shards
            | "CollectShardStats" >> beam.combiners.ToList()
            | "WriteManifest" >> beam.Map(write_manifest, manifest)
        )
        self.execute()
        stats = json.loads(storage.read_bytes(manifest))
        co.remove_files(job.output, [MANIFEST_NAME])
        return stats

    def execute(self) -> None:
        """Run the pipeline built so far; keep its counters (``counters()``)."""
        from c4forge.engines.errors import user_error_from

        try:
            result = self.pipeline.run()
            result.wait_until_finish()
        except Exception as err:
            user_error = user_error_from(err)
            if user_error is not None:
                raise user_error from None
            raise
        state = str(getattr(result, "state", "DONE"))
        if "DONE" not in state:
            raise VerificationError(f"the pipeline ended in state {state}")
        self._counters, self.counter_source = counters_from_metrics(result)

    def counters(self) -> dict[str, dict[str, int]]:
        return self._counters
