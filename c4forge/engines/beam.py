"""The Beam engine: the plan's primitives as Beam transforms (DirectRunner/FnApiRunner,
Dataflow, Flink, Spark runner).

The per-element functions live in the stage modules (module level), wrapped here in four
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
import functools
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import apache_beam as beam
from apache_beam.metrics import Metrics

from c4forge import faults
from c4forge.corpus import drop_samples as ds
from c4forge.engines.base import Engine, Fn, profile_path, stage_of, write_profile
from c4forge.engines.progress_bar import TALLY_EVERY_S
from c4forge.errors import TaskFailedError, VerificationError
from c4forge.io import storage

COLLECT_NAME = "_c4forge_collect-{}.json"  # a collected collection, handed to the driver

SAMPLES_MANIFEST = "_c4forge_samples.json"


SAMPLES_TAG = "samples"  # the tagged output of dropped-item samples (--keep-samples)


class BeamCount:
    """The ``Count`` callback of the filters, backed by Beam counters (cached per name).

    ``keep > 0`` (``--keep-samples``): a dropped item that enters this worker's ``keep``
    smallest for its reason is queued in ``pending`` as ``(stage/reason, (record,))``; the DoFn
    emits the queue on its samples output (an item this worker already beat ``keep`` times
    cannot be in the global sample, so nothing else needs to leave the worker)."""

    def __init__(self, keep: int = 0, watch: tuple[str, str] | None = None) -> None:
        self._counters: dict[tuple[str, str], Any] = {}
        self.keep = keep
        # the progress displays' pages counter (``ProgressPlan.pages``): its increase is
        # tallied here too, for the next progress tally (``_MapFn``)
        self.watch = watch
        self.watched = 0
        self.pending: list[tuple[str, tuple]] = []
        self._bag: Any = None

    def sample(self, stage: str, reason: str, text: str, url: str = "") -> None:
        from c4forge.corpus import drop_samples as ds

        if self.keep > 0:
            self.add_record(ds.key_of(stage, reason), ds.record(text, url))

    def add_record(self, key: str, rec: tuple) -> None:
        from c4forge.corpus.drop_samples import SampleBag

        if self._bag is None:
            self._bag = SampleBag(self.keep)
        if self._bag.add(key, rec):
            self.pending.append((key, (rec,)))

    def __call__(self, stage: str, reason: str, n: int = 1) -> None:
        key = (stage, reason)
        if key == self.watch:
            self.watched += n
        c = self._counters.get(key)
        if c is None:
            c = self._counters[key] = Metrics.counter(stage, reason)
        c.inc(n)


class CountingDoFn(beam.DoFn):
    keep = 0  # --keep-samples; the engine sets it on the instance
    # the progress displays (local runners; the engine sets both on the instance): the folder
    # of the tallies (``progress_bar.write_tally``), and the pages counter they carry
    progress_dir: str | None = None
    watch: tuple[str, str] | None = None

    def setup(self) -> None:
        self.count = BeamCount(self.keep, self.watch if self.progress_dir else None)
        self.faulty = faults.FAULT_ENV in os.environ  # the test hook (c4forge.faults) is set

    def _out(self, items: Iterable[Any]) -> Iterable[Any]:
        """``items``, with the samples queued meanwhile on the samples output."""
        return self._with_samples(items) if self.keep else items

    def _with_samples(self, items: Iterable[Any]) -> Iterator[Any]:
        from apache_beam.pvalue import TaggedOutput

        pending = self.count.pending
        for item in items:
            yield item
            while pending:
                yield TaggedOutput(SAMPLES_TAG, pending.pop())
        while pending:
            yield TaggedOutput(SAMPLES_TAG, pending.pop())


class _MapFn(CountingDoFn):
    """A step's DoFn. With a ``progress_dir``, it counts the elements it processed and drops
    a tally of them (``progress_bar.write_tally``) once a second at most and when its bundle
    finishes: no file per element, and nothing at all when progress is off."""

    label = ""  # the step's label (the engine sets it): what a ``duplicate`` fault matches

    def __init__(self, fn: Fn) -> None:
        self.fn = fn

    def start_bundle(self) -> None:
        self._processed = 0
        self._running = False  # the bundle told the driver it started (its first element)
        self._tallied_at = time.monotonic()

    def finish_bundle(self) -> None:
        if self.progress_dir and self._running:
            self._tally(finished=True)

    def _tally(self, started: bool = False, finished: bool = False) -> None:
        """The elements and pages since the last tally, into the progress folder; ``started``
        / ``finished``: the bundle starts or ends here (the driver knows which steps run)."""
        from c4forge.engines.progress_bar import write_tally

        self._tallied_at = time.monotonic()
        pages, self.count.watched = self.count.watched, 0
        if self._processed or pages or started or finished:
            write_tally(self.progress_dir, self.label, self._processed, pages, started, finished)
        self._processed = 0

    def _processed_one(self) -> None:
        """One more element processed (its outputs all taken); a tally once a second."""
        self._processed += 1
        if time.monotonic() - self._tallied_at >= TALLY_EVERY_S:
            self._tally()

    def _run(self, call: Callable[[Any], Iterable[Any]]) -> Iterable[Any]:
        """``call(count)``'s items; under the fault hook, as a runner that retries attempts."""
        if self.progress_dir and not self._running:  # the bundle's first element
            self._running = True
            self._tally(started=True)
        if not self.faulty:
            return self._out(call(self.count))
        return self._out(_attempted(call, self.count, self.label))

    def process(self, item: Any) -> Iterator[Any]:
        yield from self._run(lambda count: self.fn(item, count))
        if self.progress_dir:
            self._processed_one()


