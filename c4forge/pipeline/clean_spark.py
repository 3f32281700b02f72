"""`c4forge clean --engine spark`: the Beam job's stages on PySpark RDDs, natively.

Why a native driver: Beam on Spark needs a job server many clusters do not run. This driver
calls the same plain functions as the Beam job (``c4forge.filters``) and the same writer and
stats code (``clean_output``, ``clean_stats``), so no rule exists twice and the shards are
byte-identical to the Beam job's for the same input and options.

Shape (c4_rules.md §1), every corpus-wide step a shuffle, nothing collected to the driver but
counters and per-shard stats:

1. **Front, per chunk of input files** (``progress.py``, resumable; one Spark job per chunk):
   read (WET or WARC) → length → clean (``progress.front_records``, shared with the Beam
   ``--resume`` front). Records are persisted under ``OUTPUT/_work/chunk-NNNNN`` with each
   page's clean outcome and its own clean counters.
2. **Final step over all chunks**: URL dedup (groupByKey on the normalized URL;
   ``progress.choose_front_copy`` adds the kept copy's clean counters, so counters equal the
   Beam job's) → span/line dedup (the
   CLEAN-PIPELINE helper's three pure steps as groupByKey + cogroup) → optional MinHash
   near-dedup (``near_dedup_rdd``) → langid → bad words → split → one task per shard writes
   it with ``clean_output.write_shard``.

Counters: one Spark accumulator holding ``{stage: {reason: n}}`` (``CountersParam``); each
partition counts into a local ``CounterBag`` and adds it once when the partition is done. RDDs
read by more than one action are persisted so a recomputation cannot count twice.

Paths: local paths are opened by the executors; any other scheme (``hdfs://``, ``s3a://``,
``gs://`` through the cluster's connectors …) is listed with the cluster's Hadoop FileSystem
and read with ``sc.binaryFiles``. The output may be local or any Beam filesystem.
"""

from __future__ import annotations

import argparse
import copy
import io
import os
import re
import socket
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from c4forge.errors import C4ForgeError, ConfigError, InputError, VerificationError
from c4forge.filters.counting import CounterBag
from c4forge.formats import storage
from c4forge.pipeline import clean_output as co
from c4forge.pipeline import clean_stats as cs
from c4forge.pipeline import progress as pg
from c4forge.pipeline.inputs import InputFile, inputs_block

try:  # pyspark is an extra: import errors surface in run_clean_spark with a clear message
    from pyspark.accumulators import AccumulatorParam
except ImportError:  # pragma: no cover - exercised only without pyspark
    AccumulatorParam = object  # type: ignore[assignment,misc]

MASTER_TIMEOUT_S = 5.0
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:")  # 2+ letters: not a Windows drive
LOCAL_MASTER = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$|^local-cluster\[\d+,\d+,\d+\]$")


class SDoc(NamedTuple):
    """A page after cleaning (the Beam job's ``Doc``)."""

    url: str
    timestamp: str
    normalized_url: str
    text: str
    sentences: Any = None


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


def materialize(rdd: Any) -> Any:
    """Persist and compute ``rdd`` now. Why: two stages of one job that both read an RDD
    compute it concurrently, cache or not (seen with Spark 4.x), and counters would be
    added twice; computing it in an action of its own first makes every later read a cache hit.
    """
    from pyspark import StorageLevel

    rdd.persist(StorageLevel.MEMORY_AND_DISK)
    rdd.count()
    return rdd


def counted(acc: Any, fn: Callable[[Iterator[Any], CounterBag], Iterator[Any]]):
    """Wrap a partition function: it counts into a local bag, added to ``acc`` once at the end."""

    def run(items: Iterator[Any]) -> Iterator[Any]:
        bag = CounterBag()
        yield from fn(items, bag)
        if bag.counts:
            acc.add(bag.counts)

    return run


# --------------------------------------------------------------------------------------------
# Spark context


