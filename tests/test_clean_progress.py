"""`c4forge clean` shows its progress on every engine: with its stderr piped (a log) and
``C4FORGE_PROGRESS_SECONDS=1``, a plain line per stage and period, with done/total, %,
elapsed<ETA, rate and the pages read so far, every stage ending at 100 %; Spark's run names
its web UI. The input is the bundled real sample (three WET files, 3.2 MB)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

from c4forge.engines.stage_progress import ProgressPlan, StageBars
from c4forge.progress import EVERY_ENV

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# "clean pass1 (dedup applied → langid → …): 11/27 task (41%) [00:01<00:01,  9.00task/s, pages=1,861]"
STAGE_LINE = re.compile(
    r"^clean (?P<stage>\w+)(?: \((?P<title>[^)]*)\))?: (?P<done>\d+)/(?P<total>\d+) "
    r"(?P<unit>\w+) \((?P<pct>\d+)%\) \[\d\d:\d\d<[^,]+, [^,]+, pages=(?P<pages>[\d,]+)\]$"
)


@pytest.fixture(scope="module")
def sample_wet(tmp_path_factory) -> str:
    from c4forge.samples import demo_inputs

    root = tmp_path_factory.mktemp("progress")
    wet = root / "wet"
    wet.mkdir()
    for path in demo_inputs(str(root / "made")):
        shutil.copy(path, wet)
    return str(wet)


def run_clean(wet: str, out: str, *extra: str, every: str = "1") -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    env[EVERY_ENV] = every
    cmd = [sys.executable, "-m", "c4forge", "clean", wet, "-o", out, "--workers", "2", *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "\r" not in done.stderr and "\x1b" not in done.stderr  # lines, not bar frames
    return done


def stage_lines(stderr: str) -> list[re.Match]:
    return [m for m in map(STAGE_LINE.match, stderr.splitlines()) if m]


def check_stages(lines: list[re.Match], pages: int) -> list[str]:
    """Every stage's lines in one run, its last at 100 %; returns the stages in order."""
    order: list[str] = []
    for m in lines:
        if not order or order[-1] != m["stage"]:
            assert m["stage"] not in order, f"stage {m['stage']} shown twice apart"
            order.append(m["stage"])
    for stage in order:
        last = [m for m in lines if m["stage"] == stage][-1]
        assert last["done"] == last["total"] and last["pct"] == "100", last.string
    assert int(lines[-1]["pages"].replace(",", "")) == pages
    return order


def pages_read(out: str) -> int:
    import json

    with open(os.path.join(out, "stats.json")) as f:
        return json.load(f)["counters"]["wet"]["pages"]


def test_local_engine_prints_a_line_per_stage_and_period(sample_wet, tmp_path):
    out = str(tmp_path / "local")
    # a period far shorter than the read (0.5 s on an idle 2-core machine): lines between
    done = run_clean(sample_wet, out, "--engine", "local", every="0.05")
    lines = stage_lines(done.stderr)
    order = check_stages(lines, pages_read(out))
    assert order == ["wet", "url_dedup", "chunks", "pass0", "dedup", "pass1", "output"]
    read = [m for m in lines if m["stage"] == "wet"]
    assert read[-1]["unit"] == "file" and read[-1]["total"] == "3"
    assert read[-1]["title"] == "read → length → clean"
    # the read of three files takes far longer than a period: lines before a stage's last
    assert len(lines) > len(order), done.stderr


def test_spark_prints_its_jobs_progress_and_names_its_web_ui(sample_wet, tmp_path):
    pytest.importorskip("pyspark")
    out = str(tmp_path / "spark")
    done = run_clean(sample_wet, out, "--engine", "spark", "--master", "local[2]")
    # a local master retries a failed task: local[2] runs as local[2,4]
    assert "Spark web UI: off on local[2,4] (--conf spark.ui.enabled=true)" in done.stderr
    lines = stage_lines(done.stderr)
    check_stages(lines, pages_read(out))
    assert all(m["title"].startswith("Spark: every step up to ") for m in lines)
    # Spark computes lazily: one action runs most steps; the title says which one runs
    # (which step a tick catches depends on the machine's speed: any step named will do)
    assert any("; running " in m["title"] for m in lines), done.stderr
    assert len(lines) > 5, done.stderr  # the JVM and the read alone take seconds


def test_beam_reads_its_files_to_100_percent(sample_wet, tmp_path):
    out = str(tmp_path / "beam")
    done = run_clean(sample_wet, out, "--engine", "beam")
    lines = re.findall(
        r"^(?:reading WET|read; now [^:]+): (\d+)/3 file \((\d+)%\) \[\d\d:\d\d<[^,]+, [^\]]+\]$",
        done.stderr,
        re.M,
    )
    assert lines and lines[-1] == ("3", "100"), done.stderr
    # a line per period, not one at the end: Beam's start and read alone take seconds
    assert len(lines) >= 3, done.stderr


def test_stage_bars_end_each_stage_at_100_percent(capsys):
    """A stage of two steps (its total grows), a polled step ended by the engine, and a
    failed job whose figures stay where the work stopped."""
    counts = {"wet": {"pages": 0}}
    plan = ProgressPlan("clean", {"wet": "read"}, {"wet": "file"}, ("wet", "pages"))
    with StageBars(plan, lambda: counts) as bars:
        bars.begin("wet", 2)
        bars.advance()
        counts["wet"]["pages"] = 40
        bars.advance()
        bars.begin("dedup/emit", 3)
        bars.advance()
        bars.begin("dedup/resolve", 4)  # same stage: 7 tasks, 1 done
        polled = [(0, 5)]
        bars.begin("output/write", poll=lambda: polled[-1])
        polled.append((2, 6))  # the step returns before the display saw its last task
        bars.end()
    err = capsys.readouterr().err.splitlines()
    assert err[-3].startswith("clean wet (read): 2/2 file (100%)") and "pages=40" in err[-3]
    assert err[-2].startswith("clean dedup: 7/7 task (100%)")
    assert err[-1].startswith("clean output: 6/6 task (100%)")

    with pytest.raises(RuntimeError), StageBars(plan, lambda: counts) as bars:
        bars.begin("wet", 3)
        bars.advance()
        raise RuntimeError("a worker died")
    assert capsys.readouterr().err.splitlines()[-1].startswith("clean wet (read): 1/3 file (33%)")