def _attempted(call: Callable[[Any], Iterable[Any]], count: Any, label: str) -> list[Any]:
    """A test hook (``c4forge.faults``) standing in for Dataflow's bundle retries on the
    FnApiRunner, which never retries: an attempt that meets an injected fault is dropped (its
    output and counters with it) and run again, up to four attempts; a ``duplicate`` fault
    runs every element once more first, that attempt dropped, as a bundle run twice. The
    writers' side effects all happen, as on Dataflow; only the kept attempt's output and
    counters reach the pipeline."""
    from c4forge.corpus.counting import CounterBag

    keep = getattr(count, "keep", 0)
    for _run in range(2 if faults.duplicate(label) else 1):
        for attempt in range(1, 5):
            bag = CounterBag(keep)
            try:
                items = list(call(bag))
                break
            except faults.InjectedFault:
                if attempt == 4:
                    raise
    for stage, reasons in bag.counts.items():  # the last attempt's counters and samples only
        for reason, n in reasons.items():
            count(stage, reason, n)
    for key, records in bag.samples.items():
        for rec in records:
            count.add_record(key, rec)
    return items


class _SideMapFn(_MapFn):
    """``fn(item, count, value)`` with ``value`` a singleton side input (``broadcast``)."""

    def process(self, item: Any, value: Any) -> Iterator[Any]:
        yield from self._run(lambda count: self.fn(item, count, value))
        if self.progress_dir:
            self._processed_one()


class _GroupFn(_MapFn):
    def process(self, element: tuple[Any, Iterable[Any]]) -> Iterator[Any]:
        key, values = element  # re-iterable grouped values; never copied into a list here
        yield from self._run(lambda count: self.fn(key, values, count))
        if self.progress_dir:
            self._processed_one()


class _CoGroupFn(_MapFn):
    def process(self, element: tuple[Any, dict]) -> Iterator[Any]:
        key, joined = element
        yield from self._run(lambda count: self.fn(key, joined["left"], joined["right"], count))
        if self.progress_dir:
            self._processed_one()


