"""`c4forge experiment` without running stages: the file's checks (one-line errors, exit 2,
before any work), the stage graph's sharing and keys, the GPU scheduling, and the statistics
(vectorised metrics against the fine-tuning metrics, the paired bootstrap)."""

from __future__ import annotations

import os
import textwrap

import numpy as np
import pytest

from c4forge.cli import main
from c4forge.errors import ConfigError
from c4forge.experiments import runner, schema, stats
from c4forge.experiments.cli import CONFIGS
from c4forge.experiments.stages import experiment_plan

BASE = """
[experiment]
name = "t"
base_name = "geglu"
seeds = [0, 1]
shared_vocab = true

[base.model]
ffn = "geglu"

[base.train]
steps = 10

[base.finetune]
tasks = ["sst2"]
"""


def write(tmp_path, text: str) -> str:
    path = tmp_path / "exp.toml"
    path.write_text(textwrap.dedent(text))
    return str(path)


def run_cli(tmp_path, text: str, capsys) -> tuple[int, str]:
    out = tmp_path / "out"
    code = main(["experiment", write(tmp_path, text), "-o", str(out)])
    err = capsys.readouterr().err
    assert not out.exists(), "an error must come before any work"
    return code, err


@pytest.mark.parametrize(
    "extra, message",
    [
        ("[base.model]\nffn_size = 3\n", "unknown key(s) ffn_size"),
        ("[base.modle]\nffn = 'relu'\n", "unknown key(s) modle"),
        ("[arms.same]\nmodel.ffn = 'geglu'\n", "[arms.same]: overrides nothing"),
        ("[arms.empty]\n", "[arms.empty]: overrides nothing"),
        ("[arms.x]\nmodel.ffn = 'relu'\nfinetune.tasks = ['rte']\n", "task rte has no data"),
        ("[arms.v]\nvocab.size = 3000\n", "changes vocab.size, but [experiment] shared_vocab"),
        ("[arms.f]\nmodel.ffn = 'swigl'\n", "unknown FFN variant 'swigl'"),
        ("[arms.o]\nshards.objective = 'span'\n", "unknown 'span'"),
        ("[arms.s]\ntrain.steps = 'ten'\n", "train.steps: expected integer"),
        ("[arms.w]\ncorpus.variant = 'webtextlike'\n", "needs corpus.url_list"),
        ("[arms.geglu]\nmodel.ffn = 'relu'\n", "name of the base recipe"),
        (
            "[arms.m]\nmix.sources = ['realnewslik']\nmix.rates = [1.0, 1.0]\n",
            "mix.sources: unknown --variant 'realnewslik'",
        ),
        (
            "[arms.m]\nmix.sources = ['task:rte']\nmix.strategy = 'equal'\n",
            "mix.sources: " + os.path.join(schema.BUNDLED_GLUE, "RTE", "train.tsv"),
        ),
        (
            "[arms.m]\nmix.sources = ['realnewslike']\nmix.rates = [1.0]\n",
            "mix.rates: 1 rates for 2 sources (c4, realnewslike: the arm's corpus first)",
        ),
        (
            "[arms.m]\nmix.sources = ['realnewslike']\nmix.rates = [1.0, 0.0]\n",
            "rate of 'realnewslike' must be a positive number",
        ),
        ("[arms.m]\nmix.sources = ['realnewslike']\n", "give mix.rates or mix.strategy"),
        (
            "[arms.m]\nmix.sources = ['realnewslike']\nmix.strategy = 'temperature'\n",
            "needs a temperature > 0",
        ),
        ("[arms.z]\nfinetune.steps = 0\n", '0, no fine-tuning, only with head "text"'),
        (
            "[arms.z]\nfinetune.steps = 0\nfinetune.head = 'text'\n",
            "no random start without fine-tuning",
        ),
    ],
)
def test_bad_files_are_one_line_errors_before_any_work(tmp_path, capsys, extra, message):
    text = BASE + extra
    if "[base.model]\nffn_size" in extra:  # a second [base.model] table is invalid TOML
        text = BASE.replace('ffn = "geglu"', "ffn_size = 3")
    if "modle" in extra:
        text = BASE + "[base.modle]\nffn = 'relu'\n"
    code, err = run_cli(tmp_path, text, capsys)
    assert code == 2
    assert message in err, err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_unknown_top_level_and_experiment_keys(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown key\(s\) arm;"):
        schema.from_mapping({"arm": {}}, "x.toml")
    with pytest.raises(ConfigError, match=r"\[experiment\]: unknown key\(s\) seed;"):
        schema.from_mapping({"experiment": {"seed": [0]}}, "x.toml")


def test_shipped_configs_load_and_plan():
    names = sorted(n for n in os.listdir(CONFIGS) if n.endswith(".toml"))
    assert {
        "glu_table1.toml",
        "t5_objectives.toml",
        "t5_corpora.toml",
        "hire.toml",
        "t5_multitask.toml",
        "c4_mixtures.toml",
    } <= set(names)
    for name in names:
        exp = schema.load(os.path.join(CONFIGS, name))
        plan = experiment_plan(exp)
        assert len(plan.runs) == len(exp.arms) * len(exp.seeds)


def test_glu_table1_is_the_papers_eight_ffns_at_equal_parameters():
    from c4forge.trainers.config import make_config

    exp = schema.load(os.path.join(CONFIGS, "glu_table1.toml"))
    ffns = {r["model"]["ffn"] for r in exp.arms.values()}
    assert ffns == {"relu", "gelu", "swish", "glu", "bilinear", "reglu", "geglu", "swiglu"}
    counts = set()
    for r in exp.arms.values():
        cfg = make_config(r["model"]["preset"], 2048, ffn=r["model"]["ffn"])
        counts.add(cfg.d_ff * (3 if cfg.is_gated else 2))
    assert len(counts) == 1  # 3·(2/3·d_ff) = 2·d_ff matrices' width


def test_shared_stages_run_once_and_keys_follow_content(tmp_path):
    text = BASE + "[arms.relu]\nmodel.ffn = 'relu'\n[arms.prefix]\nshards.objective = 'prefix_lm'\n"
    exp = schema.load(write(tmp_path, text))
    plan = experiment_plan(exp)
    kinds = [s.kind for s in plan.stages]
    assert kinds.count("clean") == 1 and kinds.count("vocab") == 1
    assert kinds.count("shards") == 2  # span corruption (geglu, relu) and prefix LM
    assert kinds.count("pretrain") == 3 * 2
    # random starts: geglu and prefix share the architecture (and vocabulary) → one per seed
    rand = [s for s in plan.stages if s.kind == "finetune" and s.config["init"] == "random"]
    assert len(rand) == 2 * 2
    by = {(r.arm, r.seed): r.stages for r in plan.runs}
    assert by[("geglu", 0)]["ft-sst2-random"] is by[("prefix", 0)]["ft-sst2-random"]
    assert by[("geglu", 0)]["ft-sst2-random"] != by[("relu", 0)]["ft-sst2-random"]
    # every stage's prerequisites come first
    seen = set()
    for s in plan.stages:
        assert all(i.key in seen for i in (*s.inputs, *s.after))
        seen.add(s.key)
    # changing one arm changes only that arm's keys
    exp2 = schema.load(write(tmp_path, text.replace("model.ffn = 'relu'", "model.ffn = 'swiglu'")))
    before = {s.key for s in plan.stages}
    after = experiment_plan(exp2)
    changed = [s for s in after.stages if s.key not in before]
    assert changed and all(
        s.config.get("model", {}).get("ffn") == "swiglu" or s.kind == "finetune" for s in changed
    )
    swiglu_runs = [r for r in after.runs if r.arm == "relu"]
    assert {s.key for s in changed} == {
        s.key
        for r in swiglu_runs
        for role, s in r.stages.items()
        if role not in ("clean", "vocab", "shards")
    }


def test_unshared_vocabulary_follows_each_corpus(tmp_path):
    text = BASE.replace("shared_vocab = true", "shared_vocab = false")
    text += "[arms.noclean]\ncorpus.variant = 'en.noclean'\n"
    plan = experiment_plan(schema.load(write(tmp_path, text)))
    assert [s.kind for s in plan.stages].count("vocab") == 2
    shared = experiment_plan(schema.load(write(tmp_path, text.replace("= false", "= true"))))
    kinds = [s.kind for s in shared.stages]
    assert kinds.count("vocab") == 1 and kinds.count("clean") == 2


def test_gpu_scheduling_without_cuda(tmp_path):
    text = BASE + "".join(f"[arms.a{i}]\ntrain.steps = {11 + i}\n" for i in range(5))
    exp = schema.load(write(tmp_path, text))
    plan = experiment_plan(exp)
    units = runner.units(plan)
    assert len(units) == len(plan.runs)
    keys = [s.key for u in units for s in u]
    assert len(keys) == len(set(keys))  # disjoint
    assert set(keys) == {s.key for s in plan.stages if s.kind not in runner.SHARED_KINDS}
    for unit in units:  # self-contained: a stage's pretraining is in its unit (or shared)
        own = {s.key for s in unit}
        for s in unit:
            for dep in (*s.inputs, *s.after):
                assert dep.kind in runner.SHARED_KINDS or dep.key in own
    groups = runner.assign([runner.unit_cost(u) for u in units], 3)
    assert sorted(i for g in groups for i in g) == list(range(len(units)))
    loads = [sum(runner.unit_cost(units[i]) for i in g) for g in groups]
    assert max(loads) - min(loads) <= max(runner.unit_cost(u) for u in units)
    assert runner.assign([5, 4, 3, 3, 1], 2) == [[0, 3], [1, 2, 4]]  # loads 8 and 8
    assert runner.assign([1.0], 4) == [[0], [], [], []]
    cmds = runner.worker_commands(
        exp.path, str(tmp_path), str(tmp_path / "s"), [[0, 2], [], [1]], ["--device", "cuda"]
    )
    assert [env["CUDA_VISIBLE_DEVICES"] for env, _ in cmds] == ["0", "2"]
    assert cmds[1][1][-3:] == ["1", "--device", "cuda"] and "--worker-runs" in cmds[1][1]


@pytest.mark.parametrize("task", ["sst2", "cola", "mrpc", "stsb"])
def test_vectorised_metrics_match_finetune_metrics(task):
    from c4forge.finetune.metrics import compute_metrics, task_score
    from c4forge.glue.tasks import get_task

    spec = get_task(task)
    rng = np.random.default_rng(1)
    if spec.regression:
        y = rng.uniform(0, 5, 300)
        p = y + rng.normal(0, 1.5, 300)
    else:
        y = rng.integers(0, 2, 300)
        p = np.where(rng.random(300) < 0.7, y, 1 - y)
        p[:7] = -1  # invalid text-head outputs
    ours = stats.task_score_rows(spec.metrics, y[None, :], p[None, :])[0]
    theirs = task_score(spec, {"dev": compute_metrics(spec, y.tolist(), p.tolist())})
    assert ours == pytest.approx(theirs, abs=1e-12)


def test_paired_bootstrap_is_deterministic_and_reads_the_difference():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    good = np.stack([np.where(rng.random(500) < 0.8, y, 1 - y) for _ in range(3)])
    bad = np.stack([np.where(rng.random(500) < 0.6, y, 1 - y) for _ in range(3)])
    t1 = stats.paired_bootstrap(("accuracy",), [(y, good, bad)], 500)
    t2 = stats.paired_bootstrap(("accuracy",), [(y, good, bad)], 500)
    assert t1 == t2
    assert t1["difference"] == pytest.approx((good == y).mean() - (bad == y).mean())
    assert t1["ci_low"] > 0 and t1["p_value"] < 0.01
    assert "better than the base" in stats.verdict(
        {k: 100 * v for k, v in t1.items()}, "x", "points"
    )
    same = stats.paired_bootstrap(("accuracy",), [(y, good, good)], 200)
    assert same["difference"] == 0 and "inside the noise" in stats.verdict(same, "x", "points")
    noisy = stats.paired_bootstrap(("accuracy",), [(y[:40], good[:, :40], good[::-1, :40])], 300)
    assert noisy["ci_low"] <= 0 <= noisy["ci_high"]
    loss = stats.paired_bootstrap_seeds([4.0, 4.1, 4.05], [4.3, 4.35, 4.32], 300)
    assert loss["ci_high"] < 0
    assert "better" in stats.verdict(loss, "loss", "nats", higher_is_better=False, n_seeds=3)


def test_a_mixture_arm_plans_its_sources_and_shares_its_pretraining(tmp_path):
    text = BASE + textwrap.dedent("""
        [arms.mt]
        mix.sources = ["task:sst2", "realnewslike"]
        mix.strategy = "proportional"
        mix.limit = 4096
        finetune.steps = 0
        finetune.head = "text"
        finetune.random_baseline = false
        [arms.mt_ft]
        mix.sources = ["task:sst2", "realnewslike"]
        mix.strategy = "proportional"
        mix.limit = 4096
        finetune.head = "text"
        finetune.random_baseline = false
        """)
    plan = experiment_plan(schema.load(write(tmp_path, text)))
    by = {(r.arm, r.seed): r.stages for r in plan.runs}
    mt, ft, base = by[("mt", 0)], by[("mt_ft", 0)], by[("geglu", 0)]
    assert mt["pretrain"] is ft["pretrain"] and mt["pretrain"] is not base["pretrain"]
    assert {s.kind for s in mt["pretrain"].inputs} == {"shards", "vocab", "taskshards"}
    assert mt["mix-sst2"].kind == "taskshards" and mt["mix-realnewslike"].kind == "shards"
    assert mt["pretrain"].config["mix"]["names"] == ["c4", "sst2", "realnewslike"]
    assert mt["ft-sst2-pretrained"].config["steps"] == 0  # scored as it is
    assert ft["ft-sst2-pretrained"].config["steps"] > 0
    # the sources' stage keys are key material: another task source, another pretraining
    other = experiment_plan(schema.load(write(tmp_path, text.replace("task:sst2", "task:cola"))))
    keys = {s.key for s in plan.stages}
    changed = {s.kind for s in other.stages if s.key not in keys}
    assert changed == {"taskshards", "pretrain", "finetune"}
    # the train options name every source and the strategy
    from c4forge.experiments.execute import train_options

    pre = mt["pretrain"]
    dirs = {s.kind: f"/s/{s.name}" for s in pre.inputs}
    dirs.update({f"stage:{s.name}": f"/s/{s.name}" for s in pre.inputs})
    opts = train_options(pre, "/s/out", dirs, "cpu")
    assert opts.shards == f"c4=/s/{pre.inputs[0].name}"
    assert f"sst2=/s/{mt['mix-sst2'].name}" in opts.mix and opts.mix_pad
    assert opts.mix_strategy == "proportional" and opts.mix_rates is None
    assert opts.mix_limit == 4096 and opts.resume == "auto" and not opts.progress
    assert opts.mixture() is not None  # the request parses as the command line's would


def test_no_p_value_without_a_test_and_enough_digits_for_small_intervals():
    small = {"difference": 0.0004, "ci_low": 0.0001, "ci_high": 0.0009, "p_value": 0.0}
    two = stats.verdict(small, "held-out loss", "nats", False, n_seeds=2)
    assert "p =" not in two and "CI" not in two and "+0.00040 nats" in two
    three = stats.verdict(small, "held-out loss", "nats", False, n_seeds=3)
    assert "95 % CI +0.00010 … +0.00090, p < 0.001" in three
    wide = {"difference": 1.5, "ci_low": -0.3, "ci_high": 3.2, "p_value": 0.2}
    assert "(+1.50 points, 95 % CI -0.30 … +3.20, p = 0.200)" in stats.verdict(
        wide, "sst2", "points"
    )
