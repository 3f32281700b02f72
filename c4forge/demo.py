"""`c4forge demo`: the whole chain on the bundled real sample, on this machine.

clean → vocab → shards → a short CPU training run of the `tiny` preset, then BERT's side of
the same clean sample: `bert_mlm_nsp` shards → a short `bert-tiny` pretraining run. Every stage
builds its command's typed options (the dataclasses the command line builds) and calls the stage
function, so the demo is also the end-to-end smoke test of the toolkit. The sample is small (≈ 1,100 pages, ≈ 2 M
characters), so the vocabulary is small too (2,000 pieces instead of T5's 32,000) and the
examples are 128/29 tokens instead of 512/114: enough to watch the loss fall in a few minutes.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from c4forge.clean.config import CleanJob
from c4forge.cliconfig import positive
from c4forge.shards.job import ShardsJob
from c4forge.trainers.options import TrainOptions
from c4forge.vocab.options import VocabOptions


def register(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "demo",
        help="run clean → vocab → shards → train on the bundled real sample",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--output", "-o", default="c4forge-demo", help="work folder (default ./c4forge-demo)"
    )
    p.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    p.add_argument(
        "--vocab-size", type=int, default=2000, help="SentencePiece pieces (default 2000)"
    )
    p.add_argument("--inputs-length", type=int, default=128, help="encoder length (default 128)")
    p.add_argument("--batch-size", type=int, default=32, help="training batch size (default 32)")
    p.add_argument(
        "--bert-steps", type=int, default=200, help="bert-tiny steps (default 200; 0 = skip)"
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="worker processes of the clean and shards stages (default: all cores)",
    )
    p.add_argument(
        "--threads",
        type=positive,
        default=None,
        help="torch CPU threads of the training runs (default: the CPUs this process may use) "
        "and of fine-tuning (default 1)",
    )
    p.add_argument("--overwrite", action="store_true", help="redo every stage from scratch")
    return p


@dataclass(frozen=True)
class Step:
    """One stage of the chain: ``request`` is a command's typed request (run by
    ``c4forge.commands.run``, its options shown) or, for a stage that is no command of its own,
    a function. ``marker``: the file whose presence means the stage is done (a rerun skips it
    unless --overwrite). ``fresh``: a training run folder, removed first under --overwrite (a
    run otherwise resumes from it)."""

    title: str
    marker: str
    request: Any
    fresh: str | None = None


def _run_steps(steps: list[Step], overwrite: bool) -> None:
    for step in steps:
        if overwrite and step.fresh is not None and os.path.isdir(step.fresh):
            shutil.rmtree(step.fresh)
        if not overwrite and os.path.exists(step.marker):
            where = os.path.basename(os.path.dirname(step.marker))
            print(f"\n=== {where}: already complete ({step.marker})")
            continue
        if callable(step.request):
            _call(step.title, step.request)
        else:
            _call(step.title, lambda r=step.request: _command(r), step.request)


def _command(request: Any) -> None:
    """Run a command's request and print the summary its command line prints."""
    from c4forge.commands import run

    text = run(request).text()
    if text:
        print(text)


def _call(title: str, stage: Callable[[], Any], opts: Any = None) -> None:
    """Run a stage function (``opts``: the typed options it was built from, shown)."""
    print(f"\n=== {title}" + (f": {_shown(opts)}" if opts is not None else ""), flush=True)
    start = time.perf_counter()
    stage()
    print(f"=== {title} done in {time.perf_counter() - start:.1f} s", flush=True)


def _shown(opts: Any) -> str:
    """``Options(field=value, …)`` with only the fields that differ from their defaults."""
    given = [
        f"{f.name}={getattr(opts, f.name)!r}"
        for f in dataclasses.fields(opts)
        if getattr(opts, f.name) != _default(f)
    ]
    return f"{type(opts).__name__}({', '.join(given)})"


