"""The native Spark engine (``--engine spark``): the plan's primitives on PySpark RDDs.

Why a native engine: Beam on Spark needs a job server many clusters do not run. The stages are
the plan's (``c4forge.clean.plan``), calling the same plain functions as every engine, so the
shards and stats.json are byte-identical to the Beam engine's for the same input and options.

Counters: one Spark accumulator holding ``{stage: {reason: n}}`` (``CountersParam``); each
partition counts into a local ``CounterBag`` and adds it once when the partition is done. An
RDD read by more than one action is computed once first (``shared`` → ``materialize``) so a
recomputation cannot count twice.

The plan runs keys-only (``c4forge.clean.passes``), as on every engine: each chunk's records
under ``OUTPUT/_work/``, so a killed run can be resumed (``--resume``) chunk by chunk.

Paths: Hadoop URIs (``hdfs://``, ``s3a://``, ``file:`` …) are listed with the cluster's Hadoop
FileSystem; every input is read by the executors through the plan's ``read`` (the storage
layer opens local, ``file:``, ``gs://``, ``s3://``, ``hdfs://`` and fsspec paths). The output
may be local or any Beam filesystem.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from c4forge import faults
from c4forge.corpus.counting import CounterBag
from c4forge.engines.base import Engine, Fn, profile_path, stage_of, write_profile
from c4forge.engines.spark_launch import check_master, launch_of, make_context
from c4forge.errors import InputError
from c4forge.io import storage
from c4forge.io.inputs import InputFile

try:  # pyspark is an extra: import errors surface in make_context with a clear message
    from pyspark.accumulators import AccumulatorParam
except ImportError:  # pragma: no cover - exercised only without pyspark
    AccumulatorParam = object  # type: ignore[assignment,misc]


class CountersParam(AccumulatorParam):
    """Merges ``{stage: {reason: n}}`` dicts: one accumulator carries every counter."""

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:  # noqa: N802 - Spark's name
        for stage, reasons in b.items():
            bucket = a.setdefault(stage, {})
            for reason, n in reasons.items():
                bucket[reason] = bucket.get(reason, 0) + n
        return a


def group_tasks(sc: Any, group: str) -> tuple[int, int, str | None]:
    """(tasks done, tasks, the running stage's name) of the Spark stages of the job group
    ``group`` known so far (a stage not yet submitted counts once it is; the name is the
    first stage, by id, with a task running, named by ``SparkEngine._named``)."""
    tracker = sc.statusTracker()
    done = total = 0
    running = None
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in sorted(job.stageIds) if job is not None else ():
            info = tracker.getStageInfo(stage_id)
            if info is not None:
                done += info.numCompletedTasks
                total += info.numTasks
                if running is None and info.numActiveTasks > 0:
                    running = info.name
    return done, total, running


def _step(rdd: Any, label: str) -> Any:
    """``rdd``, marked with the step that made it (``SparkEngine._named`` names the Spark
    stages that compute it)."""
    rdd._c4forge_step = label
    return rdd


def _steps(*rdds: Any) -> str:
    """The stages whose output ``rdds`` are (``url_dedup+chunks``)."""
    names = (stage_of(getattr(r, "_c4forge_step", "input")) for r in rdds)
    return "+".join(dict.fromkeys(names))


def materialize(rdd: Any) -> Any:
    """Persist and compute ``rdd`` now. Why: two stages of one job that both read an RDD
    compute it concurrently, cache or not (seen with Spark 4.x), and counters would be
    added twice; computing it in an action of its own first makes every later read a cache hit.
    """
    from pyspark import StorageLevel

    rdd.persist(StorageLevel.MEMORY_AND_DISK)
    rdd.count()
    return rdd


class SamplesParam(AccumulatorParam):
    """``--keep-samples``: ``{stage/reason: records}`` merged by ``drop_samples.merge`` (the
    smallest ``n`` of the union: associative, commutative, idempotent, so a recomputed
    partition cannot change the sample)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def zero(self, value: dict) -> dict:
        return {}

    def addInPlace(self, a: dict, b: dict) -> dict:  # noqa: N802 - Spark's name
        from c4forge.corpus.drop_samples import merge

        for key, recs in b.items():
            a[key] = list(merge([a.get(key, ()), recs], self.n))
        return a


def counted(
    acc: Any,
    fn: Callable[[Iterator[Any], CounterBag], Iterator[Any]],
    samples: Any = None,
    keep: int = 0,
    label: str = "",
):
    """Wrap a partition function: it counts into a local bag, added to ``acc`` once at the end
    (and its kept samples to ``samples``, with ``--keep-samples``).

    Under the ``duplicate`` fault hook (``c4forge.faults``, tests only) the partition is run
    once more first, its output and counters dropped: a speculative attempt whose writes
    happened but lost the race. Why emulated: Spark never speculates on a local master (no
    speculation thread) nor places a copy on the host of the original attempt, so one machine
    cannot make it do so."""

    def run(items: Iterator[Any]) -> Iterator[Any]:
        if faults.duplicate(label):
            kept = list(items)
            for _ in fn(iter(kept), CounterBag(keep)):
                pass
            items = iter(kept)
        bag = CounterBag(keep)
        yield from fn(items, bag)
        if bag.counts:
            acc.add(bag.counts)
        if samples is not None and bag.samples:
            samples.add(bag.samples)

    return run


# --------------------------------------------------------------------------------------------
# Spark context


SCOPE_KEY = "spark.rdd.scope"  # SparkContext.RDD_SCOPE_KEY
SCOPE_PREFIX = "c4forge-"  # ids of our scopes (Spark's own are numbers)


def _scope_label(scope_json: str | None) -> str | None:
    """The label of the c4forge scope in an RDD's scope chain (its own, or a parent)."""
    scope = json.loads(scope_json) if scope_json else None
    while scope:
        if str(scope.get("id", "")).startswith(SCOPE_PREFIX):
            return scope.get("name")
        scope = scope.get("parent")
    return None


def _stage_label(rdd_infos: list[dict]) -> str | None:
    """The label of the shuffle a map stage writes: its PairwiseRDD's scope, else the first
    of its RDDs (the stage's own) that has one."""
    ordered = [r for r in rdd_infos if r.get("Name") == "PairwiseRDD"] + list(rdd_infos)
    for info in ordered:
        label = _scope_label(info.get("Scope"))
        if label:
            return label
    return None


def shuffle_bytes_from_event_log(directory: str) -> dict[str, int]:
    """``{stage: bytes}`` written to the shuffle, from the event log(s) in ``directory``
    (a stage no scope names counts as ``other``)."""
    labels: dict[int, str] = {}
    written: dict[int, int] = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name), encoding="utf-8") as f:
            for line in f:
                if line.startswith('{"Event":"SparkListenerTaskEnd"'):
                    event = json.loads(line)
                    metrics = (event.get("Task Metrics") or {}).get("Shuffle Write Metrics") or {}
                    n = int(metrics.get("Shuffle Bytes Written", 0))
                    if n:
                        written[event["Stage ID"]] = written.get(event["Stage ID"], 0) + n
                elif line.startswith('{"Event":"SparkListenerStageSubmitted"'):
                    info = json.loads(line)["Stage Info"]
                    label = _stage_label(info.get("RDD Info") or [])
                    if label:
                        labels[info["Stage ID"]] = label
    out: dict[str, int] = {}
    for stage_id, n in written.items():
        stage = stage_of(labels.get(stage_id, "other"))
        out[stage] = out.get(stage, 0) + n
    return dict(sorted(out.items()))


