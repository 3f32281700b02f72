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


# Beam's displays: a stage behind a shuffle has no total until the pipeline ends ("1,855 item")
BEAM_LINE = re.compile(
    r"^clean (?P<stage>\w+)(?: \((?P<title>[^)]*)\))?: (?P<done>\d+)(?:/(?P<total>\d+))? "
    r"(?P<unit>\w+)(?: \((?P<pct>\d+)%\))? \[[^\]]*pages=(?P<pages>[\d,]+)\]$"
)


def shard_bytes(out: str) -> dict[str, bytes]:
    names = sorted(n for n in os.listdir(out) if n.startswith("c4-"))
    assert names, os.listdir(out)
    return {n: open(os.path.join(out, n), "rb").read() for n in names}


def test_beam_shows_each_stage_to_100_percent(sample_wet, tmp_path):
    out = str(tmp_path / "beam")
    done = run_clean(sample_wet, out, "--engine", "beam")
    lines = [m for m in map(BEAM_LINE.match, done.stderr.splitlines()) if m]
    stages = list(dict.fromkeys(m["stage"] for m in lines))
    # the read, a corpus-wide stage (a shuffle of every chunk's keys) and the per-chunk passes
    assert {"wet", "url_dedup", "dedup", "pass0", "pass1", "output"} <= set(stages), done.stderr
    for stage in stages:  # every display ends at 100 %, with a count
        last = [m for m in lines if m["stage"] == stage][-1]
        assert last["total"] == last["done"] and last["pct"] == "100", last.string
        assert int(last["done"]) > 0, last.string
    read = [m for m in lines if m["stage"] == "wet"]
    assert (read[-1]["done"], read[-1]["unit"]) == ("3", "file")
    assert read[-1]["title"] == "read → length → clean"
    assert int(lines[-1]["pages"].replace(",", "")) == pages_read(out)
    # the URL dedup groups every page's URL: its keys are the distinct URLs read
    url = [m for m in lines if m["stage"] == "url_dedup"][-1]
    assert 0 < int(url["done"]) <= pages_read(out)
    # the tallies change no output: the same shards as the run without progress
    quiet = str(tmp_path / "quiet")
    run_clean(sample_wet, quiet, "--engine", "beam", "--quiet")
    assert shard_bytes(out) == shard_bytes(quiet)


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


def test_beam_step_tallies_make_one_display_per_stage(capsys, monkeypatch, tmp_path):
    """The driver's side of Beam's displays, fed tallies as the DoFns write them: a source's
    display closes at its total, a stage behind a shuffle shows a count (no total) and closes
    at 100 % once a step behind its shuffle starts, a stage waiting on nothing new writes no
    line, the last stage ends at 100 % with the pipeline, a failed one where it stopped."""
    from c4forge.engines.progress_bar import StepTallies, write_tally

    monkeypatch.setenv(EVERY_ENV, "0")  # a line on every update: the lines are the figures
    plan = ProgressPlan("clean", {"wet": "read"}, {"wet": "file"}, ("wet", "pages"))
    steps = ["wet", "url_dedup", "url_dedup/route", "pass0"]
    after = {"url_dedup": {"wet"}, "url_dedup/route": {"wet"}}
    after["pass0"] = {"wet", "url_dedup", "url_dedup/route"}
    finished = {k: frozenset(v) for k, v in after.items()}

    def lines() -> list[str]:
        return capsys.readouterr().err.splitlines()

    with StepTallies(plan, steps, {"wet": 2}, finished, enabled=True, interval=3600) as t:
        assert t.directory is not None

        def tally(label: str, items: int, pages: int = 0, **edge: bool) -> None:
            write_tally(t.directory, label, items, pages, **edge)
            t._read()
            t._show()

        tally("wet", 0, started=True)
        assert lines()[-1].startswith("clean wet (read): 0/2 file (0%)")
        tally("wet", 1, 40)
        tally("wet", 1, 60, finished=True)
        assert lines()[-1].startswith("clean wet (read): 2/2 file (100%)")
        tally("url_dedup", 0, started=True)
        tally("url_dedup", 5)
        last = lines()[-1]
        assert last.startswith("clean url_dedup: 5 item [") and last.endswith("pages=100]")
        tally("url_dedup", 0, finished=True)
        t._show()
        assert lines() == []  # idle, unchanged: no line
        tally("pass0", 0, started=True)  # behind URL dedup's shuffle: URL dedup is done
        out = lines()
        assert out[0].startswith("clean url_dedup: 5/5 item (100%)"), out
        assert out[1].startswith("clean pass0: 0 item"), out
        tally("pass0", 3)
    assert lines()[-1].startswith("clean pass0: 3/3 item (100%)")

    with pytest.raises(RuntimeError), StepTallies(plan, steps, {"wet": 2}, enabled=True) as t:
        write_tally(t.directory, "wet", 1, 7, started=True)
        raise RuntimeError("a worker died")
    assert lines()[-1].startswith("clean wet (read): 1/2 file (50%)")
    write_tally(str(tmp_path / "gone"), "wet", 1, 0)  # a tally that cannot be written: no error