def check_master(master: str | None, timeout: float = MASTER_TIMEOUT_S) -> str:
    """The master URL to use; a ``spark://`` / ``k8s://`` master must accept a TCP connection
    within ``timeout`` seconds, so an unreachable cluster is a clear error, not a hang."""
    if not master:
        return "local[*]"
    if master.startswith("local"):
        if not LOCAL_MASTER.match(master):
            raise ConfigError(
                f"--master {master!r} is not a valid local master (local[N], local[*])"
            )
        return master
    if master == "yarn":
        return master
    targets: list[tuple[str, int]] = []
    if master.startswith("spark://"):
        for hostport in master[len("spark://") :].split(","):
            host, _, port = hostport.rpartition(":")
            if not host or not port.isdigit():
                raise ConfigError(f"--master {master!r}: expected spark://HOST:PORT")
            targets.append((host, int(port)))
    elif master.startswith("k8s://"):
        from urllib.parse import urlparse

        u = urlparse(master[len("k8s://") :])
        if not u.hostname:
            raise ConfigError(f"--master {master!r}: expected k8s://https://HOST:PORT")
        targets.append((u.hostname, u.port or (443 if u.scheme == "https" else 80)))
    else:
        raise ConfigError(
            f"--master {master!r} is not a Spark master URL (local[*], spark://HOST:PORT, "
            "yarn, k8s://https://HOST:PORT)"
        )
    errors = []
    for host, port in targets:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return master
        except OSError as err:
            errors.append(f"{host}:{port}: {err.strerror or err}")
    raise ConfigError(
        f"cannot reach the Spark master {master} within {timeout:.0f} s ({'; '.join(errors)}); "
        "check the URL and that the master is running"
    )


def spark_conf_pairs(extra: list[str]) -> list[tuple[str, str]]:
    """``--conf key=value`` pass-through (as spark-submit); anything else is an error."""
    pairs: list[tuple[str, str]] = []
    it = iter(extra)
    for arg in it:
        value = None
        if arg == "--conf":
            value = next(it, None)
        elif arg.startswith("--conf="):
            value = arg[len("--conf=") :]
        if value is None or "=" not in value:
            raise ConfigError(
                f"unknown option for the Spark engine: {arg!r} (only --conf key=value is "
                "passed to Spark; Beam options need --engine beam)"
            )
        key, _, val = value.partition("=")
        pairs.append((key, val))
    return pairs


def make_context(master: str | None, workers: int | None, extra: list[str], app: str = "c4forge"):
    """A SparkContext for the (checked) master; executors can import c4forge."""
    try:
        from pyspark import SparkConf, SparkContext
    except ImportError as err:
        raise ConfigError("--engine spark needs pyspark: pip install 'c4forge[spark]'") from err
    from c4forge.pipeline.spark_launch import quiet_launch, quiet_python, submitted_master

    quiet_python()
    # Under spark-submit, keep its --master unless --master was given to c4forge explicitly.
    submitted = submitted_master()
    url = check_master(master or submitted)
    if url == "local[*]" and workers and not submitted:
        url = f"local[{workers}]"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if root not in parts:  # local executors inherit the environment, not sys.path
        os.environ["PYTHONPATH"] = os.pathsep.join([root, *parts])
    conf = (
        SparkConf()
        .setMaster(url)
        .setAppName(app)
        .set("spark.ui.showConsoleProgress", "false")
        .set("spark.python.worker.reuse", "true")
    )
    if url.startswith("local"):
        conf.set("spark.ui.enabled", "false")
    if not submitted:
        quiet_launch(conf, url)
    for key, val in spark_conf_pairs(extra):
        conf.set(key, val)
    sc = SparkContext(conf=conf)
    sc.setLogLevel("ERROR")
    return sc


# --------------------------------------------------------------------------------------------
# Inputs: local files opened by executors, Hadoop paths through sc.binaryFiles


def is_hadoop_path(path: str) -> bool:
    """A URI (``hdfs://``, ``s3a://``, ``gs://``, also ``file://``) goes through the cluster's
    Hadoop FileSystem; a plain path is opened directly by the executors. Hadoop itself lists
    ``file:/x`` with one slash, hence a scheme test rather than ``://``."""
    return bool(_SCHEME.match(path))


