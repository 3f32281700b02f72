"""Predictions on one split and their metrics (finetune.md §4–§6).

The text head decodes greedily (at most the longest target + 2 tokens) and maps the string back
to a label; the encoder heads take the argmax (or the single output for regression). HIRE's
contribution scores are averaged over the split, with their standard deviation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from c4forge.finetune.encoding import Encoded, collate
from c4forge.finetune.head_registry import get_head
from c4forge.finetune.metrics import compute_metrics
from c4forge.glue.formats import parse_prediction, regression_target, t5_target
from c4forge.glue.tasks import TaskSpec


@dataclass
class SplitResult:
    split: str
    metrics: dict[str, float]
    predictions: list[dict[str, Any]]
    invalid: int = 0
    hire_scores: dict[str, list[float]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def max_decode_tokens(spec: TaskSpec, vocab) -> int:
    """Longest target (with EOS) + 2."""
    if spec.regression:
        words = [regression_target(k / 5.0) for k in range(26)]
    else:
        words = [t5_target(spec, k) for k in range(spec.num_labels)]
    return max(len(vocab.encode(w)) + 1 for w in words) + 2


@torch.no_grad()
def predict_split(
    split: str,
    spec: TaskSpec,
    enc: Encoded,
    model: torch.nn.Module,
    head: str,
    vocab,
    dev,
    batch_size: int,
    progress: bool = False,
) -> SplitResult:
    """Run the model over every row of ``enc``; metrics and one prediction record per row."""
    from c4forge.finetune.t5_adapter import greedy_decode
    from c4forge.progress import progress as progress_display

    was_training = model.training
    model.eval()
    n = len(enc.inputs)
    preds: list[Any] = []
    outputs: list[str] = []
    invalid = 0
    scores: list[np.ndarray] = []
    generates = get_head(head).generates
    max_tokens = max_decode_tokens(spec, vocab) if generates else 0
    starts = range(0, n, batch_size)
    bar = progress_display(
        starts, desc=f"eval {split}", unit="batch", disable=not progress, leave=False
    )
    for start in bar:
        idx = np.arange(start, min(start + batch_size, n))
        batch = {k: v.to(dev.device) for k, v in collate(enc, idx).items()}
        with dev.autocast():
            if generates:
                ids = greedy_decode(model, batch["input_ids"], max_tokens, vocab.vocab_size)
                for row in ids:
                    text = vocab.decode(row)
                    label, ok = parse_prediction(spec, text)
                    outputs.append(text)
                    preds.append(label)
                    invalid += not ok
                continue
            out = model(batch)
        logits = out["logits"].float()
        if spec.regression:
            preds.extend(float(x) for x in logits[:, 0].cpu())
        else:
            preds.extend(int(x) for x in logits.argmax(-1).cpu())
        if "scores" in out:
            scores.append(out["scores"].float().cpu().numpy())
    model.train(was_training)
    labels = enc.labels.tolist()
    metrics = compute_metrics(spec, labels, preds)
    records = []
    for i, (y, p) in enumerate(zip(labels, preds)):
        rec = {"split": split, "index": i, "label": y, "prediction": p}
        if outputs:
            rec["output"] = outputs[i]
        records.append(rec)
    hire = None
    if scores:
        s = np.concatenate(scores)
        hire = {"mean": s.mean(0).tolist(), "std": s.std(0).tolist()}
    return SplitResult(split, metrics, records, invalid, hire)