def is_hadoop_path(path: str) -> bool:
    """A URI (``hdfs://``, ``s3a://``, ``gs://``, also ``file://``) goes through the cluster's
    Hadoop FileSystem; a plain path is opened directly by the executors. Hadoop itself lists
    ``file:/x`` with one slash, hence the ``file:`` prefix test."""
    return storage.is_remote(path) or path.startswith("file:")


def hadoop_list(sc: Any, specs: list[str], input_format: str = "auto") -> list[InputFile]:
    """Expand Hadoop paths/globs/folders with the cluster's FileSystem (driver side, metadata
    only). A folder contributes the files the Beam resolver would take (``*.wet.gz`` …); a
    spec that matches nothing is an InputError, as for local paths (C3)."""
    import fnmatch

    from c4forge.io.inputs import dir_patterns

    patterns = dir_patterns(input_format)
    jvm = sc._jvm
    conf = sc._jsc.hadoopConfiguration()
    out: dict[str, InputFile] = {}
    for spec in specs:
        path = jvm.org.apache.hadoop.fs.Path(spec)
        try:
            fs = path.getFileSystem(conf)
            statuses = fs.globStatus(path)
        except Exception as err:  # py4j wraps the Java exception
            raise InputError(f"cannot list {spec!r}: {str(err).splitlines()[0]}") from err
        found = []
        for st in statuses or []:
            if st.isDirectory():
                it = fs.listFiles(st.getPath(), True)
                while it.hasNext():
                    f = it.next()
                    name = f.getPath().getName()
                    if not name.startswith((".", "_")) and any(
                        fnmatch.fnmatch(name, p) for p in patterns
                    ):
                        found.append(_hadoop_file(f))
            else:
                found.append(_hadoop_file(st))
        if not found:
            raise InputError(f"input {spec!r} matches no file")
        for f in found:
            out.setdefault(f.path, f)
    return sorted(out.values())


