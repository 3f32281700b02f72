"""`c4forge train` owns its run folder: a second run is refused naming the holder, and a
resumed run removes what a killed checkpoint save left (real tiny CPU runs)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("torch")

import train_fixtures as fx  # noqa: E402
from test_output_ownership import hold  # noqa: E402

from c4forge.io import ownership  # noqa: E402
from c4forge.trainers import checkpoint as ckpt  # noqa: E402
from c4forge.trainers.train import train  # noqa: E402


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("owndata")
    fx.build_data(root, docs=40, inputs_length=32)
    return root


def _opts(data, out, **kw):
    return fx.tiny_options(data, out, **{"steps": 4, "save_every": 2, "shuffle_window": 2, **kw})


def test_second_train_run_is_refused(data, tmp_path):
    out = tmp_path / "run"
    proc = hold(out)
    try:
        with pytest.raises(ownership.OutputBusyError, match=f"pid {proc.pid}"):
            train(_opts(data, out))
        assert sorted(os.listdir(out)) == [ownership.LOCK_NAME]  # nothing trained, nothing written
    finally:
        proc.kill()
        proc.wait()


def test_resume_removes_a_killed_saves_leftovers(data, tmp_path):
    out = tmp_path / "run"
    train(_opts(data, out, stop_after_step=2))
    root = out / "checkpoints"
    partial = root / "step-00000004.tmp-4242"  # a save killed mid-write
    partial.mkdir()
    (partial / "model.safetensors").write_bytes(b"partial")
    (root / "latest.tmp-4242-0a1b2c3d").write_text("step-00000004\n")
    train(_opts(data, out, resume="auto"))
    names = sorted(os.listdir(root))
    assert not [n for n in names if ".tmp-" in n], names
    assert ckpt.latest_checkpoint(str(out)).endswith("step-00000004")
    assert not (out / ownership.LOCK_NAME).exists()


def test_export_holds_its_folder_beside_it(data, tmp_path):
    """export renames its folder into place, so it is held through a lock file next to it."""
    from c4forge.trainers.export import export

    run = tmp_path / "run"
    train(_opts(data, run, steps=2))
    hf = tmp_path / "hf"
    parent, name = ownership.beside(str(hf))
    proc = hold(parent, name)
    try:
        with pytest.raises(ownership.OutputBusyError, match=f"pid {proc.pid}"):
            export(str(run), str(hf))
        assert not hf.exists()
    finally:
        proc.kill()
        proc.wait()
    export(str(run), str(hf))  # the holder gone: a stale lock taken over, the folder written
    assert (hf / "config.json").exists() and not (tmp_path / name).exists()
