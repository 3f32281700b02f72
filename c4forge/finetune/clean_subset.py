"""``--exclude REPORT`` of `evaluate` and `glue`: the same predictions scored again without
the evaluation examples a `c4forge contamination` report found in the pretraining corpus, so
the clean subset's score sits next to the full one (a gap hints at memorisation)."""

from __future__ import annotations

from typing import Any

from c4forge.errors import ConfigError
from c4forge.finetune.metrics import compute_metrics, task_score
from c4forge.glue.tasks import TaskSpec


def load_exclusions(report_path: str, task: str) -> dict[str, set[int]]:
    """Per split, the 0-based rows of ``task`` the report lists as contaminated."""
    from c4forge.contamination.report import read_report

    report = read_report(report_path)
    bench = report.get("benchmarks", {}).get(task)
    if bench is None:
        names = ", ".join(sorted(report.get("benchmarks", {}))) or "none"
        raise ConfigError(f"--exclude {report_path}: no benchmark {task!r} in it (has: {names})")
    return {
        split: {ex["index"] for ex in s["contaminated_examples"]}
        for split, s in bench["splits"].items()
    }


def score_clean_subset(
    spec: TaskSpec, predictions: list[dict[str, Any]], excluded: dict[str, set[int]]
) -> dict[str, Any]:
    """Metrics per split over the rows not excluded, their task score, and the counts."""
    splits: dict[str, Any] = {}
    for split in dict.fromkeys(p["split"] for p in predictions):
        rows = [p for p in predictions if p["split"] == split]
        drop = excluded.get(split, set())
        kept = [p for p in rows if p["index"] not in drop]
        splits[split] = {
            "examples": len(kept),
            "excluded": len(rows) - len(kept),
            "metrics": compute_metrics(
                spec, [p["label"] for p in kept], [p["prediction"] for p in kept]
            )
            if kept
            else {},
        }
    metrics = {k: v["metrics"] for k, v in splits.items() if v["metrics"]}
    return {
        "splits": splits,
        "metrics": metrics,
        "task_score": task_score(spec, metrics) if metrics else None,
    }


def summary_lines(clean: dict[str, Any]) -> list[str]:
    lines = []
    for split, s in clean["splits"].items():
        shown = ", ".join(f"{k} {100 * v:.2f}" for k, v in s["metrics"].items())
        lines.append(
            f"  clean {split:9s} {shown}  ({s['examples']} examples, {s['excluded']} "
            "contaminated excluded)"
        )
    if clean["task_score"] is not None:
        lines.append(f"  clean score     {100 * clean['task_score']:.2f}")
    return lines
