"""`c4forge vocab` shows SentencePiece's training as it runs: pruning rounds done of those
expected, read from the trainer's own (hidden) log, a line per period in a log, ending at 100 %.

The input is the bundled real C4 sample (1,000 documents); the trainer is real SentencePiece.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytest.importorskip("sentencepiece")

from train_fixtures import SAMPLE  # noqa: E402

from c4forge.progress import EVERY_ENV  # noqa: E402
from c4forge.vocab.train_progress import SUB_ITERATIONS, read_state  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PIECES = 2000
# "vocab training: 2/6 round (33%) [00:01<00:03,  1.27round/s, phase=EM, 6,064 pieces → 2,200]"
LINE = re.compile(
    r"^vocab training: (?P<done>\d+)/(?P<total>\d+) round \((?P<pct>\d+)%\) "
    r"\[\d\d:\d\d<[^,]+, [^,]+, phase=(?P<phase>.*)\]$"
)


def _vocab(out: str, tmp: str, *extra: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TMPDIR=tmp, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([REPO, env.get("PYTHONPATH", "")])
    env[EVERY_ENV] = "0"  # a line on every update: each round the display sees
    cmd = [sys.executable, "-m", "c4forge", "vocab", SAMPLE, "-o", out]
    cmd += ["--vocab-size", str(PIECES), "--num-threads", "1", *extra]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("vocab_progress")
    tmp = root / "tmp"
    tmp.mkdir()
    shown = _vocab(str(root / "shown"), str(tmp))
    verbose = _vocab(str(root / "verbose"), str(tmp), "--verbose")
    return root, tmp, shown, verbose


def test_training_shows_its_rounds_and_ends_at_100_percent(runs):
    root, tmp, shown, _ = runs
    lines = [m for m in map(LINE.match, shown.stderr.splitlines()) if m]
    assert lines, shown.stderr
    last = lines[-1]
    assert last["done"] == last["total"] and last["pct"] == "100", last.string
    assert int(last["total"]) >= 2  # 32,000 seed pieces down to 2,200 take several rounds
    assert last["phase"].endswith(f"pieces → {int(PIECES * 1.1):,}")
    # the trainer's own log stays hidden, and its temporary file is gone
    for noise in ("trainer_spec", "unigram_model_trainer", "EM sub_iter"):
        assert noise not in shown.stderr
    assert os.listdir(tmp) == []
    # the display does not change the model
    model = "sentencepiece.model"
    with open(root / "shown" / model, "rb") as a, open(root / "verbose" / model, "rb") as b:
        assert a.read() == b.read()


def test_the_rounds_expected_after_the_first_are_the_rounds_run(runs):
    """The estimate from SentencePiece's shrinking factor, checked on its real log: after each
    round, the rounds expected equal the rounds the trainer went on to run."""
    log = runs[3].stderr
    assert "EM sub_iter=" in log  # --verbose shows the log itself, no display
    assert "vocab training:" not in log
    final = read_state(log, PIECES)
    assert final.rounds >= 2 and final.total == final.rounds
    ends = [m.end() for m in re.finditer(rf"EM sub_iter={SUB_ITERATIONS - 1} size=\d+.*\n", log)]
    assert len(ends) == final.rounds
    for k, end in enumerate(ends, 1):
        state = read_state(log[:end], PIECES)
        assert (state.rounds, state.total) == (k, final.rounds), log[:end][-300:]
    assert read_state("", PIECES).phase == "starting"
    # a line the trainer is still writing ("size=10" of "size=10799") is not read yet
    cut = log[: ends[0]].rstrip("\n")
    cut = cut[: cut.rindex("size=") + len("size=") + 2]
    assert read_state(cut, PIECES).rounds == 0
