"""Progress off a terminal (c4forge.progress): plain periodic lines with the bar's figures, no
carriage-return frames; a real `c4forge vocab` job with its stderr piped."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest

from c4forge.errors import ConfigError
from c4forge.progress import EVERY_ENV, LineProgress, line_every_seconds, progress

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C4_SAMPLE = os.path.join(REPO, "c4forge", "data", "sample", "c4-sample.00000-of-00001.json.gz")


def test_lines_carry_done_total_percentage_eta_rate_and_postfix():
    out = io.StringIO()
    bar = LineProgress(total=4, desc="train", unit="step", file=out, every=0)
    for _ in range(4):
        bar.update(1)
        bar.set_postfix(loss="3.2500")
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and "\r" not in out.getvalue()
    assert re.fullmatch(
        r"train: 2/4 step \(50%\) \[\d\d:\d\d<\d\d:\d\d, .*step/s, loss=3\.2500\]", lines[1]
    )
    assert lines[-1].startswith("train: 4/4 step (100%)")


def test_lines_wait_for_the_interval_and_the_last_one_is_always_written():
    out = io.StringIO()
    with LineProgress(range(1000), desc="docs", unit="doc", file=out, every=3600) as bar:
        assert sum(1 for _ in bar) == 1000
    assert out.getvalue().splitlines() == [out.getvalue().strip()]  # one line: the final one
    assert out.getvalue().startswith("docs: 1000/1000 doc (100%)")


def test_a_total_learnt_after_the_last_line_gets_a_last_line():
    """A display without a total (a Beam stage behind a shuffle) given one at the end: its
    last line shows it, though the count did not move since the line before."""
    out = io.StringIO()
    bar = LineProgress(total=None, desc="clean dedup", unit="item", file=out, every=0)
    bar.update(5)
    bar.total = 5
    bar.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("clean dedup: 5 item [")
    assert lines[-1].startswith("clean dedup: 5/5 item (100%)") and len(lines) == 2


def test_a_terminal_gets_tqdm_and_a_pipe_gets_lines(tmp_path):
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    from tqdm import tqdm

    assert isinstance(progress(total=3, file=Terminal()), tqdm)
    assert isinstance(progress(total=3, file=io.StringIO()), LineProgress)


def test_a_bad_interval_is_a_config_error(monkeypatch):
    monkeypatch.setenv(EVERY_ENV, "ten")
    with pytest.raises(ConfigError, match=EVERY_ENV):
        line_every_seconds()
    monkeypatch.setenv(EVERY_ENV, "2.5")
    assert line_every_seconds() == 2.5


def run_vocab(tmp_path, every: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    env[EVERY_ENV] = every
    cmd = [sys.executable, "-m", "c4forge", "vocab", C4_SAMPLE, "-o", str(tmp_path / every)]
    cmd += ["--vocab-size", "300"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


def test_a_real_job_piped_writes_plain_periodic_lines(tmp_path):
    done = run_vocab(tmp_path, "0")  # a line at every update
    assert "\r" not in done.stderr and "\x1b" not in done.stderr
    lines = re.findall(r"^sampling en: (\d+) docs \[\d\d:\d\d, .*docs/s\]$", done.stderr, re.M)
    assert len(lines) == 1000 and lines[-1] == "1000"
    assert [int(n) for n in lines] == sorted(int(n) for n in lines)


def test_a_bad_interval_stops_a_job_with_one_line(tmp_path):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    env[EVERY_ENV] = "-1"
    cmd = [sys.executable, "-m", "c4forge", "vocab", C4_SAMPLE, "-o", str(tmp_path / "v")]
    done = subprocess.run(cmd + ["--vocab-size", "300"], env=env, capture_output=True, text=True)
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert EVERY_ENV in done.stderr