def _hadoop_file(status: Any) -> InputFile:
    """A Hadoop FileStatus as an input, its modification time as the version."""
    return InputFile(
        status.getPath().toString(),
        int(status.getLen()),
        f"mtime_ms:{int(status.getModificationTime())}",
    )


def resolve_all(sc: Any, specs: list[str], input_format: str) -> list[InputFile]:
    """Local specs (and ``@lists``) through the Beam job's resolver, Hadoop ones through Hadoop;
    each file once."""
    from c4forge.io.inputs import read_path_list, resolve_inputs

    expanded: list[str] = []
    for spec in specs:
        expanded += read_path_list(spec) if spec.startswith("@") else [spec]
    local = [s for s in expanded if not is_hadoop_path(s)]
    remote = [s for s in expanded if is_hadoop_path(s)]
    found: list[InputFile] = []
    if local:
        found += resolve_inputs(local, input_format)
    if remote:
        found += hadoop_list(sc, remote, input_format)
    files: dict[str, InputFile] = {}
    for f in found:  # each file once, also when named both as a path and as a file: URI
        files.setdefault(_identity(f.path), f)
    return sorted(files.values())


def _identity(path: str) -> str:
    return os.path.abspath(storage.normalize(path)) if path.startswith("file:") else path


# --------------------------------------------------------------------------------------------
# Per-partition wrappers (module level: pickled by reference, run on executors)


def _map_all(fn: Fn):
    def run(items: Iterator[Any], bag: CounterBag) -> Iterator[Any]:
        for item in items:
            yield from fn(item, bag)

    return run


def _map_all_with(fn: Fn, side: Any):
    def run(items: Iterator[Any], bag: CounterBag) -> Iterator[Any]:
        value = side.value  # the broadcast, fetched once per partition
        for item in items:
            yield from fn(item, bag, value)

    return run


def _group_all(fn: Fn):
    def run(items: Iterator[tuple[Any, Iterable[Any]]], bag: CounterBag) -> Iterator[Any]:
        for key, values in items:
            yield from fn(key, values, bag)

    return run


def _cogroup_all(fn: Fn):
    def run(items: Iterator[tuple[Any, tuple]], bag: CounterBag) -> Iterator[Any]:
        for key, (lefts, rights) in items:
            yield from fn(key, lefts, rights, bag)

    return run


def _pairwise(fn: Fn):
    def run(a: Any, b: Any) -> Any:
        return fn([a, b])

    return run


# --------------------------------------------------------------------------------------------
# The engine


