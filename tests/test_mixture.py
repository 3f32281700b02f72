"""Training on a mixture of real shard sets (CPU, tiny): the stream's rows follow the map for any
ranks, workers, accumulation and resume point; 1 vs 2 ranks and a resume give the same
checkpoint bytes; per-source figures; and every bad request is one line before any work."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import train_fixtures as fx  # noqa: E402

from c4forge.cli import main  # noqa: E402
from c4forge.errors import ConfigError, VerificationError  # noqa: E402
from c4forge.trainers import checkpoint as ckpt  # noqa: E402
from c4forge.trainers.data import DataPlan, TrainStream, open_shard_set  # noqa: E402
from c4forge.trainers.metrics import read_metrics  # noqa: E402
from c4forge.trainers.mixture_data import MixtureStream, open_mixture  # noqa: E402
from c4forge.trainers.mixture_map import BLOCK, MixtureMap  # noqa: E402
from c4forge.trainers.mixture_spec import load_mixture, spec_from_flags  # noqa: E402
from c4forge.trainers.train import train  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """One vocabulary; three 64-token sets (concat, per_document packed, another concat set of
    other rows), a 32-token set, and a set of another vocabulary."""
    root = tmp_path_factory.mktemp("mixdata")
    desc = fx.build_data(root, docs=50, packed_docs=24)
    vocab = str(root / "vocab")
    fx.build_shards(str(root / "other"), vocab, desc, docs=30, seed=7)
    fx.build_shards(str(root / "short"), vocab, desc, docs=20, inputs_length=32)
    foreign = fx.build_vocab(str(root / "vocab2"), pieces=800, docs=100)
    fx.build_shards(str(root / "foreign"), str(root / "vocab2"), foreign, docs=20)
    return root, desc


def _flags_spec(root, rates="0.5,0.3,0.2", **kw):
    return spec_from_flags(
        str(root / "shards"),
        [f"packed={root / 'packed'}", f"other={root / 'other'}"],
        rates=rates,
        strategy=kw.pop("strategy", None),
        limit=kw.pop("limit", None),
        temperature=kw.pop("temperature", None),
        pad=kw.pop("pad", False),
    )


def _items(mixture, plan, start, end):
    return list(MixtureStream(mixture, plan, start, end, as_numpy=True))


# ----------------------------------------------------------------------------- the stream


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    weights=st.lists(st.floats(0.05, 5.0), min_size=3, max_size=3),
    seed=st.integers(0, 1000),
    world=st.sampled_from([1, 2, 4]),
    accum=st.sampled_from([1, 2]),
    shuffle=st.sampled_from([0, 3]),
    start=st.integers(0, 40),
)
def test_rows_depend_on_seed_and_row_only(data, weights, seed, world, accum, shuffle, start):
    """Whatever the ranks, accumulation, shuffle window and resume step, step s's rows (and
    their sources) are those of a single-rank run from step 0."""
    root, desc = data
    base = open_mixture(_flags_spec(root), vocab=desc, seed=seed)
    rates = tuple(w / sum(weights) for w in weights)
    mixture = dataclasses.replace(base, rates=rates, map=MixtureMap.from_rates(rates, seed))
    batch, steps = 8, 2
    ref_plan = DataPlan(batch_size=batch, seed=seed, shuffle_window=shuffle)
    ref = _items(mixture, ref_plan, start, start + steps)
    for rank in range(world):
        plan = DataPlan(
            batch_size=batch,
            world_size=world,
            rank=rank,
            grad_accum=accum,
            seed=seed,
            shuffle_window=shuffle,
        )
        got = _items(mixture, plan, start, start + steps)
        per = batch // world // accum
        for it in got:
            r = ref[it["step"] - start]
            lo = rank * (batch // world) + it["micro"] * per
            for c in ("source", "inputs", "targets", "targets_segment_ids"):
                np.testing.assert_array_equal(it[c], r[c][lo : lo + per])


def test_loader_workers_give_the_same_micro_batches(data):
    root, desc = data
    mixture = open_mixture(_flags_spec(root), vocab=desc, seed=3)
    plan = DataPlan(batch_size=8, grad_accum=2, seed=3, shuffle_window=2)
    ref = _items(mixture, plan, 5, 9)
    loader = torch.utils.data.DataLoader(
        MixtureStream(mixture, plan, 5, 9), batch_size=None, num_workers=2
    )
    got = list(loader)
    assert [(it["step"], it["micro"]) for it in got] == [(it["step"], it["micro"]) for it in ref]
    for a, b in zip(got, ref):
        for c in ("source", "inputs", "targets", "inputs_positions"):
            np.testing.assert_array_equal(a[c].numpy(), b[c])


def test_rows_come_from_their_source_in_one_layout(data):
    root, desc = data
    mixture = open_mixture(_flags_spec(root), vocab=desc, seed=1)
    assert mixture.columns[2:] == (
        "inputs_segment_ids",
        "inputs_positions",
        "targets_segment_ids",
        "targets_positions",
    )
    item = _items(mixture, DataPlan(batch_size=64, seed=1), 0, 1)[0]
    train_rows = {}
    for src in mixture.sources:
        rows = src.shards.read_rows("train")
        train_rows[src.name] = {r.tobytes() for r in rows["inputs"]}
    for k, row, seg, pos in zip(
        item["source"], item["inputs"], item["inputs_segment_ids"], item["inputs_positions"]
    ):
        name = mixture.names[k]
        assert row.tobytes() in train_rows[name]  # an untouched row of its own source
        if name != "packed":  # a concat row: one segment over its real tokens
            real = row != 0
            np.testing.assert_array_equal(seg, real.astype(seg.dtype))
            np.testing.assert_array_equal(pos[real], np.arange(real.sum()))
    counts = np.bincount(item["source"], minlength=3)
    assert np.abs(counts - np.array([32, 19.2, 12.8])).max() <= 4  # 64 rows at 50/30/20 %


def test_a_two_source_mixture_of_one_set_reads_it_like_the_plain_stream(data):
    """Both sources the same set at rate 1:1 — the rows read are still rows of that set, and a
    one-source stream is the plain TrainStream."""
    root, desc = data
    spec = spec_from_flags(
        str(root / "shards"),
        [f"again={root / 'shards'}"],
        rates=None,
        strategy="equal",
        limit=None,
        temperature=None,
        pad=False,
    )
    mixture = open_mixture(spec, vocab=desc, seed=4)
    single = dataclasses.replace(mixture, map=MixtureMap.from_rates([1.0], 4))
    plain = TrainStream(open_shard_set(str(root / "shards")), DataPlan(batch_size=8, seed=4), 3, 5)
    a = list(plain.__class__.__iter__(plain))
    b = _items(single, DataPlan(batch_size=8, seed=4), 3, 5)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x["inputs"].numpy(), y["inputs"])


def test_ranges_and_scattered_rows_read_the_rows_the_map_names(data):
    """Reads of a range (in order and permuted, across a block boundary and the sources'
    epochs) and of scattered rows give, row by row, the row the map names and its source."""
    root, desc = data
    mixture = open_mixture(_flags_spec(root), vocab=desc, seed=6)
    lo = BLOCK - 150
    rows = np.arange(lo, lo + 300)
    source, within = mixture.map.locate(rows)
    ref = mixture.reader()
    want = {}
    for r, k, w in zip(rows, source, within):
        shard, at = mixture.sources[k].order.locate(np.array([w]))
        want[int(r)] = (int(k), mixture.conform(ref.readers[k].gather(shard, at)))
    epochs = [within[source == k] // src.train_rows for k, src in enumerate(mixture.sources)]
    assert any(e.min() < e.max() for e in epochs)  # some source starts a new epoch here
    perm = np.random.default_rng(0).permutation(rows)
    for query in (rows, perm, rows[::3], perm[:-7]):
        got = mixture.reader().rows(query)
        for i, r in enumerate(query):
            k, row = want[int(r)]
            assert got["source"][i] == k
            for c in mixture.columns:
                np.testing.assert_array_equal(got[c][i], row[c][0])


# ----------------------------------------------------------------------------- training


def _mix_opts(root, out, **kw):
    return fx.tiny_options(
        root,
        out,
        **{
            "shards": f"c4={root / 'shards'}",
            "steps": 4,
            "save_every": 2,
            "grad_accum": 2,
            "mix": (f"packed={root / 'packed'}", f"other={root / 'other'}"),
            "mix_rates": "0.5,0.3,0.2",
            "eval_rows": 8,
            **kw,
        },
    )


def _bytes(run):
    with open(os.path.join(ckpt.latest_checkpoint(str(run)), "model.safetensors"), "rb") as f:
        return f.read()


@pytest.fixture(scope="module")
def single_rank(data, tmp_path_factory):
    root, _ = data
    out = tmp_path_factory.mktemp("mix1") / "run"
    summary = train(_mix_opts(root, out))
    return out, summary


def test_metrics_and_summary_carry_each_source(single_rank):
    out, summary = single_rank
    records = read_metrics(str(out / "metrics.jsonl"))
    logs = [r for r in records if "loss" in r]
    assert len(logs) == 4
    for r in logs:
        assert {"loss_c4", "loss_packed", "loss_other"} <= set(r)
        assert all(r[f"tokens_{n}"] > 0 for n in ("c4", "packed", "other"))
    ev = [r for r in records if "eval_nll" in r][-1]
    assert {"eval_nll_c4", "eval_nll_packed", "eval_nll_other"} <= set(ev)
    # the pooled NLL lies between the sources' own
    per = [ev[f"eval_nll_{n}"] for n in ("c4", "packed", "other")]
    assert min(per) <= ev["eval_nll"] <= max(per)
    text = summary.text()
    assert "mixture (rates): requested → realised rate over 16 rows" in text
    assert "held-out NLL per source:" in text
    state = json.loads(
        open(os.path.join(ckpt.latest_checkpoint(str(out)), "trainer_state.json")).read()
    )
    mix = state["config"]["mixture"]
    assert [s["name"] for s in mix["sources"]] == ["c4", "packed", "other"]
    assert mix["rates"] == pytest.approx([0.5, 0.3, 0.2]) and sum(mix["block_counts"]) == 65536


def test_two_ranks_and_a_resume_give_the_same_checkpoint_bytes(data, single_rank, tmp_path):
    root, _ = data
    out, _ = single_rank
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
        f"c4={root / 'shards'}",
        "--output",
        str(ddp),
        "--steps",
        "4",
        "--save-every",
        "2",
        "--preset",
        "tiny",
        "--batch-size",
        "4",
        "--vocab",
        str(root / "vocab"),
        "--log-every",
        "1",
        "--eval-rows",
        "8",
        "--no-progress",
        "--mix",
        f"packed={root / 'packed'}",
        "--mix",
        f"other={root / 'other'}",
        "--mix-rates",
        "0.5,0.3,0.2",
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=ROOT)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _bytes(ddp) == _bytes(out)
    resumed = tmp_path / "resumed"
    train(_mix_opts(root, resumed, stop_after_step=2))
    train(_mix_opts(root, resumed, resume="auto"))
    assert _bytes(resumed) == _bytes(out)
    with pytest.raises(ConfigError, match="mixture rates .* differs from the checkpoint"):
        train(_mix_opts(root, resumed, resume="auto", steps=6, mix_rates="0.4,0.4,0.2"))


def test_a_mixture_file_trains_with_padding(data, tmp_path):
    root, _ = data
    path = tmp_path / "mix.toml"
    path.write_text(
        f'strategy = "temperature"\ntemperature = 2.0\npad = true\n'
        f'[sources.c4]\nshards = "{root / "shards"}"\n'
        f'[sources.short]\nshards = "{root / "short"}"\n'
    )
    summary = train(fx.tiny_options(root, tmp_path / "run", shards=str(path), steps=2))
    assert summary.steps == 2 and np.isfinite(summary.final_loss)
    assert "mixture (temperature)" in summary.text()


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "toml, message",
    [
        (
            'strategy = "rates"\ntemprature = 2\n[sources.a]\nshards = "x"\nrate = 1\n'
            '[sources.b]\nshards = "y"\nrate = 1\n',
            "unknown key 'temprature'",
        ),
        (
            '[sources.a]\nshards = "x"\nrate = 1\n[sources.b]\nshards = "y"\nrate = 0\n',
            "rate of 'b' must be a positive number, got 0.0",
        ),
        (
            '[sources.a]\nshards = "x"\nrate = 1\n[sources.b]\nshards = "y"\nrate = -2\n',
            "rate of 'b' must be a positive number",
        ),
        (
            'strategy = "proportional"\n[sources.a]\nshard = "x"\n[sources.b]\nshards = "y"\n',
            "[sources.a]: unknown key 'shard'",
        ),
        ('strategy = "equal"\n[sources.a]\nshards = "x"\n', "at least two sources"),
        (
            'strategy = "temperature"\n[sources.a]\nshards = "x"\n[sources.b]\nshards = "y"\n',
            "needs a temperature > 0",
        ),
        ("strategy = rates\n", "not valid TOML"),
    ],
)
def test_a_bad_mixture_file_is_one_line(tmp_path, toml, message):
    path = tmp_path / "m.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as err:
        load_mixture(str(path))
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            ["--mix", "gone=/nowhere/shards", "--mix-rates", "1,1"],
            "mixture source 'gone': /nowhere/shards: no such shard directory",
        ),
        (
            ["--mix", "{root}/foreign", "--mix-rates", "1,1"],
            "mixture source 'foreign': {root}/foreign/index.json was built with vocabulary",
        ),
        (
            ["--mix", "{root}/short", "--mix-strategy", "equal"],
            "different row lengths (c4 64/14, short 32/8); pass --mix-pad",
        ),
        (["--mix", "{root}/other", "--mix-rates", "1,0"], "rate of 'other' must be a positive"),
        (["--mix", "{root}/other", "--mix-rates", "1"], "gives 1 rates for 2 sources"),
        (["--mix-strategy", "equal"], "--mix-strategy needs --mix"),
        (["--mix", "{root}/other"], "--mix needs --mix-rates or --mix-strategy"),
    ],
)
def test_bad_mixture_flags_exit_2_before_any_work(data, tmp_path, capsys, extra, message):
    root, _ = data
    out = tmp_path / "r"
    argv = [
        "train",
        f"c4={root / 'shards'}",
        "--output",
        str(out),
        "--steps",
        "1",
        "--preset",
        "tiny",
        *[e.format(root=root) for e in extra],
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("c4forge train: error:") and message.format(root=root) in err, err
    assert len(err.splitlines()) == 1
    assert not out.exists()  # nothing written


def test_a_bert_set_cannot_join_a_t5_mixture(data, tmp_path):
    root, desc = data
    bert = tmp_path / "bert"
    bert.mkdir()
    index = json.loads((root / "other" / "index.json").read_text())
    # the family check reads the objective before the rows: a copy renamed bert_mlm_nsp
    for name in os.listdir(root / "other"):
        if name != "index.json" and not os.path.isdir(root / "other" / name):
            os.link(root / "other" / name, bert / name)
    index["objective"]["name"] = "bert_mlm_nsp"
    from c4forge.formats.shards import dataset_fingerprint

    index["dataset_fingerprint"] = dataset_fingerprint(index)
    (bert / "index.json").write_text(json.dumps(index))
    spec = spec_from_flags(
        str(root / "shards"),
        [str(bert)],
        rates="1,1",
        strategy=None,
        limit=None,
        temperature=None,
        pad=False,
    )
    with pytest.raises((ConfigError, VerificationError), match="different model families"):
        open_mixture(spec, vocab=desc, seed=0)
