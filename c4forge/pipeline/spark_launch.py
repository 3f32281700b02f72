"""How the Spark driver starts, or joins, its JVM: Spark's start-up noise silenced before
c4forge launches one; the master that ``spark-submit`` chose when it launched it.

Why here and not in a user's ``conf/``: a pip-installed pyspark has no configuration folder, so
every ``c4forge clean --engine spark`` printed Spark's default-profile banner, "Your hostname
resolves to a loopback address … Set SPARK_LOCAL_IP", NativeCodeLoader's "Unable to load
native-hadoop library" and a pandas FutureWarning from pyspark's own imports, none of which
is about the job. Warnings and errors that are (a failed task, a lost executor) still show.
"""

from __future__ import annotations

import importlib.resources
import os
import warnings
from typing import Any

LOG4J_OPTION = "-Dlog4j2.configurationFile="


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