def hadoop_list(sc: Any, specs: list[str], input_format: str = "auto") -> list[InputFile]:
    """Expand Hadoop paths/globs/folders with the cluster's FileSystem (driver side, metadata
    only). A folder contributes the files the Beam resolver would take (``*.wet.gz`` …); a
    spec that matches nothing is an InputError, as for local paths (C3)."""
    import fnmatch

    from c4forge.pipeline.inputs import _dir_patterns

    patterns = _dir_patterns(input_format)
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
                        found.append(InputFile(f.getPath().toString(), int(f.getLen())))
            else:
                found.append(InputFile(st.getPath().toString(), int(st.getLen())))
        if not found:
            raise InputError(f"input {spec!r} matches no file")
        for f in found:
            out.setdefault(f.path, f)
    return sorted(out.values())


def resolve_all(sc: Any, specs: list[str], input_format: str) -> list[InputFile]:
    """Local specs (and ``@lists``) through the Beam job's resolver, Hadoop ones through Hadoop;
    each file once."""
    from c4forge.pipeline.inputs import _read_path_list, resolve_inputs

    expanded: list[str] = []
    for spec in specs:
        expanded += _read_path_list(spec) if spec.startswith("@") else [spec]
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
    if path.startswith("file:"):
        from urllib.parse import unquote, urlparse

        return os.path.abspath(unquote(urlparse(path).path))
    return path


def _format_of_bytes(data: bytes, input_format: str) -> str:
    if input_format != "auto":
        return input_format
    from c4forge.filters import wet

    return "warc" if wet.is_crawl_warc(wet.sniff_record_types(io.BytesIO(data))) else "wet"


# --------------------------------------------------------------------------------------------
# Stage functions (module level: pickled by reference, run on executors)


def _front_pages(pages: Iterable[Any], keep_sentences: bool, bag: CounterBag) -> Iterator[tuple]:
    """length → clean (``progress.front_records``), keyed by normalized URL."""
    for rec in pg.front_records(pages, keep_sentences, bag):
        yield rec.page.normalized_url, rec


def front_local(fmt: str, max_bytes: int, keep_sentences: bool):
    def run(paths: Iterator[str], bag: CounterBag) -> Iterator[tuple]:
        from c4forge.filters.warc_html import read_path

        for path in paths:
            pages = read_path(path, bag, input_format=fmt, max_record_bytes=max_bytes)
            yield from _front_pages(pages, keep_sentences, bag)

    return run


def front_bytes(fmt: str, max_bytes: int, keep_sentences: bool):
    def run(items: Iterator[tuple[str, bytes]], bag: CounterBag) -> Iterator[tuple]:
        from c4forge.filters.warc_html import read_pages

        for path, data in items:
            kind = _format_of_bytes(data, fmt)
            name = path.rsplit("/", 1)[-1]
            pages = read_pages(
                io.BytesIO(data), name, bag, input_format=kind, max_record_bytes=max_bytes
            )
            yield from _front_pages(pages, keep_sentences, bag)

    return run


def choose_url_copies(groups: Iterator[tuple[str, Iterable[pg.FrontRecord]]], bag: CounterBag):
    for _, recs in groups:
        rec = pg.choose_front_copy(recs, bag)  # counts url_dedup + the kept copy's clean counters
        if rec is not None:
            p = rec.page
            yield SDoc(p.url, p.timestamp, p.normalized_url, rec.cleaned_text, rec.sentences)


def _span_removals(groups, bag: CounterBag):
    from c4forge.filters import dedup as dd

    for _, occurrences in groups:
        yield from dd.count_span_key(list(occurrences), bag)


def _apply_spans(items, bag: CounterBag):
    from c4forge.filters import dedup as dd

    for _, (docs, removals) in items:
        for doc in docs:  # one doc per url after URL dedup; removals may exist without a doc
            text = dd.apply_span_removals(doc.sentences, list(removals), bag)
            if text is not None:
                yield doc._replace(text=text, sentences=None)


def _apply_lines(items, bag: CounterBag):
    from c4forge.filters import dedup as dd
    from c4forge.filters.sentences import split_sentences

    for _, (docs, owned) in items:
        for doc in docs:
            text = dd.apply_line_dedup(doc.text, list(owned), bag, split_sentences)
            if text is not None:
                yield doc._replace(text=text)


