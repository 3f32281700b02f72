"""A checkpoint is checked before use by every command that reads one: a bit-flipped
``model.safetensors`` is a one-line error (exit 2) for export, finetune, evaluate and glue;
results.json records the sha256 of the bytes actually read; ``checkpoints/latest`` naming a
folder outside ``checkpoints/`` is not followed. A real tiny T5 run trained on span-corruption
shards of the bundled C4 sample (``finetune_fixtures.tiny_t5_run``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

torch = pytest.importorskip("torch")

from cli_errors import one_line_error  # noqa: E402
from finetune_fixtures import GLUE, finetune_argv, tiny_t5_run  # noqa: E402

from c4forge.cli import main  # noqa: E402
from c4forge.trainers import checkpoint as ckpt  # noqa: E402


@pytest.fixture(scope="module")
def t5_run(tmp_path_factory):
    return tiny_t5_run(tmp_path_factory.mktemp("ckptrun"))


@pytest.fixture
def flipped(t5_run, tmp_path):
    """A copy of the run whose latest model.safetensors has one bit flipped (same size)."""
    run = str(tmp_path / "flipped")
    shutil.copytree(t5_run, run)
    weights = os.path.join(ckpt.latest_checkpoint(run), "model.safetensors")
    data = bytearray(open(weights, "rb").read())
    data[-3] ^= 0x40  # inside the last tensor: a weight changes, the file still parses
    open(weights, "wb").write(bytes(data))
    return run


@pytest.mark.parametrize("command", ["export", "finetune", "evaluate", "glue"])
def test_a_bit_flipped_checkpoint_is_refused(flipped, tmp_path, capsys, command):
    out = str(tmp_path / "out")
    argv = {
        "export": ["export", flipped, "--output", out],
        "finetune": finetune_argv(flipped, "sst2", out),
        "evaluate": ["evaluate", flipped, "--task", "sst2", "--data", GLUE, "--no-progress"],
        "glue": [
            "glue",
            flipped,
            "--data",
            GLUE,
            "-o",
            out,
            "--tasks",
            "sst2",
            "--steps",
            "1",
            "--no-progress",
        ],
    }[command]
    one_line_error(capsys, argv, "model.safetensors: corrupt checkpoint (sha256 ")
    assert not os.path.exists(out) or not os.listdir(out)


def test_results_record_the_sha256_of_the_bytes_read(t5_run, tmp_path):
    out = str(tmp_path / "ft")
    assert main(finetune_argv(t5_run, "sst2", out, steps=1)) == 0
    results = json.load(open(os.path.join(out, "results.json")))
    weights = os.path.join(ckpt.latest_checkpoint(t5_run), "model.safetensors")
    assert (
        results["checkpoint_fingerprint"] == hashlib.sha256(open(weights, "rb").read()).hexdigest()
    )


@pytest.mark.parametrize(
    "name", ["/{abs}/step-00000004", "../elsewhere/step-00000004", "x/../step-00000004"]
)
def test_latest_is_never_followed_out_of_its_folder(t5_run, tmp_path, capsys, name):
    run = str(tmp_path / "run")
    shutil.copytree(t5_run, run)
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(ckpt.latest_checkpoint(run), elsewhere / "step-00000004")
    name = name.format(abs=str(elsewhere).lstrip("/"))
    with open(os.path.join(run, "checkpoints", "latest"), "w") as f:
        f.write(name + "\n")
    one_line_error(
        capsys, ["export", run, "--output", str(tmp_path / "hf")], "not a step-NNNNNNNN folder"
    )
    one_line_error(capsys, finetune_argv(run, "sst2", str(tmp_path / "ft")), "latest: names")
