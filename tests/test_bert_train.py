"""`c4forge train` on real `bert_mlm_nsp` shards (the bundled sample through the real `vocab` and
`shards` code): the loss starts near ln E and falls, metrics, exact resume (in process and after
a SIGKILL), DDP, every FFN, one-line errors, and the run's own vocabulary copy."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

from bert_fixtures import SEQ, build_bert_data  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

from c4forge.cli import main  # noqa: E402
from c4forge.io.storage import read_json, write_json  # noqa: E402
from c4forge.trainers import checkpoint as ckpt  # noqa: E402
from c4forge.trainers import models  # noqa: E402
from c4forge.trainers.config import FFN_VARIANTS  # noqa: E402
from c4forge.trainers.metrics import read_metrics  # noqa: E402
from c4forge.trainers.train import TrainOptions, train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = ("loss", "mlm_loss", "nsp_loss", "mlm_acc", "nsp_acc")


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return build_bert_data(tmp_path_factory.mktemp("bertdata"))


def _opts(data, out, **kw) -> TrainOptions:
    base = {
        "shards": data["shards"],
        "output": str(out),
        "preset": "bert-tiny",
        "steps": 4,
        "batch_size": 4,
        "vocab": data["vocab"],
        "log_every": 1,
        "eval_rows": 16,
        "progress": False,
        "lr": 1e-3,
    }
    return TrainOptions(**{**base, **kw})


def _records(run):
    return read_metrics(os.path.join(run, "metrics.jsonl"))


def _losses(run):
    return [{k: r[k] for k in PARTS} for r in _records(run) if "loss" in r]


def _weights(run):
    return load_file(os.path.join(ckpt.latest_checkpoint(str(run)), "model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(bert, tmp_path_factory):
    out = tmp_path_factory.mktemp("bert-full") / "run"
    train(_opts(bert, out, steps=6, save_every=3, shuffle_window=2))
    return out


def test_loss_starts_near_ln_e_and_falls(bert, tmp_path):
    out = tmp_path / "run"
    summary = train(
        _opts(bert, out, steps=60, batch_size=16, eval_every=30, eval_rows=64, log_every=5)
    )
    records = [r for r in _records(out) if "loss" in r]
    e = read_json(os.path.join(bert["shards"], "index.json"))["vocabulary"]["embedding_size"]
    first = records[0]
    assert abs(first["mlm_loss"] - math.log(e)) < 0.5  # N(0, 0.02) init: near-uniform logits
    assert abs(first["nsp_loss"] - math.log(2)) < 0.2
    assert first["loss"] == pytest.approx(first["mlm_loss"] + first["nsp_loss"])
    assert records[-1]["mlm_loss"] < first["mlm_loss"] - 1.0
    assert 0 <= records[-1]["mlm_acc"] <= 1 and 0 <= records[-1]["nsp_acc"] <= 1
    evals = [r for r in _records(out) if "eval_loss" in r]
    assert len(evals) == 2 and evals[-1]["eval_mlm_loss"] < evals[0]["eval_mlm_loss"]
    assert {"eval_mlm_acc", "eval_nsp_loss", "eval_nsp_acc"} <= set(evals[-1])
    text = summary.text()
    assert "held-out MLM loss" in text and "NSP loss" in text and summary.tokens_per_s > 0
    assert summary.curve and os.path.getsize(summary.curve) > 10_000
    state = read_json(os.path.join(ckpt.latest_checkpoint(str(out)), "trainer_state.json"))
    cfg = state["config"]
    assert cfg["family"] == "bert" and cfg["training"]["optimizer"] == "adamw"
    assert cfg["training"]["schedule"] == "linear" and cfg["training"]["warmup"] == 6
    assert cfg["training"]["grad_clip"] == 1.0 and cfg["model"]["dropout_rate"] == 0.1
    assert state["tokens"] == 60 * 16 * SEQ
    # the run keeps its vocabulary, fingerprint-checked
    assert sorted(os.listdir(out / "vocab")) == [
        "sentencepiece.extra_ids.model",
        "sentencepiece.model",
        "vocab.json",
    ]
    assert read_json(str(out / "vocab" / "vocab.json"))["sha256"] == cfg["vocab_sha256"]


def test_adamw_decays_weights_but_not_biases_or_layernorm(bert, uninterrupted):
    state = read_json(
        os.path.join(ckpt.latest_checkpoint(str(uninterrupted)), "trainer_state.json")
    )
    groups = state["optimizer_meta"]["param_groups"]
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]
    assert all(g["eps"] == 1e-6 and g["betas"] == [0.9, 0.999] for g in groups)
    loaded = models.load_pretrained(str(uninterrupted))
    names = [n for n, _ in loaded.model.named_parameters()]
    opt = load_file(os.path.join(loaded.checkpoint, "optimizer.safetensors"))
    assert {k.rsplit(".", 1)[1] for k in opt} == {"step", "exp_avg", "exp_avg_sq"}
    assert all(f"{n}.exp_avg" in opt for n in names)


def test_resume_in_process_is_bitwise_exact_with_dropout(bert, uninterrupted, tmp_path):
    out = tmp_path / "run"
    train(_opts(bert, out, steps=6, save_every=3, shuffle_window=2, stop_after_step=3))
    resumed = train(_opts(bert, out, steps=6, save_every=3, shuffle_window=2, resume="auto"))
    assert resumed.start_step == 3
    assert _losses(out) == _losses(uninterrupted)  # exact floats, dropout 0.1 included
    a, b = _weights(uninterrupted), _weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_killed_run_resumes_bitwise(bert, uninterrupted, tmp_path):
    out = tmp_path / "killed"
    args = [
        bert["shards"],
        "--output",
        str(out),
        "--steps",
        "6",
        "--preset",
        "bert-tiny",
        "--batch-size",
        "4",
        "--vocab",
        bert["vocab"],
        "--log-every",
        "1",
        "--lr",
        "1e-3",
        "--save-every",
        "3",
        "--eval-rows",
        "16",
        "--no-progress",
        "--shuffle-batches",
        "2",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    killer = os.path.join(ROOT, "tests", "killed_train.py")
    first = subprocess.run(
        [sys.executable, killer, "4", *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert first.returncode == -9, first.stderr[-2000:]  # SIGKILL after step 4
    assert ckpt.latest_checkpoint(str(out)).endswith("step-00000003")
    second = subprocess.run(
        [sys.executable, "-m", "c4forge", "train", *args, "--resume"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert second.returncode == 0, second.stderr[-2000:]
    assert "trained steps 3 → 6" in second.stdout
    assert _losses(out) == _losses(uninterrupted)
    a, b = _weights(uninterrupted), _weights(out)
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_ddp_two_ranks_match_one_rank_with_accumulation(bert, tmp_path):
    """torchrun × 2 (gloo), dropout on: per-micro-batch seeding gives both splits the same masks."""
    single = tmp_path / "single"
    train(_opts(bert, single, steps=2, grad_accum=2))
    ddp = tmp_path / "ddp"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "c4forge",
        "train",
        bert["shards"],
        "--output",
        str(ddp),
        "--steps",
        "2",
        "--preset",
        "bert-tiny",
        "--batch-size",
        "4",
        "--vocab",
        bert["vocab"],
        "--lr",
        "1e-3",
        "--log-every",
        "1",
        "--eval-rows",
        "16",
        "--no-progress",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("trained steps 0 → 2") == 1
    for x, y in zip(_losses(ddp), _losses(single)):
        assert x == pytest.approx(y, rel=1e-5)
    a, b = _weights(single), _weights(ddp)
    for k in a:
        torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("ffn", sorted(FFN_VARIANTS))
def test_every_ffn_trains(bert, tmp_path, ffn):
    summary = train(_opts(bert, tmp_path / ffn, steps=2, ffn=ffn, eval_rows=4))
    assert math.isfinite(summary.final_loss)
    cfg = read_json(os.path.join(ckpt.latest_checkpoint(str(tmp_path / ffn)), "config.json"))
    assert cfg["ffn"] == ffn and cfg["family"] == "bert"


def test_other_optimizers_stay_selectable(bert, tmp_path):
    for name in ("adafactor", "adamwscale"):
        summary = train(_opts(bert, tmp_path / name, steps=2, optimizer=name, warmup=1))
        assert math.isfinite(summary.final_loss)


def test_run_takes_the_vocabulary_the_shards_carry(bert, tmp_path):
    shards = tmp_path / "shards"
    shutil.copytree(bert["shards"], shards)
    assert (shards / "vocab" / "sentencepiece.model").is_file()  # `c4forge shards` wrote the copy
    out = tmp_path / "run"
    train(_opts(bert, out, shards=str(shards), vocab=None, steps=1))
    assert read_json(str(out / "vocab" / "vocab.json")) == read_json(
        os.path.join(bert["vocab"], "vocab.json")
    )


def _bad_positions(bert, tmp_path):
    """A copy of the shard set whose first train row predicts position SEQ (past the end)."""
    import pyarrow as pa

    from c4forge.formats import shards as fmt

    shards = tmp_path / "badpos"
    shutil.copytree(bert["shards"], shards)
    index = read_json(str(shards / "index.json"))
    record = index["splits"]["train"]["shards"][0]
    path = str(shards / record["file"])
    with pa.memory_map(path) as src:
        reader = pa.ipc.open_stream(src)
        table = reader.read_all()
        meta = json.loads(reader.schema.metadata[fmt.METADATA_KEY])
    columns = {}
    for entry in index["schema"]:
        col = table.column(entry["name"]).combine_chunks()
        if "length" in entry:
            columns[entry["name"]] = col.flatten().to_numpy().reshape(-1, entry["length"]).copy()
        else:
            columns[entry["name"]] = col.to_numpy().copy()
    columns["masked_lm_positions"][0, 0] = SEQ
    assert columns["masked_lm_weights"][0, 0] > 0
    new = fmt.write_shard(
        path, index["schema"], columns, meta, batch_rows=index["arrow"]["batch_rows"]
    )
    record.update(new)
    write_json(str(shards / "index.json"), index)
    return shards


@pytest.mark.parametrize(
    "case, message",
    [
        ("preset_typo", "unknown preset 'bert-tni'; valid: tiny, small, base, bert-tiny"),
        ("ffn_typo", "unknown FFN variant 'gegelu'; valid: relu, gelu"),
        ("t5_preset", "--preset tiny is a t5-family preset, but"),
        ("bert_preset_on_t5", "--preset bert-tiny is a bert-family preset, but"),
        ("other_vocab", "f" * 64),
        ("positions", "masked-LM prediction at position 64, outside its 64-token sequence"),
        ("t5_checkpoint", "is a t5-family checkpoint (tiny), but"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_writes_nothing(bert, tmp_path, capsys, case, message):
    shards, preset, extra = bert["shards"], "bert-tiny", []
    out = tmp_path / "run"
    if case == "preset_typo":
        preset = "bert-tni"
    elif case == "ffn_typo":
        extra = ["--ffn", "gegelu"]
    elif case == "t5_preset":
        preset = "tiny"
    elif case == "bert_preset_on_t5":
        import train_fixtures as fx

        fx.build_data(tmp_path / "t5", docs=20, inputs_length=32)
        shards = str(tmp_path / "t5" / "shards")
        extra = ["--vocab", str(tmp_path / "t5" / "vocab")]
    elif case == "other_vocab":
        other = tmp_path / "vocab2"
        shutil.copytree(bert["vocab"], other)
        desc = read_json(str(other / "vocab.json"))
        desc["sha256"] = "f" * 64
        write_json(str(other / "vocab.json"), desc)
        extra = ["--vocab", str(other)]
    elif case == "positions":
        shards = _bad_positions(bert, tmp_path)
    elif case == "t5_checkpoint":  # a t5 run's checkpoint passed to --resume on bert shards
        import train_fixtures as fx

        fx.build_data(tmp_path / "t5", docs=20, inputs_length=32)
        t5run = tmp_path / "t5run"
        train(fx.tiny_options(tmp_path / "t5", t5run, steps=1))
        extra = ["--resume", ckpt.latest_checkpoint(str(t5run))]
    argv = ["train", str(shards), "-o", str(out), "--steps", "2", "--preset", preset]
    if "--vocab" not in extra:
        argv += ["--vocab", bert["vocab"]]
    capsys.readouterr()
    assert main([*argv, *extra, "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("c4forge train: error:") and message in err and "\n" not in err
    if case in ("t5_preset", "bert_preset_on_t5", "t5_checkpoint"):  # names both sides
        assert "bert_mlm_nsp" in err or "span_corruption" in err
    assert not out.exists()  # nothing written
