"""Checkpoints: layout, safetensors round trip, exact resume (in process and after a SIGKILL),
and refusal of corrupt checkpoints or mismatched vocabularies / shard sets."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import train_fixtures as fx  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from c4forge.errors import OutputExistsError, VerificationError  # noqa: E402
from c4forge.io.storage import read_json, write_json  # noqa: E402
from c4forge.trainers import checkpoint as ckpt  # noqa: E402
from c4forge.trainers.metrics import read_metrics  # noqa: E402
from c4forge.trainers.train import TrainOptions, train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckptdata")
    fx.build_data(root, docs=40, inputs_length=32)
    return root


def _opts(data, out, **kw) -> TrainOptions:
    return fx.tiny_options(data, out, **{"steps": 6, "save_every": 3, "shuffle_window": 2, **kw})


def _losses(run) -> list[tuple[int, float]]:
    return [
        (r["step"], r["loss"])
        for r in read_metrics(os.path.join(run, "metrics.jsonl"))
        if "loss" in r
    ]


def _final_weights(run) -> dict[str, torch.Tensor]:
    return load_file(os.path.join(ckpt.latest_checkpoint(str(run)), "model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("full") / "run"
    summary = train(_opts(data, out))
    return out, summary


def test_layout_and_contents(uninterrupted):
    out, summary = uninterrupted
    assert summary.steps == 6 and summary.checkpoint.endswith("step-00000006")
    names = sorted(os.listdir(ckpt.checkpoints_dir(str(out))))
    assert names == ["latest", "step-00000003", "step-00000006"]  # no .tmp- leftovers
    path = ckpt.latest_checkpoint(str(out))
    assert sorted(os.listdir(path)) == [
        "config.json",
        "model.safetensors",
        "optimizer.safetensors",
        "trainer_state.json",
    ]
    weights = load_file(os.path.join(path, "model.safetensors"))
    assert "shared.weight" in weights and "lm_head.weight" in weights
    assert not any("embed_tokens" in k for k in weights)
    assert all(t.dtype == torch.float32 for t in weights.values())
    opt = load_file(os.path.join(path, "optimizer.safetensors"))
    # Adafactor: factored row/col statistics for matrices, a step counter per parameter
    assert "shared.weight.step" in opt and float(opt["shared.weight.step"]) == 6.0
    assert any(k.endswith(".row_var") for k in opt)
    state = read_json(os.path.join(path, "trainer_state.json"))
    assert state["step"] == 6 and state["examples"] == 24
    cfg = state["config"]
    assert cfg["vocab_sha256"] == cfg["vocabulary"]["sha256"] and os.path.isdir(cfg["vocab_dir"])
    assert len(cfg["shards_index_sha256"]) == 64 and cfg["model"]["ffn"] == "geglu"
    assert read_json(os.path.join(path, "config.json")) == cfg["model"]
    assert "torch_cpu" in state["rng"] and state["versions"]["torch"] == torch.__version__


def test_resume_in_process_is_bitwise_exact(data, uninterrupted, tmp_path):
    full, _ = uninterrupted
    out = tmp_path / "run"
    train(_opts(data, out, stop_after_step=3))  # k steps of the 2k-step schedule, then stop
    assert ckpt.latest_checkpoint(str(out)).endswith("step-00000003")
    resumed = train(_opts(data, out, resume="auto"))  # fresh objects, loaded from disk
    assert resumed.start_step == 3 and resumed.steps == 6
    assert _losses(out) == _losses(full)  # floats compared exactly
    a, b = _final_weights(full), _final_weights(out)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    oa = load_file(os.path.join(ckpt.latest_checkpoint(str(full)), "optimizer.safetensors"))
    ob = load_file(os.path.join(ckpt.latest_checkpoint(str(out)), "optimizer.safetensors"))
    assert all(torch.equal(oa[k], ob[k]) for k in oa)


def _cli(args, env=None, crash_after=None):
    """``c4forge train ARGS`` in a subprocess; with ``crash_after`` it is SIGKILLed after that
    step by the test-only tests/killed_train.py (a step hook, no switch in the trainer)."""
    prefix = ["-m", "c4forge", "train"]
    if crash_after is not None:
        prefix = [os.path.join(ROOT, "tests", "killed_train.py"), str(crash_after)]
    return subprocess.run(
        [sys.executable, *prefix, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_killed_run_resumes_with_the_same_losses(data, uninterrupted, tmp_path):
    full, _ = uninterrupted
    out = tmp_path / "killed"
    common = [
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
        "1",
        "--save-every",
        "3",
        "--eval-rows",
        "8",
        "--no-progress",
        "--shuffle-batches",
        "2",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    first = _cli(common, env, crash_after=4)
    assert first.returncode == -9, first.stderr  # SIGKILL after step 4; checkpoint 3 is latest
    assert ckpt.latest_checkpoint(str(out)).endswith("step-00000003")
    assert [s for s, _ in _losses(out)] == [1, 2, 3, 4]  # step 4 was logged before the kill
    second = _cli([*common, "--resume"], env)
    assert second.returncode == 0, second.stderr
    assert "trained steps 3 → 6" in second.stdout
    assert _losses(out) == _losses(full)
    a, b = _final_weights(full), _final_weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


def _flip_a_byte(path: str) -> None:
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))


def test_corrupt_latest_checkpoint_falls_back_to_the_newest_intact(
    data, uninterrupted, tmp_path, capsys
):
    """A bad sha256 in the latest checkpoint: resume from the newest intact one with a warning
    (and still end bitwise equal to the uninterrupted run); none intact: a clear refusal."""
    full, _ = uninterrupted
    out = tmp_path / "run"
    shutil.copytree(full, out)
    latest = ckpt.latest_checkpoint(str(out))
    _flip_a_byte(os.path.join(latest, "model.safetensors"))
    resumed = train(_opts(data, out, resume="auto"))
    err = capsys.readouterr().err
    assert "model.safetensors: corrupt checkpoint" in err and "step-00000003" in err
    assert resumed.start_step == 3 and _losses(out) == _losses(full)
    a, b = _final_weights(full), _final_weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)  # step 6 was rewritten, intact again
    # both corrupt (a torn trainer_state.json, a flipped tensor byte): refused, naming both
    with open(os.path.join(latest, "trainer_state.json"), "w") as f:
        f.write('{"format": "c4forge.trainer_state", "step": ')  # torn write
    _flip_a_byte(os.path.join(ckpt.checkpoints_dir(str(out)), "step-00000003", "model.safetensors"))
    with pytest.raises(VerificationError, match="no intact checkpoint") as refused:
        train(_opts(data, out, resume="auto", steps=9))
    assert "trainer_state.json: corrupt" in str(refused.value)
    assert "step-00000003/model.safetensors: corrupt" in str(refused.value)
    # an explicitly named corrupt checkpoint is refused (no fallback from a user's choice)
    with pytest.raises(VerificationError, match="model.safetensors: corrupt checkpoint"):
        train(
            _opts(data, out, resume=os.path.join(ckpt.checkpoints_dir(str(out)), "step-00000003"))
        )
    # without --resume an existing run is never silently restarted
    with pytest.raises(OutputExistsError, match="--resume"):
        train(_opts(data, out))


def test_mismatched_vocabulary_or_shards_are_refused(data, uninterrupted, tmp_path):
    full, _ = uninterrupted
    other_vocab = tmp_path / "vocab2"
    shutil.copytree(data / "vocab", other_vocab)
    desc = read_json(str(other_vocab / "vocab.json"))
    desc["sha256"] = "f" * 64
    write_json(str(other_vocab / "vocab.json"), desc)
    out = tmp_path / "run"
    shutil.copytree(full, out)
    saved = read_json(os.path.join(ckpt.latest_checkpoint(str(out)), "trainer_state.json"))
    sha = saved["config"]["vocab_sha256"]
    with pytest.raises(VerificationError) as err:
        train(_opts(data, out, resume="auto", steps=9, vocab=str(other_vocab)))
    assert sha in str(err.value) and "f" * 64 in str(err.value)
    # same rows, but a different manifest (index.json bytes differ): refused with both hashes
    shards2 = tmp_path / "shards2"
    shutil.copytree(data / "shards", shards2)
    index = read_json(str(shards2 / "index.json"))
    index["created_by"] = "another build"
    write_json(str(shards2 / "index.json"), index)
    with pytest.raises(VerificationError, match="index.json") as err:
        train(_opts(data, out, resume="auto", steps=9, shards=str(shards2)))
    assert saved["config"]["shards_index_sha256"] in str(err.value)
    # and a new run on shards of another vocabulary is refused before any work
    with pytest.raises(VerificationError, match="f" * 64):
        train(_opts(data, tmp_path / "new", vocab=str(other_vocab)))


def test_optimizer_state_round_trips_for_adamwscale(data, tmp_path):
    out = tmp_path / "adamw"
    train(_opts(data, out, optimizer="adamwscale", steps=2, save_every=0, warmup=1))
    from c4forge.trainers.config import ModelConfig
    from c4forge.trainers.models.t5 import GLUTransformer
    from c4forge.trainers.optim import build_optimizer

    path = ckpt.latest_checkpoint(str(out))
    model = GLUTransformer(ModelConfig.from_dict(read_json(os.path.join(path, "config.json"))))
    opt = build_optimizer("adamwscale", model.parameters())
    state = ckpt.load_checkpoint(path, model, opt)
    assert state["step"] == 2
    again = tmp_path / "again"
    ckpt.save_checkpoint(
        str(again), 2, model, opt, {"config": state["config"]}, state["config"]["model"]
    )
    a = load_file(os.path.join(path, "optimizer.safetensors"))
    b = load_file(os.path.join(ckpt.latest_checkpoint(str(again)), "optimizer.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert {k.rsplit(".", 1)[1] for k in a} == {"step", "exp_avg", "exp_avg_sq"}
    assert json.loads(json.dumps(state["optimizer_meta"]))["param_groups"][0]["betas"] == [
        0.9,
        0.999,
    ]