def _default(f: dataclasses.Field) -> Any:
    """A field's default (a factory's value; a required field has none)."""
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.samples import demo_inputs

    work = os.path.abspath(args.output)
    os.makedirs(work, exist_ok=True)
    inputs = demo_inputs(os.path.join(work, "input"))
    clean, vocab, shards, runs, bert_shards, bert_run, report = (
        os.path.join(work, d)
        for d in ("clean", "vocab", "shards", "run", "shards_bert", "run_bert", "report")
    )
    steps = _t5_steps(args, inputs, clean, vocab, shards, report, runs)
    outputs = [
        ("clean documents + stats.json + funnel.png", clean),
        ("SentencePiece vocabulary", vocab),
        ("Arrow shards + index.json", shards),
        ("training run (checkpoints, metrics.jsonl, loss_curve.png)", runs),
    ]
    if args.bert_steps > 0:
        steps += _bert_steps(args, clean, vocab, bert_shards, bert_run)
        outputs += [
            ("BERT MLM+NSP shards (bert_mlm_nsp) + index.json", bert_shards),
            ("bert-tiny pretraining run (metrics.jsonl, loss_curve.png)", bert_run),
        ]
    _run_steps(steps, args.overwrite)
    from c4forge.finetune.demo_step import demo_transfer

    demo_transfer(runs, work, overwrite=args.overwrite, shards=shards, threads=args.threads)
    outputs.append(
        ("SST-2 fine-tuning (results.json, predictions.jsonl)", f"{work}/finetune-sst2-*")
    )
    print("\nc4forge demo finished. Outputs:")
    for label, path in outputs:
        print(f"  {label:58s} {path}")
    print(f"\nCorpus datasheet (open in a browser): {os.path.join(report, 'index.html')}")
    print(
        f"\nExport to HF transformers:  c4forge export {runs} --output {os.path.join(work, 'hf')}"
    )
    if args.bert_steps > 0:
        print(
            f"                            c4forge export {bert_run} --output "
            f"{os.path.join(work, 'hf_bert')}   (BertForPreTraining)"
        )
    return 0


def _t5_steps(args, inputs, clean, vocab, shards, report, runs) -> list[Step]:
    """clean → vocab → shards → the corpus datasheet → a short ``tiny`` run."""

    def datasheet() -> None:
        from c4forge.report.write import write_report

        path = write_report(clean, report, vocab=vocab, shards=shards, progress=True)
        print(f"c4forge report: {path}")

    steps = args.steps
    return [
        Step(
            "clean",
            os.path.join(clean, "stats.json"),
            CleanJob(
                inputs=tuple(inputs),
                output=clean,
                report=True,
                workers=args.workers or None,
                overwrite=args.overwrite,
            ),
        ),
        Step(
            "vocab",
            os.path.join(vocab, "vocab.json"),
            VocabOptions(
                docs=clean, output=vocab, vocab_size=args.vocab_size, overwrite=args.overwrite
            ),
        ),
        Step(
            "shards",
            os.path.join(shards, "index.json"),
            ShardsJob(
                docs=clean,
                vocab=vocab,
                output=shards,
                inputs_length=args.inputs_length,
                workers=args.workers or None,
                overwrite=args.overwrite,
            ),
        ),
        Step("report", os.path.join(report, "report.json"), datasheet),
        Step(
            "train",
            os.path.join(runs, "checkpoints", "latest"),
            TrainOptions(
                shards=shards,
                preset="tiny",
                steps=steps,
                output=runs,
                batch_size=args.batch_size,
                device="cpu",
                vocab=vocab,
                eval_every=max(1, steps // 4),
                eval_rows=512,
                save_every=max(1, steps // 2),
                optimizer="adamwscale",
                lr=3e-3,
                warmup=max(1, steps // 10),
                threads=args.threads,
            ),
            fresh=runs,
        ),
    ]


def _bert_steps(args, clean, vocab, shards, run) -> list[Step]:
    """BERT's rows from the same clean sample (128-token pairs, 20 predictions) and a short
    bert-tiny run with BERT's AdamW (a higher peak than bert-base's 1e-4: tiny, few steps)."""
    steps = args.bert_steps
    return [
        Step(
            "shards (bert_mlm_nsp)",
            os.path.join(shards, "index.json"),
            ShardsJob(
                docs=clean,
                vocab=vocab,
                output=shards,
                objective="bert_mlm_nsp",
                inputs_length=128,
                workers=args.workers or None,
                overwrite=args.overwrite,
            ),
        ),
        Step(
            "train (bert-tiny)",
            os.path.join(run, "checkpoints", "latest"),
            TrainOptions(
                shards=shards,
                preset="bert-tiny",
                steps=steps,
                output=run,
                batch_size=args.batch_size,
                device="cpu",
                vocab=vocab,
                eval_every=max(1, steps // 4),
                eval_rows=512,
                save_every=max(1, steps // 2),
                lr=2e-3,
                threads=args.threads,
            ),
            fresh=run,
        ),
    ]
