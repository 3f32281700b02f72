"""``c4forge glue``: every task × head × seed from one checkpoint (and from a random model of
the same shape with ``--also-random-init``), then the table and plots (finetune.md §6).

```
DIR/runs/<init>/<head>/<task>/seed-<s>/   one `c4forge finetune` output each (finished ones are
                                          kept, so a rerun only does what is missing)
DIR/glue.json   every run's task score and metrics, and per row mean ± std over seeds
DIR/glue.md     one row per checkpoint/head/init: every task and the GLUE score, mean ± std
DIR/glue.png    task scores per row with error bars;  DIR/hire_scores.png  (HIRE runs only)
```
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

from c4forge.finetune.head_registry import default_head
from c4forge.finetune.loop import finetune
from c4forge.finetune.metrics import glue_score
from c4forge.finetune.options import FinetuneOptions, GlueOptions
from c4forge.finetune.outputs import RESULTS
from c4forge.glue.tasks import get_task
from c4forge.io import ownership
from c4forge.io.storage import atomic_write_text, read_json, write_json


def _default_heads(checkpoint: str, vocab: str | None) -> list[str]:
    from c4forge.finetune.backbone import load_backbone

    return [default_head(load_backbone(checkpoint, vocab).family)]


def _one_run(o: GlueOptions, init: str, head: str, task: str, seed: int) -> dict[str, Any]:
    out = os.path.join(o.output, "runs", init, head, task, f"seed-{seed}")
    done = os.path.join(out, RESULTS)
    if os.path.isfile(done):
        return read_json(done)
    start = time.perf_counter()
    res = finetune(
        FinetuneOptions(
            checkpoint=o.checkpoint,
            task=task,
            data=o.data,
            output=out,
            head=head,
            epochs=o.epochs,
            steps=o.steps,
            lr=o.lr,
            batch_size=o.batch_size,
            max_length=o.max_length,
            seed=seed,
            device=o.device,
            overwrite=True,
            random_init=init == "random",
            vocab=o.vocab,
            max_train_examples=o.max_train_examples,
            compile=o.compile,
            log_every=o.log_every,
            progress=o.progress,
        )
    )
    res["timing"]["wall_seconds"] = time.perf_counter() - start
    write_json(done, res)
    return res


def _mean_std(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    return {"mean": float(arr.mean()), "std": float(arr.std(ddof=1)) if len(arr) > 1 else 0.0}


def summarise(runs: list[dict[str, Any]], tasks: list[str], seeds: int) -> list[dict[str, Any]]:
    """One row per (head, init): per task the seeds' scores and their mean ± std; the GLUE score
    of each seed (mean over tasks) and its mean ± std; throughput and wall time."""
    rows = []
    keys = sorted(
        {(r["head"], r["init"]) for r in runs}, key=lambda k: (k[0], k[1] != "pretrained")
    )
    for head, init in keys:
        mine = [r for r in runs if r["head"] == head and r["init"] == init]
        row: dict[str, Any] = {"head": head, "init": init, "tasks": {}}
        per_seed = np.zeros((seeds, len(tasks)))
        for j, task in enumerate(tasks):
            rs = sorted((r for r in mine if r["task"] == task), key=lambda r: r["seed"])
            scores = [r["task_score"] for r in rs]
            per_seed[: len(scores), j] = scores
            entry = {"scores": scores, **_mean_std(scores)}
            entry["metrics"] = {
                split: {
                    m: _mean_std([r["metrics"][split][m] for r in rs])
                    for m in rs[0]["metrics"][split]
                    if m != "constant_predictions"
                }
                for split in rs[0]["metrics"]
            }
            entry["invalid_outputs"] = sum(sum(r["invalid_outputs"].values()) for r in rs)
            entry["examples_per_s"] = float(
                np.mean([r["timing"]["train_examples_per_s"] for r in rs])
            )
            per_cpu = [r["timing"].get("train_examples_per_cpu_s") for r in rs]
            if all(per_cpu):
                entry["examples_per_cpu_s"] = float(np.mean(per_cpu))
            entry["wall_seconds"] = float(np.sum([r["timing"].get("wall_seconds", 0) for r in rs]))
            hire = [r["hire_contribution_scores"] for r in rs if "hire_contribution_scores" in r]
            if hire:
                first = next(iter(hire[0]))  # dev (MNLI: dev_matched)
                entry["hire_scores"] = np.mean([h[first]["mean"] for h in hire], axis=0).tolist()
            row["tasks"][task] = entry
        glue_per_seed = [glue_score(dict(zip(tasks, s))) for s in per_seed]
        row["glue"] = {"scores": glue_per_seed, **_mean_std(glue_per_seed)}
        rows.append(row)
    return rows


def glue_markdown(checkpoint: str, rows: list[dict[str, Any]], tasks: list[str]) -> str:
    """The GLUE table: mean ± std over seeds, in points (× 100)."""
    names = [get_task(t).name for t in tasks]
    head = "| checkpoint | head | init | " + " | ".join(names) + " | GLUE |"
    lines = [head, "|" + "---|" * (len(names) + 4)]
    label = os.path.basename(os.path.normpath(checkpoint))
    for row in rows:
        cells = [
            f"{100 * row['tasks'][t]['mean']:.1f} ± {100 * row['tasks'][t]['std']:.1f}"
            for t in tasks
        ]
        glue = f"{100 * row['glue']['mean']:.1f} ± {100 * row['glue']['std']:.1f}"
        lines.append(
            f"| {label} | {row['head']} | {row['init']} | " + " | ".join(cells) + f" | {glue} |"
        )
    metric_names = ", ".join(f"{get_task(t).name}: {'/'.join(get_task(t).metrics)}" for t in tasks)
    lines += [
        "",
        f"Task scores × 100 ({metric_names}; two metrics: their mean), mean ± std over "
        "seeds. GLUE = mean of the task scores.",
    ]
    return "\n".join(lines) + "\n"


def _clean_runs(
    o: GlueOptions, runs: list[dict[str, Any]], exclusions: dict[str, dict[str, set[int]]]
) -> list[dict[str, Any]]:
    """Each run re-scored on its clean subset (from its predictions.jsonl)."""
    from c4forge.finetune.clean_subset import score_clean_subset
    from c4forge.finetune.outputs import PREDICTIONS, read_predictions

    out = []
    for r in runs:
        folder = os.path.join(
            o.output, "runs", r["init"], r["head"], r["task"], f"seed-{r['seed']}"
        )
        preds = read_predictions(os.path.join(folder, PREDICTIONS))
        clean = score_clean_subset(get_task(r["task"]), preds, exclusions[r["task"]])
        out.append(dict(r, metrics=clean["metrics"], task_score=clean["task_score"]))
    return out


@ownership.owns_output("glue", lambda o: o.output)
def run_glue(o: GlueOptions) -> str:
    from c4forge.finetune.plots import plot_glue, plot_hire_scores

    tasks = [get_task(t).name for t in o.tasks]
    heads = o.heads or _default_heads(o.checkpoint, o.vocab)
    inits = ["pretrained", "random"] if o.also_random_init else ["pretrained"]
    exclusions = {}
    if o.exclude:  # checked before any fine-tuning
        from c4forge.finetune.clean_subset import load_exclusions

        exclusions = {t: load_exclusions(o.exclude, t) for t in tasks}
    os.makedirs(o.output, exist_ok=True)
    runs = []
    total = len(inits) * len(heads) * len(tasks) * o.seeds
    k = 0
    # task by task, each seed's inits side by side: an interrupted comparison is still paired
    for task in tasks:
        for seed in range(o.seeds):
            for head in heads:
                for init in inits:
                    k += 1
                    print(
                        f"c4forge glue: [{k}/{total}] {init} {head} {task} seed {seed}", flush=True
                    )
                    runs.append(_one_run(o, init, head, task, seed))
    rows = summarise(runs, tasks, o.seeds)
    fingerprint = runs[0]["checkpoint_fingerprint"] if runs else None
    record = {
        "checkpoint": os.path.abspath(o.checkpoint),
        "fingerprint": fingerprint,
        "tasks": tasks,
        "seeds": o.seeds,
        "rows": rows,
    }
    table = glue_markdown(o.checkpoint, rows, tasks)
    if o.exclude:
        clean_rows = summarise(_clean_runs(o, runs, exclusions), tasks, o.seeds)
        record["exclude"] = os.path.abspath(o.exclude)
        record["excluded_examples"] = {t: sum(map(len, exclusions[t].values())) for t in tasks}
        record["clean_rows"] = clean_rows
        excluded = ", ".join(f"{get_task(t).name} {record['excluded_examples'][t]}" for t in tasks)
        table += (
            f"\nClean subset (contaminated dev examples excluded: {excluded}):\n\n"
            + glue_markdown(o.checkpoint, clean_rows, tasks)
        )
    write_json(os.path.join(o.output, "glue.json"), record)
    atomic_write_text(os.path.join(o.output, "glue.md"), table)
    plot_glue(rows, tasks, os.path.join(o.output, "glue.png"))
    plot_hire_scores(rows, tasks, os.path.join(o.output, "hire_scores.png"))
    return f"c4forge glue: {total} fine-tuning runs in {o.output}\n\n{table}"
