"""``c4forge evaluate``: a fine-tuned model on a split, scored and written like the run's own
evaluation (results.json + predictions.jsonl)."""

from __future__ import annotations

import os
import time
from typing import Any

from c4forge.errors import ConfigError
from c4forge.finetune.evaluation import predict_split
from c4forge.finetune.head_registry import HEADS
from c4forge.finetune.loop import encoded_for_eval
from c4forge.finetune.options import DEFAULT_MAX_LENGTH, EvaluateOptions
from c4forge.finetune.outputs import spec_of, write_results
from c4forge.finetune.restore import load_finetuned
from c4forge.finetune.taskdata import load_task_data
from c4forge.finetune.zero_shot import is_training_run, load_pretrained_text_head
from c4forge.glue.tasks import CustomFields, get_task
from c4forge.io import ownership


def evaluate_run(opts: EvaluateOptions) -> tuple[dict[str, Any], str]:
    from c4forge.trainers.device import resolve_device

    task = "custom" if opts.task == "custom" else get_task(opts.task).name
    if is_training_run(opts.ft):  # a (multi-task) pretraining run's own text head
        if task == "custom":
            raise ConfigError(
                f"{opts.ft}: --task custom needs a fine-tuned model (its label set comes from "
                "fine-tuning)"
            )
        model, run_cfg, vocab = load_pretrained_text_head(
            opts.ft, get_task(task), opts.head, DEFAULT_MAX_LENGTH
        )
    else:
        model, run_cfg, vocab = load_finetuned(opts.ft)
    if task != run_cfg["task"]:
        raise ConfigError(f"{opts.ft} was fine-tuned on {run_cfg['task']}, not {task}")
    if opts.head and opts.head != run_cfg["head"]:
        kind = (
            "an encoder-decoder fine-tuned text-to-text"
            if run_cfg["head"] in HEADS and HEADS[run_cfg["head"]].generates
            else (f"a model with a {run_cfg['head']} head")
        )
        raise ConfigError(
            f"--head {opts.head}: {opts.ft} is {kind}; it can only be evaluated with its own head "
            f"({run_cfg['head']}); fine-tune the pretraining checkpoint with --head {opts.head}"
        )
    excluded = None
    if opts.exclude:  # checked before the model runs
        from c4forge.finetune.clean_subset import load_exclusions

        excluded = load_exclusions(opts.exclude, task)
    dev = resolve_device(opts.device)
    model.to(dev.device)
    custom = None
    if task == "custom":
        saved = run_cfg["custom"]
        custom = CustomFields(
            opts.text_field or saved["text"],
            opts.label_field or saved["label"],
            opts.text_pair_field or saved["pair"],
            saved["regression"],
        )
    labels = tuple(run_cfg["labels"]) if run_cfg["labels"] else None
    data = load_task_data(
        task,
        opts.data,
        train=False,
        split=opts.split,
        custom=custom,
        eval_data=opts.eval_data,
        labels=labels,
    )
    data.spec = spec_of(run_cfg)
    enc = encoded_for_eval(run_cfg, vocab, data)
    t0 = time.perf_counter()
    results = {
        name: predict_split(
            name, data.spec, e, model, run_cfg["head"], vocab, dev, opts.batch_size, opts.progress
        )
        for name, e in enc.items()
    }
    seconds = time.perf_counter() - t0
    split_name = opts.split or "dev"
    out = opts.output or os.path.join(opts.ft, f"eval-{task}-{split_name}")
    cfg = dict(run_cfg, data_files=data.files)
    with ownership.owned_output(out, "evaluate"):  # creates it; one evaluation at a time
        res = write_results(
            out,
            cfg,
            results,
            {k: v.truncated for k, v in enc.items()},
            {"eval_seconds": seconds},
            None,
        )
        if excluded is not None:
            from c4forge.finetune.clean_subset import score_clean_subset
            from c4forge.finetune.outputs import RESULTS
            from c4forge.io.storage import write_json

            records = [rec for r in results.values() for rec in r.predictions]
            res["clean_subset"] = {
                "report": os.path.abspath(opts.exclude),
                **score_clean_subset(data.spec, records, excluded),
            }
            write_json(os.path.join(out, RESULTS), res)
    return res, out