def dedup_rdd(docs: Any, mode: str, acc: Any, parts: int) -> Any:
    """§8 as shuffles over the CLEAN-PIPELINE helper's pure steps (spans or lines)."""
    from c4forge.filters import dedup as dd

    by_url = docs.map(lambda d: (d.url, d))
    if mode == "spans":
        removals = (
            docs.flatMap(lambda d: dd.span_occurrences(d.url, d.sentences))
            .groupByKey(parts)
            .mapPartitions(counted(acc, _span_removals))
        )
        joined = by_url.cogroup(removals, parts)
        return joined.mapPartitions(counted(acc, _apply_spans))
    if mode == "lines":
        owned = (
            docs.flatMap(lambda d: dd.line_occurrences(d.url, d.text))
            .reduceByKey(min, parts)
            .map(lambda kv: (kv[1].url, kv[0]))
        )
        return by_url.cogroup(owned, parts).mapPartitions(counted(acc, _apply_lines))
    return docs


def _after_dedup(language: str, fraction: float):
    def run(docs: Iterator[SDoc], bag: CounterBag) -> Iterator[tuple[str, Any]]:
        from c4forge.filters.badwords import badwords_filter
        from c4forge.filters.langid import langid_filter
        from c4forge.filters.split import split_of

        for doc in docs:
            if not langid_filter(doc.text, bag, language):
                continue
            if not badwords_filter(doc.text, language, doc.normalized_url, bag, fraction):
                continue
            split = split_of(doc.normalized_url)
            bag("split", split)
            yield split, co.make_out_doc(doc.url, doc.text, doc.timestamp)

    return run


def _write_shards(directory: str, fmt: str, counts: dict[str, int]):
    def run(groups: Iterator[tuple[tuple[str, int], Iterable[Any]]]) -> Iterator[dict]:
        for (split, index), values in groups:
            docs = [v for v in values if v is not None]
            yield co.write_shard(directory, split, index, counts[split], docs, fmt)

    return run


# --------------------------------------------------------------------------------------------
# Near-dedup on RDDs (same pure functions as the Beam wiring in near_dedup_beam.py)


def _signatures(params: Any):
    def run(docs: Iterator[SDoc]) -> Iterator[tuple[bytes, tuple[str, bytes]]]:
        from c4forge.filters import minhash as mh

        for doc in docs:
            sig = mh.signature(doc.text, params)
            if sig is not None:
                yield from mh.band_entries(mh.node_id(doc.url), sig, params)

    return run


def _pair_edges(items, bag: CounterBag):
    from c4forge.filters import minhash as mh

    for pair, ok in items:
        yield from mh.pair_edge(pair, [ok], bag)


def _mark_removed(items, bag: CounterBag):
    from c4forge.filters.minhash import STAGE

    for _, (doc, flag) in items:
        if flag is None:
            bag(STAGE, "passed")
            yield doc
        else:
            bag(STAGE, "removed")


def _unconverged(items, bag: CounterBag):
    from c4forge.filters.minhash import STAGE, is_star_node

    for node, nbrs in items:
        if not is_star_node(node, nbrs):
            bag(STAGE, "unconverged")
    return iter(())


def star_components_rdd(edges: Any, parts: int, max_rounds: int, acc: Any) -> Any:
    """Large-star/small-star rounds until the edge set stops changing (or ``max_rounds``)."""
    from c4forge.filters import minhash as mh

    def step(rdd: Any, prep: Callable, star: Callable) -> Any:
        return (
            rdd.flatMap(prep)
            .groupByKey(parts)
            .flatMap(lambda kv: star(kv[0], kv[1]))
            .map(mh.canonical)
            .filter(lambda e: e is not None)
            .distinct(parts)
        )

    current = materialize(edges.map(mh.canonical).filter(lambda e: e is not None).distinct(parts))
    for _ in range(max_rounds):
        nxt = step(
            step(current, mh.large_star_input, mh.large_star), mh.small_star_input, mh.small_star
        )
        materialize(nxt)
        diff = nxt.subtract(current, parts).union(current.subtract(nxt, parts))
        changed = not diff.isEmpty()
        current.unpersist()
        current = nxt
        if not changed:
            return current
    # Round bound hit: count the nodes that are not yet in a star (info; see minhash.MAX_ROUNDS).
    current.flatMap(mh.large_star_input).groupByKey(parts).mapPartitions(
        counted(acc, _unconverged)
    ).count()
    return current