def _worker_lost(err: BaseException) -> bool:
    """Whether ``err`` is the multi-process FnApiRunner losing an SDK worker (its data channel
    closed mid-bundle, the process gone), not a failure of c4forge's own code."""
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if "Channel closed prematurely" in str(e):
            return True
        e = e.__cause__ or e.__context__
    return False


def counters_from_metrics(result: Any) -> tuple[dict[str, dict[str, int]], str]:
    """``{namespace: {name: value}}`` of every Beam counter, summed over steps.

    Committed values where the runner reports them; attempted otherwise (returns which).
    """
    from apache_beam.metrics.metric import MetricsFilter

    from c4forge.corpus.counting import CounterBag

    query = result.metrics().query(MetricsFilter())
    bag = CounterBag()
    source = "committed"
    for m in query["counters"]:
        value = m.committed
        if value is None:
            value, source = m.attempted, "attempted"
        bag(m.key.metric.namespace, m.key.metric.name, int(value or 0))
    return bag.counts, source


# --- shuffle bytes (the stage profile, ``C4FORGE_ENGINE_PROFILE``) -----------------------------

SHUFFLE_NS = "c4forge.shuffle_bytes"  # a Beam distribution per stage: encoded bytes in a shuffle


class ShuffleBytesFn(beam.DoFn):
    """Passes elements through unchanged, adding the size each has in ``coder`` (the coder
    Beam uses for the collection entering the shuffle) to the stage's distribution.

    Why: Beam's runners do not report shuffle bytes (the DirectRunner has no shuffle files),
    so the profile measures what would cross each GroupByKey / CoGroupByKey / Combine: the
    encoded elements entering it. For a combine this is an upper bound (combiner lifting sends
    partial results per bundle). Sums are kept per bundle, one metric update per bundle."""

    def __init__(self, stage: str, coder: Any) -> None:
        self.stage = stage
        self.coder = coder

    def setup(self) -> None:
        self.dist = Metrics.distribution(SHUFFLE_NS, self.stage)

    def start_bundle(self) -> None:
        self.total = 0

    def process(self, element: Any) -> Iterator[Any]:
        self.total += len(self.coder.encode(element))
        yield element

    def finish_bundle(self) -> None:
        if self.total:
            self.dist.update(self.total)
            self.total = 0


LARGEST_NS = "c4forge.largest_element"  # a Beam distribution per collection: element bytes


class ElementSizeFn(beam.DoFn):
    """Passes elements through unchanged, keeping the encoded size of the largest one per
    bundle in the collection's distribution (its ``max`` is the largest element of the run).

    Why: a runner moves an element whole (Beam's data plane, Dataflow's shuffle and commit
    limits), so the largest element of a collection is what bounds a worker's memory and a
    transfer's length; the profile names it for every collection. ``grouped``: a
    GroupByKey's output, measured as its key plus every value (the whole group is one
    element to the runner)."""

    def __init__(self, label: str, coder: Any, grouped: bool = False) -> None:
        self.label = label
        self.coder = coder
        self.grouped = grouped

    def setup(self) -> None:
        self.dist = Metrics.distribution(LARGEST_NS, self.label)

    def start_bundle(self) -> None:
        self.largest = 0

    def process(self, element: Any) -> Iterator[Any]:
        if self.grouped:  # (key, values), or a CoGroupByKey's (key, {tag: values})
            key, values = element
            sides = values.values() if isinstance(values, dict) else (values,)
            n = len(self.coder.encode(key))
            n += sum(len(self.coder.encode(v)) for side in sides for v in side)
        else:
            n = len(self.coder.encode(element))
        self.largest = max(self.largest, n)
        yield element

    def finish_bundle(self) -> None:
        if self.largest:
            self.dist.update(self.largest)
            self.largest = 0


def sized(coll: Any, label: str, grouped: bool = False) -> Any:
    """``coll`` with ``ElementSizeFn`` on the way (profile mode only)."""
    from apache_beam.typehints import typehints

    coder = beam.coders.registry.get_coder(typehints.Any) if grouped else shuffle_coder(coll, False)
    step = beam.ParDo(ElementSizeFn(label, coder, grouped))
    if coll.element_type is not None:
        step = step.with_output_types(coll.element_type)
    return coll | f"{label}/element_bytes" >> step


