"""The experiment's table, recomputed from the run folders' own files and nothing else.

For every arm × seed, ``DIR/runs/<arm>/seed-<s>/`` links to the stages it used; the table reads
``pretrain/metrics.jsonl`` (the last held-out ``eval_nll``), ``ft-<task>-<init>/results.json``
(the task score) and ``ft-<task>-<init>/predictions.jsonl`` (the rows of the paired bootstrap).
Every number in results.json carries the file it came from (relative to DIR), and results.md
links each per-seed number to that file and each mean to the per-seed lines under it.

Scores are in points (100 × the task score: accuracy, Matthews correlation …); held-out loss
is in nats per target token (lower is better).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from c4forge.errors import InputError
from c4forge.experiments import stats
from c4forge.experiments.schema import mix_source_names
from c4forge.io.storage import atomic_write_text, read_json, write_json


def _jsonl(path: str) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def held_out_loss(metrics_path: str, source: str | None = None) -> tuple[float, int]:
    """The last ``eval_nll`` of a training run's metrics.jsonl and its step; for a mixture
    (``source`` given) that source's own ``eval_nll_<source>``, so a mixture arm is measured on
    the same validation split as an arm trained on that corpus alone."""
    key = f"eval_nll_{source}" if source else "eval_nll"
    evals = [r for r in _jsonl(metrics_path) if key in r]
    if not evals:
        raise InputError(f"{metrics_path}: no held-out evaluation ({key}) recorded")
    return float(evals[-1][key]), int(evals[-1]["step"])


def _predictions(path: str) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """split -> (labels, predictions) in row order."""
    by_split: dict[str, list[dict]] = {}
    for r in _jsonl(path):
        by_split.setdefault(r["split"], []).append(r)
    out = {}
    for split, rows in by_split.items():
        rows.sort(key=lambda r: r["index"])
        out[split] = (
            np.array([r["label"] for r in rows]),
            np.array([r["prediction"] for r in rows]),
        )
    return out


def _stat(values: list[dict[str, Any]]) -> dict[str, Any]:
    mean, std = stats.mean_std([v["value"] for v in values])
    return {"mean": mean, "std": std, "per_seed": values}


def collect(root: str) -> dict[str, Any]:
    """Read every run folder named by DIR/plan.json into per-arm, per-seed numbers."""
    plan = read_json(os.path.join(root, "plan.json"))
    arms: dict[str, dict[str, Any]] = {}
    tasks: list[str] = []
    missing: list[str] = []
    for run in plan["runs"]:
        rel = run["folder"]
        folder = os.path.join(root, rel)
        if not all(
            os.path.isfile(os.path.join(folder, role, "stage.json")) for role in run["stages"]
        ):
            missing.append(rel)  # still running, or interrupted: left out of the table
            continue
        info = read_json(os.path.join(folder, "run.json"))
        arm = arms.setdefault(
            run["arm"],
            {
                "overrides": info["overrides"],
                "recipe": info["recipe"],
                "loss": [],
                "curves": [],
                "tasks": {},
            },
        )
        for task in info["recipe"]["finetune"]["tasks"]:
            if task not in tasks:
                tasks.append(task)
        source = f"{rel}/pretrain/metrics.jsonl"
        mixed = mix_source_names(info["recipe"])[0] if info["recipe"].get("mix") else None
        value, step = held_out_loss(os.path.join(root, source), mixed)
        key = f"eval_nll_{mixed}" if mixed else "eval_nll"
        arm["loss"].append(
            {"seed": run["seed"], "value": value, "step": step, "source": source, "key": key}
        )
        arm["curves"].append(source)
        for role in run["stages"]:
            if not role.startswith("ft-"):
                continue
            task, init = role[3:].rsplit("-", 1)
            res_rel = f"{rel}/{role}/results.json"
            res = read_json(os.path.join(root, res_rel))
            entry = arm["tasks"].setdefault(task, {}).setdefault(init, [])
            entry.append(
                {
                    "seed": run["seed"],
                    "value": 100.0 * float(res["task_score"]),
                    "source": res_rel,
                    "predictions": f"{rel}/{role}/predictions.jsonl",
                }
            )
    return {"plan": plan, "arms": arms, "tasks": tasks, "missing": missing}


def compute(root: str, bootstrap: int = 1000) -> dict[str, Any]:
    """results.json's content: per arm mean ± std, gains and the tests against the base."""
    from c4forge.glue.tasks import get_task

    data = collect(root)
    plan, base_name = data["plan"], data["plan"]["base_arm"]
    base = data["arms"].get(base_name)
    out_arms: dict[str, Any] = {}
    for name, arm in data["arms"].items():
        row: dict[str, Any] = {
            "overrides": arm["overrides"],
            "held_out_loss": _stat(arm["loss"]),
            "tasks": {},
        }
        for task, inits in arm["tasks"].items():
            t: dict[str, Any] = {k: _stat(v) for k, v in inits.items()}
            if "pretrained" in inits and "random" in inits:
                rand = {v["seed"]: v["value"] for v in inits["random"]}
                gains = [v["value"] - rand[v["seed"]] for v in inits["pretrained"]]
                t["gain"] = dict(zip(("mean", "std"), stats.mean_std(gains)))
            row["tasks"][task] = t
        if name != base_name and base is not None:
            row["vs_base"] = _against_base(root, arm, base, get_task, bootstrap)
        out_arms[name] = row
    budget = _budget(root, plan)
    return {
        "format": "c4forge.experiment.results",
        "format_version": 1,
        "name": plan["name"],
        "base_arm": base_name,
        "seeds": plan["seeds"],
        "tasks": data["tasks"],
        "units": {
            "held_out_loss": "nats per target token (lower is better)",
            "scores": "points: 100 × task score (higher is better)",
        },
        "bootstrap": {
            "resamples": bootstrap,
            "seed": 0,
            "level": stats.LEVEL,
            "over": "seeds (paired) × dev examples",
        },
        "arms": out_arms,
        "complete": not data["missing"],
        "missing_runs": data["missing"],
        "budget": budget,
    }