def near_dedup_rdd(docs: Any, params: Any, acc: Any, parts: int, max_rounds: int | None = None):
    """MinHash-LSH near-dedup (``c4forge.filters.minhash``) as Spark shuffles."""

    from c4forge.filters import minhash as mh

    rounds = max_rounds or mh.MAX_ROUNDS
    materialize(docs)
    candidates = (
        docs.mapPartitions(_signatures(params))
        .groupByKey(parts)
        .flatMap(lambda kv: mh.bucket_pairs(kv[1], params))
        .reduceByKey(lambda a, b: a or b, parts)  # one entry per distinct pair
    )
    edges = candidates.mapPartitions(counted(acc, _pair_edges))
    stars = star_components_rdd(edges, parts, rounds, acc)
    removed = stars.map(lambda e: (mh.removed_node(e), True)).distinct(parts)
    keyed = docs.map(lambda d: (mh.node_id(d.url), d))
    return keyed.leftOuterJoin(removed, parts).mapPartitions(counted(acc, _mark_removed))


# --------------------------------------------------------------------------------------------
# The driver


def validate_spark_args(args: argparse.Namespace) -> tuple[dict, Any]:
    """The Beam job's option checks (shared), plus near-dedup parameters."""
    from c4forge.pipeline.clean_beam import validate_args

    shim = copy.copy(args)  # the Beam check refuses options only the Beam wiring lacks
    shim.input_format, shim.near_dedup, shim.resume = "wet", "none", False
    shard_options = validate_args(shim)
    params = None
    if args.near_dedup == "minhash":
        from c4forge.filters.minhash import make_params

        params = make_params(args.ngram, args.num_perm, args.threshold)
    return shard_options, params


def _log(args: argparse.Namespace, msg: str) -> None:
    if not args.quiet:
        print(msg, file=sys.stderr, flush=True)


def run_front(sc: Any, chunk: pg.Chunk, work: pg.WorkDir, args: argparse.Namespace) -> dict:
    """Read + length + clean one chunk of inputs; persist its records; return its counters."""
    acc = sc.accumulator({}, CountersParam())
    keep = args.dedup == "spans"
    local = [f.path for f in chunk.files if not is_hadoop_path(f.path)]
    remote = [f.path for f in chunk.files if is_hadoop_path(f.path)]
    rdds = []
    if local:
        rdds.append(
            sc.parallelize(local, len(local)).mapPartitions(
                counted(acc, front_local(args.input_format, args.max_record_bytes, keep))
            )
        )
    if remote:
        rdds.append(
            sc.binaryFiles(",".join(remote), len(remote)).mapPartitions(
                counted(acc, front_bytes(args.input_format, args.max_record_bytes, keep))
            )
        )
    rdd = rdds[0] if len(rdds) == 1 else sc.union(rdds)
    work.reset(chunk)
    rdd.saveAsPickleFile(work.data_path(chunk))
    counters = acc.value
    work.mark_done(chunk, counters)
    return counters


def run_clean_spark(
    args: argparse.Namespace, extra: list[str], *, spark_context: Any = None
) -> int:
    """Entry point of ``c4forge clean --engine spark`` (``spark_context``: reuse one, tests)."""
    from c4forge.pipeline import summary

    started = time.monotonic()
    shard_options, params = validate_spark_args(args)
    master = check_master(args.master) if args.master else None  # fail fast, before the JVM
    own = spark_context is None
    sc = spark_context or make_context(master, args.workers, extra)
    try:
        return _run(sc, args, shard_options, params, started, summary)
    except C4ForgeError:
        raise
    except Exception as err:  # an executor's c4forge error arrives inside a Py4JJavaError
        from c4forge.pipeline.clean_beam import user_error_from

        user_error = user_error_from(err)
        if user_error is not None:
            raise user_error from None
        raise
    finally:
        if own:
            sc.stop()