def largest_from_metrics(result: Any) -> dict[str, int]:
    """``{collection label: bytes}`` of the ``ElementSizeFn`` distributions (their max)."""
    from apache_beam.metrics.metric import MetricsFilter

    query = result.metrics().query(MetricsFilter().with_namespace(LARGEST_NS))
    out: dict[str, int] = {}
    for m in query["distributions"]:
        value = m.committed if m.committed is not None else m.attempted
        if value is not None and value.count:
            out[m.key.metric.name] = max(out.get(m.key.metric.name, 0), int(value.max))
    return dict(sorted(out.items()))


def shuffle_coder(coll: Any, keyed: bool) -> Any:
    """The coder of ``coll``'s elements as they enter a shuffle: a key-value pair (``keyed``)
    of an untyped collection gets Beam's tuple coder of two primitive coders, as the
    runners give a GroupByKey's input."""
    from apache_beam.typehints import typehints

    hint = coll.element_type
    if keyed and (hint is None or hint == typehints.Any):
        hint = typehints.KV[typehints.Any, typehints.Any]
    return beam.coders.registry.get_coder(hint if hint is not None else typehints.Any)


def measured(coll: Any, label: str, keyed: bool = True) -> Any:
    """``coll`` with ``ShuffleBytesFn`` on the way (profile mode only; see ``BeamEngine``)."""
    fn = ShuffleBytesFn(stage_of(label), shuffle_coder(coll, keyed))
    step = beam.ParDo(fn)
    if coll.element_type is not None:
        step = step.with_output_types(coll.element_type)
    return coll | f"{label}/shuffle_bytes" >> step


def shuffle_bytes_from_metrics(result: Any) -> dict[str, int]:
    """``{stage: bytes}`` of the ``ShuffleBytesFn`` distributions, summed over steps."""
    from apache_beam.metrics.metric import MetricsFilter

    query = result.metrics().query(MetricsFilter().with_namespace(SHUFFLE_NS))
    out: dict[str, int] = {}
    for m in query["distributions"]:
        value = m.committed if m.committed is not None else m.attempted
        if value is not None and value.sum:
            out[m.key.metric.name] = out.get(m.key.metric.name, 0) + int(value.sum)
    return dict(sorted(out.items()))


# --- output ------------------------------------------------------------------------------------


def write_manifest_raw(items: list, path: str, sort: bool = True) -> None:
    """Hand a small list to the driver through a file (sorted, or as it is: dicts)."""
    with storage.atomic_writer(path) as f:
        f.write(json.dumps(sorted(items) if sort else items).encode("utf-8"))


class _SideList:
    """A collection to be read as a list side input (``side_list``)."""

    def __init__(self, coll: Any) -> None:
        self.coll = coll


class _WithSamples(beam.PTransform):
    """A ParDo with a samples output: returns its main output, keeps the samples output."""

    def __init__(self, pardo: Any, sink: list[Any]) -> None:
        super().__init__()
        self.pardo = pardo
        self.sink = sink

    def expand(self, coll: Any) -> Any:
        out = coll | self.pardo.with_outputs(SAMPLES_TAG, main="main")
        self.sink.append(out[SAMPLES_TAG])
        return out.main


# --- the engine --------------------------------------------------------------------------------