def _paired(a: list[dict], b: list[dict]) -> tuple[list[dict], list[dict]]:
    seeds = sorted({v["seed"] for v in a} & {v["seed"] for v in b})
    pick = lambda vals: [next(v for v in vals if v["seed"] == s) for s in seeds]  # noqa: E731
    return pick(a), pick(b)


def _against_base(root: str, arm: dict, base: dict, get_task, resamples: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    a, b = _paired(arm["loss"], base["loss"])
    test = stats.paired_bootstrap_seeds([v["value"] for v in a], [v["value"] for v in b], resamples)
    test["statement"] = stats.verdict(test, "held-out loss", "nats", False, len(a))
    test["seeds"] = len(a)
    test["tested"] = stats.is_tested(len(a), "nats")
    out["held_out_loss"] = test
    for task, inits in arm["tasks"].items():
        if "pretrained" not in inits or "pretrained" not in base["tasks"].get(task, {}):
            continue
        a, b = _paired(inits["pretrained"], base["tasks"][task]["pretrained"])
        pa = [_predictions(os.path.join(root, v["predictions"])) for v in a]
        pb = [_predictions(os.path.join(root, v["predictions"])) for v in b]
        splits = []
        for split in pa[0]:
            labels = pa[0][split][0]
            splits.append(
                (labels, np.stack([p[split][1] for p in pa]), np.stack([p[split][1] for p in pb]))
            )
        spec = get_task(task)
        test = stats.paired_bootstrap(spec.metrics, splits, resamples)
        test = {k: 100.0 * v if k != "p_value" else v for k, v in test.items()}
        test["statement"] = stats.verdict(test, task, "points")
        test["seeds"] = len(a)
        test["examples"] = int(sum(len(s[0]) for s in splits))
        out[task] = test
    return out


def _budget(root: str, plan: dict[str, Any]) -> dict[str, Any]:
    by_kind: dict[str, dict[str, float]] = {}
    store = os.path.join(root, plan.get("stages_dir", "stages"))
    unfinished = 0
    for s in plan["stages"]:
        path = os.path.join(store, s["name"], "stage.json")
        if not os.path.isfile(path):
            unfinished += 1
            continue
        marker = read_json(path)
        k = by_kind.setdefault(s["kind"], {"stages": 0, "cpu_seconds": 0.0, "wall_seconds": 0.0})
        k["stages"] += 1
        k["cpu_seconds"] += marker["cpu_seconds"]
        k["wall_seconds"] += marker["wall_seconds"]
    return {
        "stages": len(plan["stages"]) - unfinished,
        "unfinished_stages": unfinished,
        "cpu_seconds": sum(k["cpu_seconds"] for k in by_kind.values()),
        "wall_seconds": sum(k["wall_seconds"] for k in by_kind.values()),
        "by_kind": by_kind,
    }


# ------------------------------------------------------------------------------- markdown
def _pm(s: dict[str, Any], digits: int = 2) -> str:
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f}"


def _changes(overrides: dict[str, dict[str, Any]]) -> str:
    def shown(v: Any) -> Any:  # a file by its name: the full path is in run.json
        return os.path.basename(v) if isinstance(v, str) and os.path.isabs(v) else v

    items = [f"{sec}.{k} = {shown(v)}" for sec, vals in overrides.items() for k, v in vals.items()]
    return ", ".join(items) if items else "(base recipe)"


