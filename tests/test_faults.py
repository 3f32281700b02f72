"""A worker's death, a failed write and a duplicate attempt, on every engine: the real engines
really retry (faults injected at the writers' commit point, ``c4forge.faults``), and the output
is byte-identical to a run without faults. The fault-matrix benchmark is
``benchmarks/fault_matrix.py``; these are its fast cases, on real inputs (a WET derived from
real WARC HTML, genuine Common Crawl WETs, a real crawl WARC), one chunk per file so that
there are several tasks to retry."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from clean_fixtures import DERIVED_WET, GENUINE_WET_DIR, REPO, subprocess_env
from shards_fixtures import corpus_fixtures, files_of_dir, shards_argv

from c4forge import faults
from c4forge.engines.local_pool import TaskPool
from c4forge.errors import TaskFailedError

work, docs, vocab_dir, vocab = corpus_fixtures(
    "faults-shards", per_train_file=150, total=400, vocab_size=600, sample_chars=200_000
)
INPUTS = [DERIVED_WET, GENUINE_WET_DIR, os.path.join(REPO, "tests/data/warc/sample-0000.warc.gz")]


def clean(
    out: Path | str, *args: str, timeout: int = 300, **env: str
) -> subprocess.CompletedProcess:
    """``c4forge clean`` of the inputs in a process of its own (a fault may kill a worker; a
    hang fails the test instead of stopping the suite)."""
    cmd = [sys.executable, "-m", "c4forge", "clean", *INPUTS, "-o", str(out), "--quiet", *args]
    return subprocess.run(
        cmd, env=subprocess_env(**env), cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def outputs(out: Path) -> dict[str, bytes]:
    """The finished folder's files (the temporary files a killed writer leaves are debris,
    not output: ``debris``)."""
    return {
        p.name: p.read_bytes()
        for p in sorted(out.iterdir())
        if p.is_file() and ".tmp-" not in p.name
    }


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> dict[str, bytes]:
    out = tmp_path_factory.mktemp("ref") / "out"
    done = clean(out, "--engine", "local", "--workers", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    files = outputs(out)
    assert "stats.json" in files and any(n.startswith("c4-train") for n in files)
    return files


# --- the local engine's worker processes ----------------------------------------------------


def _die_once(marker: str, value: int) -> int:
    """A task whose first attempt is killed as the OOM killer does."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return value * 10
    os.kill(os.getpid(), signal.SIGKILL)
    return -1


def _die(value: int) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return value


def test_task_pool_reruns_the_task_of_a_killed_worker(tmp_path: Path) -> None:
    pool = TaskPool(2, attempts=4)
    try:
        tasks = [(_die_once, (str(tmp_path / f"m{i % 2}"), i)) for i in range(6)]
        assert pool.run("step", tasks) == [0, 10, 20, 30, 40, 50]
        assert pool.retried == 2  # one death per marker
        assert pool.run("again", [(_die_once, (str(tmp_path / "m0"), 7))]) == [70]
    finally:
        pool.close()


def test_task_pool_replaces_a_worker_killed_while_idle(tmp_path: Path) -> None:
    pool = TaskPool(2, attempts=1)  # a death while idle costs no attempt
    try:
        assert pool.run("first", [(abs, (-3,))] * 2) == [3, 3]
        for w in pool.workers:
            os.kill(w.process.pid, signal.SIGKILL)
            w.process.join()
        assert pool.run("second", [(abs, (-4,)), (abs, (-5,))]) == [4, 5]
    finally:
        pool.close()


def test_a_pool_never_closed_stops_its_workers_when_collected() -> None:
    """A pool dropped without ``close`` (an engine its caller never closed) must not leave its
    forked workers waiting for the driver's death: each is a copy of the driver's memory."""
    import gc

    pool = TaskPool(2)
    assert pool.run("step", [(abs, (-3,)), (abs, (-4,))]) == [3, 4]
    processes = [w.process for w in pool.workers]
    assert len(processes) == 2 and all(p.is_alive() for p in processes)
    del pool
    gc.collect()
    assert not any(p.is_alive() for p in processes)


def test_task_pool_gives_up_after_its_attempts(tmp_path: Path) -> None:
    pool = TaskPool(2, attempts=3)
    try:
        with pytest.raises(
            TaskFailedError, match=r"step 'out/write': task 2 of 2 killed by SIGKILL.*3 attempt"
        ):
            pool.run("out/write", [(_die_once, (str(tmp_path / "m"), 1)), (_die, (2,))])
    finally:
        pool.close()


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper does not count)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:\tZ") for line in f)
    except FileNotFoundError:
        return False