class BeamEngine(Engine):
    name = "beam"
    tag = "runner"

    def __init__(self, job: Any = None) -> None:
        """``job`` gives the runner, workers and pass-through options (none: one in-process
        DirectRunner worker, for tests)."""
        from c4forge.engines.beam_options import make_runner, quiet_beam_logging

        quiet_beam_logging()
        runner, workers = (job.runner, job.workers) if job is not None else (None, 1)
        extra = list(job.passthrough) if job is not None else []
        self.choice = make_runner(runner, workers, extra)
        self.description = self.choice.description
        self.holds_collections = self.choice.local  # the DirectRunner: all in this machine's memory
        self.pipeline = beam.Pipeline(runner=self.choice.runner, options=self.choice.options)
        self._ran = False
        # where ``collect`` hands items to the driver: the job's output (``start``)
        self.scratch = job.output if job is not None else "."
        # the progress displays (``progress``): the tallies' folder, the plan's pages counter,
        # the counted steps in the order built, and the totals known ({label: elements})
        self.progress_dir: str | None = None
        self.pages_counter: tuple[str, str] | None = None
        self.steps: list[str] = []
        self.step_totals: dict[str, int] = {}
        self.finished_before: dict[str, frozenset[str]] = {}  # ``_follows``
        self._lineage: dict[int, tuple[frozenset[str], frozenset[str], Any]] = {}
        self._labels: Counter[str] = Counter()
        self._counters: dict[str, dict[str, int]] = {}
        self.keep_samples = 0
        self._sample_colls: list[Any] = []
        self._samples: dict[str, list] = {}
        # C4FORGE_ENGINE_PROFILE: measure shuffle bytes (``measured`` steps, written on
        # ``close``); otherwise no step is added, so the pipeline graph is the plain one
        self.profile = profile_path()
        self.shuffle_bytes: dict[str, int] = {}
        self.largest_element: dict[str, int] = {}

    def _measured(self, coll: Any, label: str, keyed: bool = True) -> Any:
        return measured(coll, label, keyed) if self.profile else coll

    def _sized(self, coll: Any, label: str, grouped: bool = False) -> Any:
        """``coll``, its largest element measured in profile mode (``ElementSizeFn``)."""
        return sized(coll, label, grouped) if self.profile else coll

    def _par_do(self, dofn: CountingDoFn, *side: Any, label: str = "") -> beam.PTransform:
        """``ParDo(dofn)``; with ``--keep-samples`` its samples output is collected too."""
        if isinstance(dofn, _MapFn):
            dofn.label = label  # what a ``duplicate`` fault (c4forge.faults) matches
            if self.progress_dir:  # the progress displays (``progress``) count its elements
                dofn.progress_dir = self.progress_dir
                dofn.watch = self.pages_counter
                self.steps.append(label)
        if not self.keep_samples:
            return beam.ParDo(dofn, *side)
        dofn.keep = self.keep_samples
        return _WithSamples(beam.ParDo(dofn, *side), self._sample_colls)

    def _root(self) -> Any:
        """The pipeline new sources attach to: a new one once ``execute`` ran the last."""
        if self._ran:
            self.pipeline = beam.Pipeline(runner=self.choice.runner, options=self.choice.options)
            self._ran = False
        return self.pipeline

    def _label(self, label: str) -> str:
        self._labels[label] += 1
        n = self._labels[label]
        return label if n == 1 else f"{label}#{n}"

    # -- what a step's start says about others (the progress displays) ------------------------
    def _up(self, coll: Any) -> frozenset[str]:
        """The counted steps ``coll`` comes from (``_follows``)."""
        return self._lineage.get(id(coll), (frozenset(), frozenset(), None))[0]

    def _sealed(self, coll: Any) -> frozenset[str]:
        """The counted steps finished whenever an element of ``coll`` exists."""
        return self._lineage.get(id(coll), (frozenset(), frozenset(), None))[1]

    def _follows(
        self, out: Any, step: str | None, up: frozenset[str], sealed: frozenset[str]
    ) -> Any:
        """Record ``out``'s lineage: made by ``step`` (a counted DoFn; None: a combine, a
        distinct) from ``up``, the steps ``sealed`` finished before ``step`` runs (those
        before a shuffle or a side input: a batch runner groups a key, or hands a side
        input, only once its input is whole). So a step's first bundle tells the driver
        that the steps ``sealed`` before it are done (``finished_before``)."""
        if step is not None:
            self.finished_before[step] = sealed
            up = up | {step}
        self._lineage[id(out)] = (up, sealed, out)  # ``out`` kept: its id stays its own
        return out

    # -- primitives -----------------------------------------------------------------------------
    def source(self, label: str, items: list[Any], fn: Fn) -> Any:
        lbl = self._label(label)
        created = self._root() | f"{lbl}/inputs" >> beam.Create(items)
        out = (
            self._measured(created, lbl, keyed=False)
            | f"{lbl}/spread" >> beam.Reshuffle()
            | lbl >> self._par_do(_MapFn(fn), label=lbl)
        )
        self.step_totals[lbl] = len(items)  # a source's display knows its total
        return self._follows(self._sized(out, lbl), lbl, frozenset(), frozenset())

    def flat_map(self, coll: Any, label: str, fn: Fn) -> Any:
        lbl = self._label(label)
        out = self._sized(coll | lbl >> self._par_do(_MapFn(fn), label=lbl), lbl)
        return self._follows(out, lbl, self._up(coll), self._sealed(coll))

    def broadcast(self, label: str, value: Any) -> Any:
        """A one-element PCollection, read by ``flat_map_with`` as a singleton side input."""
        return self._root() | f"{self._label(label)}/resource" >> beam.Create([value])

    def flat_map_with(self, coll: Any, label: str, fn: Fn, side: Any) -> Any:
        if isinstance(side, _SideList):
            value = beam.pvalue.AsList(side.coll)
        else:
            value = beam.pvalue.AsSingleton(side)
        lbl = self._label(label)
        out = self._sized(coll | lbl >> self._par_do(_SideMapFn(fn), value, label=lbl), lbl)
        # a side input is whole before its reader starts
        side_up = self._up(side.coll if isinstance(side, _SideList) else side)
        return self._follows(out, lbl, self._up(coll) | side_up, self._sealed(coll) | side_up)

    def group(self, coll: Any, label: str, fn: Fn) -> Any:
        lbl = self._label(label)
        grouped = self._measured(coll, lbl) | f"{lbl}/group" >> beam.GroupByKey()
        grouped = self._sized(grouped, f"{lbl}/group", grouped=True)
        out = self._sized(grouped | lbl >> self._par_do(_GroupFn(fn), label=lbl), lbl)
        return self._follows(out, lbl, self._up(coll), self._up(coll))

    def combine(self, coll: Any, label: str, fn: Fn) -> Any:
        lbl = self._label(label)
        out = self._sized(self._measured(coll, lbl) | lbl >> beam.CombinePerKey(fn), lbl)
        return self._follows(out, None, self._up(coll), self._up(coll))

    def cogroup(self, label: str, left: Any, right: Any, fn: Fn) -> Any:
        lbl = self._label(label)
        sides = {
            "left": self._measured(left, f"{lbl}/left"),
            "right": self._measured(right, f"{lbl}/right"),
        }
        joined = self._sized(sides | f"{lbl}/join" >> beam.CoGroupByKey(), f"{lbl}/join", True)
        out = self._sized(joined | lbl >> self._par_do(_CoGroupFn(fn), label=lbl), lbl)
        up = self._up(left) | self._up(right)
        return self._follows(out, lbl, up, up)

    def distinct(self, coll: Any, label: str) -> Any:
        lbl = self._label(label)
        out = self._sized(self._measured(coll, lbl, keyed=False) | lbl >> beam.Distinct(), lbl)
        return self._follows(out, None, self._up(coll), self._up(coll))

    def loop(self, coll: Any, label: str, body: Fn, rounds: int) -> Any:
        for r in range(rounds):  # unrolled: a round on a converged edge set changes nothing
            coll = body(self, coll, f"{label}{r}")
        return coll

    def drain(self, coll: Any, label: str) -> None:
        return None  # a Beam step without consumers still runs (and counts)

    # -- job level ------------------------------------------------------------------------------
    @contextlib.contextmanager
    def progress(self, files: int, quiet: bool, plan: Any = None) -> Iterator[None]:
        """A display per stage from the steps' tallies (``progress_bar.StepTallies``): the
        local FnApiRunner reports no live metrics, and a cluster runner's UI shows its own
        progress (off there, as without a plan or with ``quiet``)."""
        from c4forge.engines.progress_bar import StepTallies

        enabled = self.choice.local and not quiet and plan is not None
        self.pages_counter = plan.pages if plan is not None else None
        with StepTallies(
            plan, self.steps, self.step_totals, self.finished_before, enabled=enabled
        ) as tallies:
            self.progress_dir = tallies.directory
            try:
                yield
            finally:
                self.progress_dir = None

    def side_list(self, coll: Any, label: str) -> Any:
        return _SideList(coll)

    def collect(self, coll: Any, label: str) -> list[Any]:
        """Run the pipeline; the collection's items reach the driver through a file under the
        job's output (works on every runner)."""
        safe = "".join(c if c.isalnum() else "_" for c in label)
        path = storage.join(self.scratch, COLLECT_NAME.format(safe))
        lbl = self._label(label)
        _ = (
            coll
            | f"{lbl}/collect" >> beam.combiners.ToList()
            | f"{lbl}/write" >> beam.Map(write_manifest_raw, path, False)
        )
        samples_path = storage.join(self.scratch, SAMPLES_MANIFEST)
        sampled = bool(self._sample_colls)
        if sampled:  # --keep-samples: one combine over every stage's samples, in this run
            merged = tuple(self._sample_colls) | "samples/flatten" >> beam.Flatten()
            self._sample_colls = []
            fn = functools.partial(ds.merge_values, n=self.keep_samples)
            _ = (
                self.combine(merged, "samples/combine", fn)
                | "samples/collect" >> beam.combiners.ToList()
                | "samples/write" >> beam.Map(write_manifest_raw, samples_path)
            )
        self.execute()
        items = json.loads(storage.read_bytes(path))
        storage.remove(path)
        if sampled:
            self._samples = {k: v for k, v in json.loads(storage.read_bytes(samples_path))}
            storage.remove(samples_path)
        return items

    def samples(self) -> dict[str, list]:
        return self._samples

    def execute(self) -> None:
        """Run the pipeline built so far; add its counters to ``counters()``; a later source
        starts a new pipeline (a stage's second job, ``_root``)."""
        from c4forge.engines.errors import user_error_from

        self._ran = True
        try:
            result = self.pipeline.run()
            result.wait_until_finish()
        except Exception as err:
            user_error = user_error_from(err)
            if user_error is not None:
                raise user_error from None
            if self.choice.local and _worker_lost(err):
                raise TaskFailedError(
                    f"a Beam worker process died ({self.choice.description}: killed, out of "
                    "memory?); this runner does not retry a bundle (Dataflow does); the "
                    "finished work is kept: rerun with --resume"
                ) from None
            raise
        state = str(getattr(result, "state", "DONE"))
        if "DONE" not in state:
            raise VerificationError(f"the pipeline ended in state {state}")
        counts, self.counter_source = counters_from_metrics(result)
        for ns, named in counts.items():  # summed over the stage's jobs, as on the other engines
            mine = self._counters.setdefault(ns, {})
            for name, value in named.items():
                mine[name] = mine.get(name, 0) + value
        if self.profile:
            self.shuffle_bytes = shuffle_bytes_from_metrics(result)
            self.largest_element = largest_from_metrics(result)

    def counters(self) -> dict[str, dict[str, int]]:
        return self._counters

    def close(self) -> None:
        """Write the stage profile (``C4FORGE_ENGINE_PROFILE``): shuffle bytes per stage."""
        if self.profile:
            write_profile(self.profile, self.shuffle_bytes, largest_element=self.largest_element)