class SparkEngine(Engine):
    name = "spark"
    tag = "engine"
    counter_source = "accumulator"

    def __init__(self, job: Any = None, spark_context: Any = None) -> None:
        """A context for ``job`` (its master, workers, ``--conf`` pairs), or ``spark_context``
        (reused, not stopped by ``close``)."""
        self.own = spark_context is None
        if spark_context is None:
            master = check_master(job.master) if job.master else None  # fail fast, before the JVM
            spark_context = make_context(master, job.workers, list(job.passthrough))
        self.sc = spark_context
        self.acc = self.sc.accumulator({}, CountersParam())
        self.sacc: Any = None  # --keep-samples accumulator (``run``)
        self.parts = 2
        # profile mode (C4FORGE_ENGINE_PROFILE, a context of our own): shuffles are labelled
        # and the event log read on ``close``
        self.profile = profile_path() if self.own else None
        launch = launch_of(self.sc)
        self.event_log = launch.event_log if self.profile and launch is not None else None
        self._scopes = 0
        self._actions = 0  # job groups started (``_action``)
        self._last = "start"  # the label of the last step wired (``shared`` names its action)
        java_text = f", {launch.java.describe()}" if launch is not None else ""
        self.description = f"Spark {self.sc.master} ({self.sc.defaultParallelism} cores{java_text})"

    # -- progress -------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _action(self, label: str) -> Iterator[None]:
        """A Spark action run for the step ``label`` (what it computes ends there; Spark
        computes lazily, so the steps before it not yet computed run in it too): its jobs
        carry a group of their own, whose tasks the progress display polls."""
        if self.bars is None:
            yield
            return
        self._actions += 1
        group = f"c4forge-{self._actions}"
        self.sc.setJobGroup(group, label)
        poll = functools.partial(group_tasks, self.sc, group)
        self.bars.begin(label, poll=poll, title=f"Spark: every step up to {label}")
        try:
            with self._named(stage_of(label)):
                yield
        finally:
            self.sc.setLocalProperty("spark.jobGroup.id", None)
        self.bars.end()

    @contextlib.contextmanager
    def _named(self, name: str) -> Iterator[None]:
        """Spark stages whose RDDs are created meanwhile carry ``name`` (their call site, which
        the status tracker reports as the stage's name), so the progress display can say
        which step runs. Why the depth: pyspark's own call-site guard (``SCCallSiteSync``)
        sets the Python caller's line unless a guard is already open. Only while a progress
        display runs."""
        if self.bars is None:
            yield
            return
        from pyspark.traceback_utils import SCCallSiteSync

        self.sc._jsc.setCallSite(name)
        SCCallSiteSync._spark_stack_depth += 1
        try:
            yield
        finally:
            SCCallSiteSync._spark_stack_depth -= 1
            self.sc._jsc.setCallSite(None)

    def progress_note(self) -> None:
        """Where Spark's web UI is (off on a local master, where this run starts its own)."""
        import sys

        url = self.sc.uiWebUrl
        if url:
            line = f"Spark web UI: {url} (jobs, stages and executors of this run)"
        else:
            line = f"Spark web UI: off on {self.sc.master} (--conf spark.ui.enabled=true)"
        print(line, file=sys.stderr, flush=True)

    # -- primitives -----------------------------------------------------------------------------
    @contextlib.contextmanager
    def _scope(self, label: str) -> Iterator[None]:
        """RDDs created meanwhile carry ``label`` (profile mode only; see the event log)."""
        if not self.event_log:
            yield
            return
        self._scopes += 1
        old = self.sc.getLocalProperty(SCOPE_KEY)
        scope = {"id": f"{SCOPE_PREFIX}{self._scopes}", "name": label}
        self.sc.setLocalProperty(SCOPE_KEY, json.dumps(scope))
        try:
            yield
        finally:
            self.sc.setLocalProperty(SCOPE_KEY, old)

    def _counted(self, fn: Callable[[Iterator[Any], CounterBag], Iterator[Any]], label: str = ""):
        return counted(self.acc, fn, self.sacc, self.keep_samples, label)

    def start(self, keep_samples: int = 0, partitions: int = 2) -> None:
        super().start(keep_samples, partitions)  # before the steps are wired (``_counted``)
        self.sacc = self.sc.accumulator({}, SamplesParam(keep_samples)) if keep_samples else None
        self.parts = max(2, self.sc.defaultParallelism, partitions)  # ≥ one per chunk

    def samples(self) -> dict[str, list]:
        if self.sacc is None:
            return {}
        merged = SamplesParam(self.keep_samples).addInPlace({}, self.sacc.value)
        return {k: [tuple(r) for r in v] for k, v in sorted(merged.items())}

    def source(self, label: str, items: list[Any], fn: Fn) -> Any:
        self._last = label
        rdd = self.sc.parallelize(items, max(1, len(items)))
        return _step(rdd.mapPartitions(self._counted(_map_all(fn), label)), label)

    def flat_map(self, coll: Any, label: str, fn: Fn) -> Any:
        self._last = label
        return _step(coll.mapPartitions(self._counted(_map_all(fn), label)), label)

    def broadcast(self, label: str, value: Any) -> Any:
        return self.sc.broadcast(value)

    def flat_map_with(self, coll: Any, label: str, fn: Fn, side: Any) -> Any:
        self._last = label
        return _step(coll.mapPartitions(self._counted(_map_all_with(fn, side), label)), label)

    def group(self, coll: Any, label: str, fn: Fn) -> Any:
        self._last = label
        with self._scope(label), self._named(_steps(coll)):
            grouped = coll.groupByKey(self.parts)
        return _step(grouped.mapPartitions(self._counted(_group_all(fn), label)), label)

    def combine(self, coll: Any, label: str, fn: Fn) -> Any:
        self._last = label
        with self._scope(label), self._named(_steps(coll)):
            return _step(coll.reduceByKey(_pairwise(fn), self.parts), label)

    def cogroup(self, label: str, left: Any, right: Any, fn: Fn) -> Any:
        self._last = label
        with self._scope(label), self._named(_steps(left, right)):
            joined = left.cogroup(right, self.parts)
        return _step(joined.mapPartitions(self._counted(_cogroup_all(fn), label)), label)

    def distinct(self, coll: Any, label: str) -> Any:
        self._last = label
        with self._scope(label), self._named(_steps(coll)):
            return _step(coll.distinct(self.parts), label)

    def shared(self, coll: Any) -> Any:
        with self._action(self._last):
            return materialize(coll)

    def loop(self, coll: Any, label: str, body: Fn, rounds: int) -> Any:
        with self._action(label):
            current = materialize(coll)
        for r in range(rounds):
            step = body(self, current, f"{label}{r}")
            with self._action(f"{label}{r}"):
                nxt = materialize(step)
            with self._scope(f"{label}{r}/changed"):
                diff = nxt.subtract(current, self.parts).union(current.subtract(nxt, self.parts))
            with self._action(f"{label}{r}/changed"):
                changed = not diff.isEmpty()
            current.unpersist()
            current = nxt
            if not changed:
                break
        return current

    def drain(self, coll: Any, label: str) -> None:
        with self._action(label):
            coll.count()

    # -- job level ------------------------------------------------------------------------------
    def list_inputs(self, specs: list[str], input_format: str) -> list[InputFile]:
        return resolve_all(self.sc, specs, input_format)

    def side_list(self, coll: Any, label: str) -> Any:
        """The small collection collected on the driver, broadcast to the executors."""
        with self._action(label):
            return self.sc.broadcast(coll.collect())

    def collect(self, coll: Any, label: str) -> list[Any]:
        with self._scope(label), self._action(label):
            return coll.collect()

    def counters(self) -> dict[str, dict[str, int]]:
        return self.acc.value

    def close(self) -> None:
        if self.own:
            self.sc.stop()  # also completes the event log
        if self.event_log:
            import shutil

            try:
                write_profile(self.profile, shuffle_bytes_from_event_log(self.event_log))
            finally:
                shutil.rmtree(self.event_log, ignore_errors=True)
                self.event_log = None