def test_task_pool_workers_leave_when_the_driver_is_killed() -> None:
    import time

    script = (
        "import os, signal, sys\n"
        "from c4forge.engines.local_pool import TaskPool\n"
        "pool = TaskPool(2)\n"
        "pool.run('x', [(abs, (-1,)), (abs, (-2,))])\n"
        "print(' '.join(str(w.process.pid) for w in pool.workers), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    pids = [int(p) for p in done.stdout.split()]
    assert done.returncode == -signal.SIGKILL and len(pids) == 2
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(_alive(p) for p in pids)


def _fail(value: int) -> int:
    raise OSError(28, "No space left on device", f"/out/part-{value}")


def test_task_pool_lasting_write_failure_is_one_line(tmp_path: Path) -> None:
    pool = TaskPool(2, attempts=2)
    try:
        with pytest.raises(
            TaskFailedError, match=r"task 1 of 1 failed: OSError: .*No space.*2 attempt"
        ):
            pool.run("output/write", [(_fail, (1,))])
        with pytest.raises(ZeroDivisionError):  # a bug keeps its traceback
            pool.run("output/write", [(divmod, (1, 0))])
    finally:
        pool.close()


def test_local_spark_masters_retry_a_task(monkeypatch) -> None:
    from c4forge.engines.spark_launch import check_master, with_task_attempts

    assert check_master("local[2,3]") == "local[2,3]"  # local[N,F] as Spark spells it
    assert with_task_attempts("local[2]") == "local[2,4]"
    assert with_task_attempts("local[*]") == "local[*,4]"
    assert with_task_attempts("local") == "local[1,4]"
    assert with_task_attempts("local[2,1]") == "local[2,1]"  # F given: kept
    assert with_task_attempts("spark://h:7077") == "spark://h:7077"
    monkeypatch.setenv("C4FORGE_TASK_ATTEMPTS", "6")
    assert with_task_attempts("local[2]") == "local[2,6]"


def test_fault_specs_are_checked() -> None:
    assert faults.parse("c4-*:kill, *.run:raise:each") == [
        faults.Fault("c4-*", "kill", "once"),
        faults.Fault("*.run", "raise", "each"),
    ]
    for bad in ("c4-*", "c4-*:explode", "c4-*:kill:twice"):
        with pytest.raises(ValueError, match="PATTERN:ACTION"):
            faults.parse(bad)


def test_local_worker_killed_mid_write_reruns_its_task(reference, tmp_path: Path) -> None:
    """SIGKILL of the worker writing a chunk's pages and of the one writing the train shard,
    each with its bytes written but not committed; the train shard's second attempt is killed
    just after its commit: the tasks run again, same bytes."""
    markers = tmp_path / "markers"
    done = clean(
        tmp_path / "out",
        "--engine",
        "local",
        "--workers",
        "2",
        C4FORGE_FAULT="chunk-*.pages.gz:kill,c4-train*:kill,c4-train*:kill-after",
        C4FORGE_FAULT_MARKERS=str(markers),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert faults.fired(str(markers)) == 3
    assert done.stderr.count("killed by SIGKILL (out of memory?); attempt 2 of 4") == 2
    assert done.stderr.count("killed by SIGKILL (out of memory?); attempt 3 of 4") == 1
    assert outputs(tmp_path / "out") == reference


def test_local_retries_spent_is_one_line_then_resume_finishes(reference, tmp_path: Path) -> None:
    out = tmp_path / "out"
    failed = clean(
        out,
        "--engine",
        "local",
        "--workers",
        "2",
        C4FORGE_FAULT="c4-train*:kill:always",
        C4FORGE_TASK_ATTEMPTS="2",
    )
    assert failed.returncode == 2
    lines = failed.stderr.strip().splitlines()
    assert "Traceback" not in failed.stderr
    assert lines[-1].startswith("c4forge clean: error: step 'output/")
    assert "killed by SIGKILL" in lines[-1] and "2 attempt(s)" in lines[-1]
    assert "--resume" in lines[-1]
    assert not (out / "stats.json").exists()
    resumed = clean(out, "--engine", "local", "--workers", "2", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert outputs(out) == reference


def test_local_exception_mid_write_and_duplicate_attempts(reference, tmp_path: Path) -> None:
    """Every sorted run's write fails once (retried), and every task runs twice at once (a
    speculative duplicate): the writers commit the same bytes whichever attempt wins."""
    markers = tmp_path / "markers"
    done = clean(
        tmp_path / "out",
        "--engine",
        "local",
        "--workers",
        "2",
        C4FORGE_FAULT="*.run:raise:each,*:duplicate",
        C4FORGE_FAULT_MARKERS=str(markers),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    fired = os.listdir(markers)
    assert sum(n.startswith("duplicate-") for n in fired) >= 10  # every step's tasks doubled
    assert sum(not n.startswith("duplicate-") for n in fired) >= 2  # one failure per run file
    assert "InjectedFault" in done.stderr
    assert outputs(tmp_path / "out") == reference


def test_shards_on_the_local_engine_survive_kills_failures_and_duplicates(work, docs, vocab_dir):
    """``shards``: the workers writing a train shard and a validation shard are killed, every
    sorted run's write fails once, every task runs twice: the bytes of a fault-free build."""

    def build(out: Path, **env: str) -> subprocess.CompletedProcess:
        argv = shards_argv(
            docs,
            vocab_dir,
            str(out),
            "--batch-rows",
            "100",
            "--quiet",
            "--engine",
            "local",
            "--workers",
            "2",
            inputs_length=128,
            num_shards="train=3,validation=2",
        )
        return subprocess.run(
            [sys.executable, "-m", "c4forge", *argv],
            env=subprocess_env(**env),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=300,
        )

    ref = build(work / "ref")
    assert ref.returncode == 0, ref.stderr[-3000:]
    markers = work / "markers"
    done = build(
        work / "faulty",
        C4FORGE_FAULT="train-?????-of-?????.arrow:kill,validation-?????-of-?????.arrow:kill,"
        "*-of-*.?????.arrow:raise:each,*:duplicate",
        C4FORGE_FAULT_MARKERS=str(markers),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    fired = os.listdir(markers)
    assert sum(not n.startswith("duplicate-") for n in fired) >= 2 + 5  # 2 kills, ≥ 5 runs
    assert any(n.startswith("duplicate-") for n in fired)
    want = files_of_dir(str(work / "ref"))
    got = {k: v for k, v in files_of_dir(str(work / "faulty")).items() if ".tmp-" not in k}
    assert got == want


# --- Beam: the FnApiRunner, bundles failed once mid-write and run twice ---------------------


@pytest.mark.parametrize("workers", ["1", "2"])
def test_beam_bundles_failed_mid_write_and_run_twice(
    reference, tmp_path: Path, workers: str
) -> None:
    """Every side-effecting write of the workers (chunk files, sorted runs, shards) fails once
    mid-write, and every element is processed twice: the same bytes as the fault-free run
    (Beam's output equals the local engine's, ``benchmarks/identity.py``)."""
    markers = tmp_path / "markers"
    done = clean(
        tmp_path / "out",
        "--engine",
        "beam",
        "--workers",
        workers,
        C4FORGE_FAULT="chunk-*:raise:each,c4-train*:raise:each,*:duplicate",
        C4FORGE_FAULT_MARKERS=str(markers),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    fired = os.listdir(markers)
    assert sum(not n.startswith("duplicate-") for n in fired) >= 17  # 4 chunks × 4 files, a shard
    assert any(n.startswith("duplicate-") for n in fired)
    assert outputs(tmp_path / "out") == reference


def test_beam_worker_killed_is_one_line_then_resume_finishes(reference, tmp_path: Path) -> None:
    """The multi-process FnApiRunner never retries a bundle: a killed SDK worker ends the run
    with one line (exit 2), and ``--resume`` finishes with the fault-free bytes."""
    out = tmp_path / "out"
    failed = clean(
        out,
        "--engine",
        "beam",
        "--workers",
        "2",
        C4FORGE_FAULT="c4-train*:kill",
        C4FORGE_FAULT_MARKERS=str(tmp_path / "markers"),
    )
    assert failed.returncode == 2, failed.stderr[-3000:]
    last = failed.stderr.strip().splitlines()[-1]
    assert last.startswith("c4forge clean: error: a Beam worker process died"), last
    assert not (out / "stats.json").exists()
    resumed = clean(out, "--engine", "beam", "--workers", "2", "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert outputs(out) == reference


# --- Spark: Python workers killed, retried by Spark -----------------------------------------


@pytest.mark.slow
def test_spark_workers_killed_writes_failed_and_duplicate_attempts(
    reference, tmp_path: Path
) -> None:
    """``local[2]`` (made ``local[2,4]``: a task gets four attempts, as on a cluster): the
    Python worker writing a chunk's pages and the one writing the train shard are killed, a
    sorted run's write fails, and every partition runs twice (a speculative attempt that
    lost: Spark itself never speculates on one machine)."""
    pytest.importorskip("pyspark")
    markers = tmp_path / "markers"
    done = clean(
        tmp_path / "out",
        "--engine",
        "spark",
        "--master",
        "local[2]",
        C4FORGE_FAULT="chunk-*.pages.gz:kill,c4-train*:kill,*.run:raise,*:duplicate",
        C4FORGE_FAULT_MARKERS=str(markers),
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    fired = os.listdir(markers)
    assert sum(not n.startswith("duplicate-") for n in fired) == 3
    assert sum(n.startswith("duplicate-") for n in fired) >= 10
    assert outputs(tmp_path / "out") == reference


@pytest.mark.slow
def test_spark_retries_spent_is_one_line_then_resume_finishes(reference, tmp_path: Path) -> None:
    """Every attempt of the task writing the train shard is killed: Spark gives up on it
    (``local[2,4]``: four attempts) and the run ends with one line naming the task and saying
    how to go on, not Spark's stack traces; ``--resume`` then finishes with the same bytes."""
    pytest.importorskip("pyspark")
    out = tmp_path / "out"
    failed = clean(
        out,
        "--engine",
        "spark",
        "--master",
        "local[2]",
        C4FORGE_FAULT="c4-train*:kill:always",
        timeout=600,
    )
    assert failed.returncode == 2, failed.stderr[-3000:]
    last = failed.stderr.strip().splitlines()[-1]
    assert "Traceback" not in failed.stderr
    assert last.startswith("c4forge clean: error: Spark task "), last
    assert "failed 4 time(s)" in last and "--resume" in last, last
    assert not (out / "stats.json").exists()
    resumed = clean(out, "--engine", "spark", "--master", "local[2]", "--resume", timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert outputs(out) == reference


@pytest.mark.slow
def test_spark_speculative_copy_of_a_straggler_leaves_the_same_bytes(reference, tmp_path: Path):
    """Real speculation (``spark.speculation=true``) on a standalone cluster whose two workers
    are two hosts to Spark (127.0.0.1 and 127.0.0.2: Spark never speculates on a local master,
    nor on the host of the running attempt): the task writing chunk 1's pages stalls before
    its commit, Spark launches a copy elsewhere, both commit the same bytes."""
    pytest.importorskip("pyspark")
    from spark_cluster import standalone_cluster

    markers = tmp_path / "markers"
    executor_env = {
        "PYTHONPATH": REPO,
        faults.FAULT_ENV: "chunk-00001.pages.gz:stall",
        faults.MARKERS_ENV: str(markers),
        faults.STALL_ENV: "25",
    }
    conf = {
        "spark.speculation": "true",
        "spark.speculation.interval": "200ms",
        "spark.speculation.multiplier": "1.5",
        "spark.speculation.quantile": "0.5",
        "spark.speculation.minTaskRuntime": "1s",
        "spark.pyspark.python": sys.executable,
        "spark.executor.memory": "768m",
        "spark.cores.max": "2",
        **{f"spark.executorEnv.{k}": v for k, v in executor_env.items()},
    }
    args = [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
    hosts = ("127.0.0.1", "127.0.0.2")
    with standalone_cluster(tmp_path / "cluster", workers=2, hosts=hosts) as cluster:
        done = clean(
            tmp_path / "out",
            "--engine",
            "spark",
            "--master",
            cluster.master_url,
            *args,
            timeout=600,
        )
    assert done.returncode == 0, done.stderr[-3000:]
    fired = sorted(os.listdir(markers))
    assert len(fired) >= 2 and any(n.startswith("again-") for n in fired), fired
    assert outputs(tmp_path / "out") == reference


# --- S3 output: a retried task leaves no partial object -------------------------------------


def test_s3_output_of_a_killed_writer_has_no_partial_object(reference, tmp_path: Path) -> None:
    pytest.importorskip("boto3")
    pytest.importorskip("moto.server")
    from moto_s3 import BUCKET, running_server

    with running_server() as s3:
        s3.make_bucket()
        out = f"s3://{BUCKET}/faults"
        markers = tmp_path / "markers"
        done = clean(
            out,
            "--engine",
            "local",
            "--workers",
            "2",
            C4FORGE_FAULT="c4-train*:kill,*.run:raise",
            C4FORGE_FAULT_MARKERS=str(markers),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert faults.fired(str(markers)) == 2
        assert s3.objects(out) == reference  # no temporary or partial object beside them
