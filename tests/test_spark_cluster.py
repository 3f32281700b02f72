"""`c4forge clean --engine spark` submitted to a real Spark standalone cluster, as the README
tells users: a master and two workers on 127.0.0.1 (``tests/spark_cluster.py``), the job
launched by ``spark-submit`` with c4forge shipped to the executors (``--py-files`` of a zip of
the package, ``spark.pyspark.python`` naming this interpreter: the README's alternative to a
packed environment), and its output compared byte for byte with the Beam job's.

The workers start with no ``PYTHONPATH``: their executors can import c4forge only from what
the job shipped. Every process the cluster started is stopped in the fixture's finaliser.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from clean_fixtures import DERIVED_WET, GENUINE_WET_DIR, REPO

pytest.importorskip("pyspark")

from spark_cluster import spark_home, standalone_cluster  # noqa: E402

from c4forge.cli import main  # noqa: E402
from c4forge.engines.java import find_java, use_java  # noqa: E402

INPUTS = [DERIVED_WET, GENUINE_WET_DIR]


def zip_package(path: Path) -> Path:
    """The c4forge package of this tree as a --py-files zip (code and package data)."""
    root = Path(REPO)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted((root / "c4forge").rglob("*")):
            if f.is_file() and "__pycache__" not in f.parts:
                z.write(f, f.relative_to(root).as_posix())
    return path


@pytest.fixture(scope="module")
def beam_out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("beam") / "out"
    assert main(["clean", *INPUTS, "-o", str(out), "--workers", "1", "--quiet"]) == 0
    return out


@pytest.mark.slow
def test_spark_submit_to_a_standalone_cluster_equals_beam(beam_out, tmp_path):
    package = zip_package(tmp_path / "c4forge.zip")
    out = tmp_path / "spark-out"
    started = time.monotonic()
    with standalone_cluster(tmp_path / "cluster", workers=2) as cluster:
        submit = [os.path.join(spark_home(), "bin", "spark-submit"), "--master", cluster.master_url]
        submit += ["--py-files", str(package), "--conf", f"spark.pyspark.python={sys.executable}"]
        submit += ["--conf", "spark.executor.memory=768m", "--conf", "spark.cores.max=2"]
        script = os.path.join(REPO, "c4forge", "__main__.py")
        job = [script, "clean", *INPUTS, "-o", str(out), "--engine", "spark"]
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        use_java(env)  # spark-submit's own JVM: the same choice c4forge makes
        java = find_java(env)  # what the driver inside spark-submit then reports
        done = subprocess.run(
            submit + job, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=420
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + cluster.logs()
        apps = cluster.state()["completedapps"]
        executors = sorted((tmp_path / "cluster").glob("worker-*/app-*/*"))
    took = time.monotonic() - started
    print(f"cluster up + spark-submit + cluster down: {took:.1f} s")
    # spark-submit passes the Python driver's stderr on to its stdout.
    assert f"engine=Spark {cluster.master_url} (2 cores, {java.describe()})" in done.stdout
    assert len(apps) == 1 and apps[0]["state"] == "FINISHED"
    # One executor on each worker (separate JVMs, each with its own Python workers).
    assert {p.parent.parent.name for p in executors} == {"worker-0", "worker-1"}, executors

    beam = json.loads((beam_out / "stats.json").read_text())
    assert (out / "stats.json").read_bytes() == (beam_out / "stats.json").read_bytes()
    files = [f["file"] for split in beam["outputs"].values() for f in split["files"]]
    assert beam["outputs"]["train"]["documents"] > 20
    for name in files:
        assert (out / name).read_bytes() == (beam_out / name).read_bytes(), name
    assert sorted(os.listdir(out)) == sorted(os.listdir(beam_out))  # no _work left


# The JVM's own module-system notice: Spark 4's launcher always adds this incubator module
# (org.apache.spark.launcher.JavaModuleOptions) and no logging setting reaches that line.
JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


@pytest.mark.slow
def test_local_spark_console_shows_only_c4forge_lines(tmp_path):
    """No Spark start-up noise on a default `--engine spark` run: no log4j banner, no
    SPARK_LOCAL_IP or NativeCodeLoader warning, no pandas FutureWarning from pyspark."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    env.pop("SPARK_LOCAL_IP", None)
    cmd = [sys.executable, "-m", "c4forge", "clean", DERIVED_WET, "-o", str(tmp_path / "out")]
    cmd += ["--engine", "spark", "--master", "local[1]"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    ours = ("c4forge clean", "clean ", "Spark web UI: ")  # its lines, progress lines, UI address
    noise = [line for line in lines if not line.startswith(ours) and line != JVM_NOTICE]
    assert noise == [], "\n".join(noise)
    assert any(line.startswith("c4forge clean: 1 input file(s)") for line in lines)
    assert "conservation check: OK" in done.stdout


@pytest.mark.slow
def test_local_spark_workers_run_this_interpreter_not_paths_python3(tmp_path):
    """`--engine spark` run by an interpreter that is not PATH's `python3` (a virtual
    environment used without activating it): PATH's python3 here is a stand-in that cannot run
    anything, so the job passes only if the Python workers run ``sys.executable``."""
    fake = tmp_path / "bin"
    fake.mkdir()
    for name in ("python3", "python"):
        (fake / name).write_text("#!/bin/sh\necho 'wrong interpreter: PATH python3' >&2\nexit 3\n")
        (fake / name).chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}{os.pathsep}{os.environ.get('PATH', '')}")
    env["PYTHONPATH"] = os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")])
    env.pop("PYSPARK_PYTHON", None)
    env.pop("PYSPARK_DRIVER_PYTHON", None)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "c4forge", "clean", DERIVED_WET, "-o", str(out)]
    cmd += ["--engine", "spark", "--master", "local[1]"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "wrong interpreter" not in done.stderr
    assert json.loads((out / "stats.json").read_text())["outputs"]["train"]["documents"] > 0