def markdown(res: dict[str, Any], recipe_line: str = "", description: str = "") -> tuple[str, str]:
    """(the whole results.md, the table alone for the console)."""
    tasks = res["tasks"]
    head = ["arm", "changes", "seeds", "held-out loss"]
    for t in tasks:
        head += [f"{t}", f"{t} gain"]
    head.append(f"vs base ({res['base_arm']})")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, arm in res["arms"].items():
        anchor = f"#arm-{name.lower().replace('.', '')}"
        seeds = str(len(arm["held_out_loss"]["per_seed"]))
        cells = [
            f"[{name}](runs/{name}/)",
            _changes(arm["overrides"]),
            seeds,
            f"[{_pm(arm['held_out_loss'], 3)}]({anchor})",
        ]
        for t in tasks:
            tt = arm["tasks"].get(t, {})
            cells.append(f"[{_pm(tt['pretrained'], 1)}]({anchor})" if "pretrained" in tt else "–")
            gain = f"{tt['gain']['mean']:+.1f} ± {tt['gain']['std']:.1f}" if "gain" in tt else ""
            cells.append(f"[{gain}]({anchor})" if gain else "–")
        vs = arm.get("vs_base")
        if vs:
            bits = [f"{t} {vs[t]['difference']:+.1f}{_star(vs[t])}" for t in tasks if t in vs]
            loss = vs["held_out_loss"]
            text = ", ".join(
                [
                    f"loss {loss['difference']:+.{stats.digits_for(loss['difference'], least=3)}f}"
                    f"{_star(loss)}",
                    *bits,
                ]
            )
            cells.append(f"[{text}](#against-the-base)")
        else:
            cells.append("base")
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines)
    b = res["budget"]
    doc = [f"# Experiment `{res['name']}`", ""]
    if description:
        doc += [description, ""]
    if recipe_line:
        doc += [recipe_line, ""]
    if res["missing_runs"]:
        doc += [
            f"**Incomplete:** {len(res['missing_runs'])} arm × seed runs are not finished and "
            f"are left out: {', '.join(res['missing_runs'])}. Run the same command again to "
            "finish them.",
            "",
        ]
    doc += [
        f"{len(res['arms'])} arms × {len(res['seeds'])} seeds (seeds {res['seeds']}). Held-out "
        "loss: the pretraining run's last `eval_nll` (nats per target token) on its shards' "
        "validation split. Task scores: dev-set points (100 × the task score), fine-tuned from "
        "the arm's checkpoint (an arm with finetune.steps = 0: the checkpoint's own text head, "
        "no fine-tuning); gain = pretrained − random start, same seed. Mean ± sample std "
        "over seeds. `vs base`: difference of the means; * = the 95 % paired-bootstrap "
        f"interval ({res['bootstrap']['resamples']} resamples of seeds × dev examples, "
        "seeded) excludes 0. Held-out loss is tested only from 3 seeds on (fewer: the "
        "difference alone, no interval, no p-value). A mixture arm's held-out loss is on its "
        "own corpus's validation split (the first mixture source), so it compares with the "
        "base's.",
        "",
        table,
        "",
        "## Against the base",
        "",
    ]
    for name, arm in res["arms"].items():
        for test in arm.get("vs_base", {}).values():
            doc.append(f"- **{name}** — {test['statement']}")
    doc += ["", "## Per seed (each number links to the file it was read from)", ""]
    for name, arm in res["arms"].items():
        doc += [f"### arm {name}", ""]
        row = ", ".join(
            f"seed {v['seed']}: [{v['value']:.4f}]({v['source']}) (step {v['step']})"
            for v in arm["held_out_loss"]["per_seed"]
        )
        doc.append(f"- held-out loss: {row}")
        for t, tt in arm["tasks"].items():
            for init in ("pretrained", "random"):
                if init in tt:
                    row = ", ".join(
                        f"seed {v['seed']}: [{v['value']:.2f}]({v['source']})"
                        for v in tt[init]["per_seed"]
                    )
                    doc.append(f"- {t} ({init} init): {row}")
        doc.append("")
    doc += [
        "## Budget",
        "",
        f"{b['stages']} stages, {b['cpu_seconds']:.0f} CPU s, {b['wall_seconds']:.0f} s wall "
        "(sum over stages, all invocations): "
        + ", ".join(
            f"{k} {v['stages']}× {v['cpu_seconds']:.0f} CPU s" for k, v in b["by_kind"].items()
        ),
        "",
        "Plots: [loss_curves.png](loss_curves.png), [scores.png](scores.png).",
        "",
    ]
    return "\n".join(doc), table


def _star(test: dict[str, Any]) -> str:
    if not test.get("tested", True):  # no test made: nothing to mark
        return ""
    return "*" if not test["ci_low"] <= 0 <= test["ci_high"] else ""


def write_results(root: str, exp: Any) -> dict[str, Any]:
    """results.json, results.md and the two plots from the run folders of ``root``."""
    from c4forge.experiments.plots import plot_loss_curves, plot_scores

    res = compute(root, exp.bootstrap)
    recipe = exp.budget or ""
    md, table = markdown(res, recipe, exp.description)
    write_json(os.path.join(root, "results.json"), res)
    atomic_write_text(os.path.join(root, "results.md"), md)
    plot_loss_curves(root, res, os.path.join(root, "loss_curves.png"))
    plot_scores(res, os.path.join(root, "scores.png"))
    return {**res, "markdown_summary": table}
