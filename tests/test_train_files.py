"""What a training run leaves on disk: file modes of the weights (checkpoint and export) and
metrics.jsonl after a kill and ``--resume`` between two logs."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import train_fixtures as fx  # noqa: E402

from c4forge.trainers import checkpoint as ckpt  # noqa: E402
from c4forge.trainers.export import export  # noqa: E402
from c4forge.trainers.metrics import read_metrics  # noqa: E402
from c4forge.trainers.train import train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMINGS = ("tokens_per_s", "nonpad_tokens_per_s", "step_time_s", "mfu")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("filesdata")
    fx.build_data(root, docs=40, inputs_length=32)
    return root


@pytest.fixture
def umask_022():
    before = os.umask(0o022)
    yield
    os.umask(before)


def _modes(folder) -> dict[str, int]:
    return {n: stat.S_IMODE(os.stat(os.path.join(folder, n)).st_mode) for n in os.listdir(folder)}


def test_weights_are_written_with_the_mode_of_every_other_file(data, tmp_path, umask_022):
    """safetensors creates its files 0600; the run's other files follow the umask (0644 here):
    the checkpoint's and the export's weights must too."""
    run = tmp_path / "run"
    train(fx.tiny_options(data, run, steps=1))
    step_dir = ckpt.latest_checkpoint(str(run))
    hf = tmp_path / "hf"
    export(str(run), str(hf))
    for folder in (step_dir, str(hf)):
        modes = _modes(folder)
        assert "model.safetensors" in modes
        assert modes == dict.fromkeys(modes, 0o644), folder
    # another umask is honoured as a plain open() would
    os.umask(0o027)
    again = tmp_path / "hf2"
    export(str(run), str(again))
    assert set(_modes(again).values()) == {0o640}


def _cli(args, crash_after=None):
    """``c4forge train ARGS`` in a subprocess; with ``crash_after`` SIGKILLed after that step
    (tests/killed_train.py: a step hook, no switch in the trainer)."""
    prefix = ["-m", "c4forge", "train"]
    if crash_after is not None:
        prefix = [os.path.join(ROOT, "tests", "killed_train.py"), str(crash_after)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, *prefix, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _records(run) -> list[dict]:
    """metrics.jsonl without its timings (wall-clock, never equal between two runs)."""
    return [
        {k: v for k, v in r.items() if k not in TIMINGS}
        for r in read_metrics(os.path.join(run, "metrics.jsonl"))
    ]


def test_killed_and_resumed_run_logs_the_straight_runs_metrics(data, tmp_path):
    """Logs every 3 steps, checkpoints every 4: the checkpoint at step 4 falls inside the
    window 4–6, so the resumed run's step-6 record must still average steps 4, 5 and 6."""

    def common(out):
        return [
            str(data / "shards"),
            "--output",
            str(out),
            "--steps",
            "9",
            "--preset",
            "tiny",
            "--batch-size",
            "4",
            "--vocab",
            str(data / "vocab"),
            "--log-every",
            "3",
            "--save-every",
            "4",
            "--eval-rows",
            "8",
            "--no-progress",
            "--shuffle-batches",
            "2",
        ]

    straight = tmp_path / "straight"
    done = _cli(common(straight))
    assert done.returncode == 0, done.stderr
    killed = tmp_path / "killed"
    first = _cli(common(killed), crash_after=5)
    assert first.returncode == -9, first.stderr
    assert ckpt.latest_checkpoint(str(killed)).endswith("step-00000004")
    resumed = _cli([*common(killed), "--resume"])
    assert resumed.returncode == 0, resumed.stderr
    want = _records(straight)
    assert [r["step"] for r in want] == [3, 6, 9, 9]  # logs, then the final eval
    assert _records(killed) == want


def test_two_ranks_resumed_between_logs_log_the_straight_runs_metrics(data, tmp_path):
    """Under DDP each rank's window sums are its own: the checkpoint gathers every rank's, and a
    resume on as many ranks gives each its own back (the next log adds them in the same order)."""

    def run(out, *extra):
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc_per_node=2",
            "-m",
            "c4forge",
            "train",
            str(data / "shards"),
            "--output",
            str(out),
            "--steps",
            "6",
            "--preset",
            "tiny",
            "--batch-size",
            "4",
            "--vocab",
            str(data / "vocab"),
            "--log-every",
            "3",
            "--save-every",
            "4",
            "--eval-rows",
            "8",
            "--no-progress",
            *extra,
        ]
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]

    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run(straight)
    run(resumed, "--stop-after-step", "4")
    state = ckpt.read_trainer_state(ckpt.latest_checkpoint(str(resumed)))
    assert len(state["log_window"]["ranks"]) == 2 and state["log_window"]["step"] == 3
    run(resumed, "--resume")
    assert [r["step"] for r in _records(straight)] == [3, 6, 6]
    assert _records(resumed) == _records(straight)


def test_export_says_the_upstream_tie_warning_is_expected(data, tmp_path, capsys):
    """transformers 5.x ties T5's head whatever config.json says and logs that it will NOT tie
    two different tensors; no key of the folder changes what it reads (``T5Config`` forces
    ``tie_word_embeddings``). The export says so, and that the warning's own advice breaks the
    model: loading with ``tie_word_embeddings=False`` leaves the input embeddings random."""
    transformers = pytest.importorskip("transformers")
    from c4forge.cli import main
    from c4forge.trainers.cli_export import UNTIED_NOTE

    run, hf = tmp_path / "run", tmp_path / "hf"
    train(fx.tiny_options(data, run, steps=1))
    capsys.readouterr()
    assert main(["export", str(run), "-o", str(hf)]) == 0
    assert UNTIED_NOTE in capsys.readouterr().out
    model = transformers.T5ForConditionalGeneration.from_pretrained(str(hf))
    assert torch.equal(model.encoder.embed_tokens.weight, model.shared.weight)
    assert not torch.equal(model.lm_head.weight, model.shared.weight)  # untied, as trained
    if int(transformers.__version__.split(".")[0]) >= 5:
        advised = transformers.T5ForConditionalGeneration.from_pretrained(
            str(hf), tie_word_embeddings=False
        )
        assert not torch.equal(advised.encoder.embed_tokens.weight, advised.shared.weight)
