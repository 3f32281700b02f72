"""`c4forge experiment` end to end on the bundled real sample (tiny sizes): a run killed with
SIGKILL mid-pretraining resumes (finished stages skipped, the killed training continues from
its checkpoint), changing one arm re-runs only that arm's stages, and the table recomputes from
the run folders' own files (metrics.jsonl, results.json, predictions.jsonl)."""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

CONFIG = """
[experiment]
name = "e2e"
base_name = "base"
seeds = [0, 1]
shared_vocab = true
bootstrap = 200

[base.vocab]
size = 1000

[base.shards]
inputs_length = 64

[base.model]
preset = "tiny"
ffn = "geglu"

[base.train]
steps = 24
batch_size = 8
eval_every = 8
save_every = 4
eval_rows = 32
log_every = 4

[base.finetune]
tasks = ["sst2"]
steps = 6
batch_size = 16
max_train_examples = 100

[arms.relu]
model.ffn = "{ffn}"
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": REPO, "OMP_NUM_THREADS": "1"}


def _command(config: str, out: str) -> list[str]:
    return [sys.executable, "-m", "c4forge", "experiment", config, "-o", out, "--device", "cpu"]


def _run(config: str, out: str) -> str:
    proc = subprocess.run(_command(config, out), env=_env(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return proc.stdout


def _markers(out: str) -> dict[str, float]:
    return {p: os.path.getmtime(p) for p in glob.glob(f"{out}/stages/*/stage.json")}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """Run, SIGKILL during a pretraining stage, resume; then change one arm and run again."""
    root = tmp_path_factory.mktemp("experiment")
    config, out = str(root / "e2e.toml"), str(root / "out")
    with open(config, "w") as f:
        f.write(CONFIG.format(ffn="relu"))
    proc = subprocess.Popen(
        _command(config, out),
        env=_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    killed_at = None
    deadline = time.time() + 900
    while time.time() < deadline and proc.poll() is None:
        for stage in glob.glob(f"{out}/stages/pretrain-*"):
            latest = os.path.exists(f"{stage}/checkpoints/latest")  # written after the step
            if latest and not os.path.exists(f"{stage}/stage.json"):
                os.killpg(proc.pid, signal.SIGKILL)  # our own child's process group
                killed_at = stage
                break
        if killed_at:
            break
        time.sleep(0.05)
    proc.wait()
    assert killed_at, "the run finished (or timed out) before a pretraining checkpoint appeared"
    assert proc.returncode == -signal.SIGKILL
    before_resume = _markers(out)
    resumed_stdout = _run(config, out)
    after_resume = _markers(out)
    first_results = open(f"{out}/results.json").read()
    with open(config, "w") as f:
        f.write(CONFIG.format(ffn="swiglu"))
    changed_stdout = _run(config, out)
    return {
        "out": out,
        "config": config,
        "killed": killed_at,
        "before_resume": before_resume,
        "after_resume": after_resume,
        "resumed_stdout": resumed_stdout,
        "changed_stdout": changed_stdout,
        "first_results": first_results,
    }


def test_resume_after_sigkill_skips_finished_stages_and_continues_training(experiment):
    out, killed = experiment["out"], experiment["killed"]
    before, after = experiment["before_resume"], experiment["after_resume"]
    assert before, "some stages (at least clean, vocab, shards) finished before the kill"
    for marker, mtime in before.items():
        assert after[marker] == mtime, f"{marker} was recomputed"
    stdout = experiment["resumed_stdout"]
    assert stdout.count("): done earlier") == len(before)
    name = os.path.basename(killed)
    assert f"resuming → {name}" in stdout
    log = open(f"{killed}/log.txt").read()
    start = int(re.findall(r"trained steps (\d+) → 24", log)[-1])
    assert start > 0, "the killed run must continue from its checkpoint, not from step 0"
    steps = [json.loads(x)["step"] for x in open(f"{killed}/metrics.jsonl") if '"loss"' in x]
    assert steps == sorted(set(steps)) and steps[-1] == 24  # no step logged twice
    assert os.path.isfile(f"{out}/stages/{name}/stage.json")


def test_changing_one_arm_reruns_only_that_arm(experiment):
    out, stdout = experiment["out"], experiment["changed_stdout"]
    ran = re.findall(r"\] (\w+)\s+.*\((relu/seed-\d)[^)]*\): running", stdout)
    # per seed: its pretraining, its SST-2 fine-tuning and the new shape's random start
    assert sorted(k for k, _ in ran) == ["finetune"] * 4 + ["pretrain"] * 2
    assert stdout.count(": running") == 6
    plan = json.load(open(f"{out}/plan.json"))
    assert stdout.count("): done earlier") == len(plan["stages"]) - 6
    for seed in (0, 1):
        target = os.readlink(f"{out}/runs/relu/seed-{seed}/pretrain")
        marker = json.load(open(os.path.join(f"{out}/runs/relu/seed-{seed}", target, "stage.json")))
        assert marker["config"]["model"]["ffn"] == "swiglu"
        base = json.load(open(f"{out}/runs/base/seed-{seed}/pretrain/stage.json"))
        assert base["config"]["model"]["ffn"] == "geglu"
    # shared stages: one clean, one vocabulary, one shard set for both arms
    for role in ("clean", "vocab", "shards"):
        assert os.readlink(f"{out}/runs/base/seed-0/{role}") == os.readlink(
            f"{out}/runs/relu/seed-1/{role}"
        )


def test_table_recomputes_from_the_run_folders_files(experiment):
    out = experiment["out"]
    res = json.load(open(f"{out}/results.json"))
    assert list(res["arms"]) == ["base", "relu"] and res["tasks"] == ["sst2"]
    for arm, row in res["arms"].items():
        losses, scores, gains = [], [], []
        for seed in (0, 1):
            run = f"{out}/runs/{arm}/seed-{seed}"
            evals = [
                json.loads(x) for x in open(f"{run}/pretrain/metrics.jsonl") if "eval_nll" in x
            ]
            losses.append(evals[-1]["eval_nll"])
            per_init = {}
            for init in ("pretrained", "random"):
                preds = [json.loads(x) for x in open(f"{run}/ft-sst2-{init}/predictions.jsonl")]
                accuracy = np.mean([p["label"] == p["prediction"] for p in preds])
                written = json.load(open(f"{run}/ft-sst2-{init}/results.json"))["task_score"]
                assert accuracy == pytest.approx(written)
                per_init[init] = 100 * accuracy
            scores.append(per_init["pretrained"])
            gains.append(per_init["pretrained"] - per_init["random"])
        assert row["held_out_loss"]["mean"] == pytest.approx(np.mean(losses))
        assert row["held_out_loss"]["std"] == pytest.approx(np.std(losses, ddof=1))
        assert row["tasks"]["sst2"]["pretrained"]["mean"] == pytest.approx(np.mean(scores))
        assert row["tasks"]["sst2"]["gain"]["mean"] == pytest.approx(np.mean(gains))
        for v in row["held_out_loss"]["per_seed"]:
            assert os.path.isfile(os.path.join(out, v["source"]))
    vs = res["arms"]["relu"]["vs_base"]
    diff = (
        res["arms"]["relu"]["tasks"]["sst2"]["pretrained"]["mean"]
        - (res["arms"]["base"]["tasks"]["sst2"]["pretrained"]["mean"])
    )
    assert vs["sst2"]["difference"] == pytest.approx(diff)
    assert vs["sst2"]["ci_low"] <= vs["sst2"]["difference"] <= vs["sst2"]["ci_high"]
    assert vs["sst2"]["statement"].startswith("sst2: ")
    # every link of results.md resolves inside the experiment folder
    md = open(f"{out}/results.md").read()
    links = re.findall(r"\]\(([^)#][^)]*)\)", md)
    assert links and all(os.path.exists(os.path.join(out, link)) for link in links)
    assert f"{res['arms']['base']['held_out_loss']['mean']:.3f}" in md
    for png in ("loss_curves.png", "scores.png"):
        assert open(f"{out}/{png}", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    # the table is a function of the run folders: recomputed, it is byte-identical
    before = open(f"{out}/results.json").read()
    proc = subprocess.run(
        [*_command(experiment["config"], out), "--results-only"],
        env=_env(),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert open(f"{out}/results.json").read() == before


def test_worker_processes_run_their_units(experiment):
    """The several-GPU path on CPU: one worker process per device, each with its own units
    (here two fine-tuning stages whose markers were removed, in different units)."""
    from c4forge.experiments import runner, schema
    from c4forge.experiments.stages import experiment_plan

    out = experiment["out"]
    exp = schema.load(experiment["config"])
    plan = experiment_plan(exp)
    units = runner.units(plan)
    groups = runner.assign([runner.unit_cost(u) for u in units], 2)
    redo = [next(s for s in units[g[0]] if s.kind == "finetune") for g in groups]
    for stage in redo:
        os.remove(f"{out}/stages/{stage.name}/stage.json")
    store = f"{out}/stages"
    old = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = REPO
    try:
        runner.run_parallel(exp, out, store, plan, 2, None, worker_device="cpu")
    finally:
        if old is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = old
    for stage in redo:
        assert os.path.isfile(f"{out}/stages/{stage.name}/stage.json")