def _run(sc: Any, args, shard_options, params, started: float, summary) -> int:

    files = resolve_all(sc, args.inputs, args.input_format)
    inputs = inputs_block(files)
    config = cs.make_config(args)
    stats_path = storage.join(args.output, cs.STATS_NAME)
    if cs.finished_run(args, stats_path, config, inputs, summary):
        return 0
    if "://" not in args.output:
        os.makedirs(args.output, exist_ok=True)

    parts = max(2, sc.defaultParallelism, len(files))  # ≥ one shuffle partition per input
    description = f"Spark {sc.master} ({sc.defaultParallelism} cores)"
    _log(
        args,
        f"c4forge clean: {inputs['count']} input file(s), {summary.human_bytes(inputs['bytes'])}"
        f" → {args.output} [dedup={args.dedup}, near-dedup={args.near_dedup}, engine={description}]",
    )

    # 1. Front, chunk by chunk (resumable).
    chunk_files = pg.chunk_files_setting()
    chunks = pg.plan_chunks(files, chunk_files)
    work = pg.WorkDir(args.output)
    job = {
        "engine": "spark",
        "config": config,
        "inputs": [c.describe() for c in chunks],
        "chunk_files": chunk_files,
    }
    resumed = work.start(job, args.resume)
    if args.resume and not resumed:
        _log(args, "  --resume: no interrupted run of this job in the output; starting fresh")
    front = CounterBag()
    for chunk in _progress(chunks, args):
        record = work.done(chunk) if resumed else None
        if record is not None:
            _log(args, f"  {chunk.name}: done by an earlier run, skipped")
        else:
            record = {"counters": run_front(sc, chunk, work, args)}
        front.merge(record["counters"])

    # 2. Final step over all chunks.
    acc = sc.accumulator({}, CountersParam())
    data = ",".join(work.data_path(c) for c in chunks)
    docs = sc.pickleFile(data).groupByKey(parts).mapPartitions(counted(acc, choose_url_copies))
    docs = dedup_rdd(materialize(docs), args.dedup, acc, parts)
    if params is not None:
        docs = near_dedup_rdd(materialize(docs), params, acc, parts)
    split_docs = docs.mapPartitions(
        counted(acc, _after_dedup(args.language, args.badwords_fraction))
    )
    materialize(split_docs)
    per_split = dict.fromkeys(co.SPLITS, 0)
    per_split.update(split_docs.countByKey())
    counts = {s: co.resolve_shards(shard_options[s], per_split[s]) for s in co.SPLITS}
    keyed = split_docs.map(lambda kv: ((kv[0], co.shard_of(kv[1].url_md5, counts[kv[0]])), kv[1]))
    markers = sc.parallelize([((s, i), None) for s in co.SPLITS for i in range(counts[s])])
    n_shards = sum(counts.values())
    shard_stats = (
        keyed.union(markers)
        .groupByKey(min(n_shards, max(parts, 1)))
        .mapPartitions(_write_shards(args.output, args.format, counts))
        .collect()
    )
    split_docs.unpersist()

    bag = CounterBag()
    bag.merge(front.counts)
    bag.merge(acc.value)
    near = params is not None
    counters = cs.full_counters(bag.counts, args.dedup, near)  # as the Beam driver does
    outputs = cs.outputs_block(shard_stats, counts)
    written = {x["file"] for x in shard_stats}
    co.remove_files(args.output, [n for n in co.list_shard_files(args.output) if n not in written])
    stats = cs.make_stats(config, inputs, counters, outputs, args.dedup, near)
    if stats["conservation_errors"]:
        raise VerificationError(
            "the counters do not add up (a page was lost without a reason): "
            + "; ".join(stats["conservation_errors"])
        )
    with storage.atomic_writer(stats_path) as f:
        f.write(cs.stats_text(stats).encode("utf-8"))
    work.finish()

    wall = time.monotonic() - started
    png = None
    if args.report:
        from c4forge.pipeline.funnel_chart import write_funnel_png

        png = write_funnel_png(stats, storage.join(args.output, "funnel.png"))
    if not args.quiet:
        print(summary.render(stats, args.output, wall, description, "accumulator", png))
    return 0


def _progress(chunks: list[pg.Chunk], args: argparse.Namespace):
    if args.quiet or len(chunks) < 2:
        return chunks
    from tqdm import tqdm

    return tqdm(chunks, desc="input chunks", unit="chunk", file=sys.stderr)
