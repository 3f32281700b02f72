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
        "--workers", type=int, default=None,
        help="worker processes of the clean and shards stages (default: all cores)",
    )
    p.add_argument(
        "--threads", type=positive, default=None,
        help="torch CPU threads of the training runs (default: the CPUs this process may use) "
        "and of fine-tuning (default 1)",
    )  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="redo every stage from scratch")
    return p


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


def _clean(job: Any) -> None:
    from c4forge.clean.driver import run_clean
    from c4forge.errors import C4ForgeError

    code = run_clean(job)
    if code:
        raise C4ForgeError(f"demo stage 'clean' failed with exit code {code}")


def _vocab(opts: Any) -> None:
    from c4forge.vocab.train import iter_summary, vocab_from_options

    desc = vocab_from_options(opts)
    for line in iter_summary(desc, opts.output):
        print(line)


def _shards(job: Any) -> None:
    from c4forge.shards.driver import run_job

    run_job(job)


def _train(opts: Any) -> None:
    from c4forge.trainers.train import train

    print(train(opts).text())


def run(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.samples import demo_inputs

    work = os.path.abspath(args.output)
    os.makedirs(work, exist_ok=True)
    inputs = demo_inputs(os.path.join(work, "input"))
    clean, vocab, shards, runs, bert_shards, bert_run = (
        os.path.join(work, d)
        for d in ("clean", "vocab", "shards", "run", "shards_bert", "run_bert")
    )

    # Each stage leaves a completion marker; a rerun skips finished stages unless --overwrite.
    def done(marker: str) -> bool:
        if args.overwrite or not os.path.exists(marker):
            return False
        print(f"\n=== {os.path.basename(os.path.dirname(marker))}: already complete ({marker})")
        return True

    if not done(os.path.join(clean, "stats.json")):
        job = CleanJob(
            inputs=tuple(inputs), output=clean, report=True, workers=args.workers or None,
            overwrite=args.overwrite,
        )  # fmt: skip
        _call("clean", lambda: _clean(job), job)
    if not done(os.path.join(vocab, "vocab.json")):
        vopts = VocabOptions(
            docs=clean, output=vocab, vocab_size=args.vocab_size, overwrite=args.overwrite
        )
        _call("vocab", lambda: _vocab(vopts), vopts)
    if not done(os.path.join(shards, "index.json")):
        sjob = ShardsJob(
            docs=clean, vocab=vocab, output=shards, inputs_length=args.inputs_length,
            workers=args.workers or None, overwrite=args.overwrite,
        )  # fmt: skip
        _call("shards", lambda: _shards(sjob), sjob)
    report = os.path.join(work, "report")
    if not done(os.path.join(report, "report.json")):  # the corpus datasheet
        from c4forge.report.write import write_report

        def datasheet() -> None:
            path = write_report(clean, report, vocab=vocab, shards=shards, progress=True)
            print(f"c4forge report: {path}")

        _call("report", datasheet)
    if args.overwrite and os.path.isdir(runs):
        shutil.rmtree(runs)
    if not done(os.path.join(runs, "checkpoints", "latest")):
        topts = TrainOptions(
            shards=shards, preset="tiny", steps=args.steps, output=runs,
            batch_size=args.batch_size, device="cpu", vocab=vocab,
            eval_every=max(1, args.steps // 4), eval_rows=512, save_every=max(1, args.steps // 2),
            optimizer="adamwscale", lr=3e-3, warmup=max(1, args.steps // 10),
            threads=args.threads,
        )  # fmt: skip
        _call("train", lambda: _train(topts), topts)

    outputs = [
        ("clean documents + stats.json + funnel.png", clean),
        ("SentencePiece vocabulary", vocab),
        ("Arrow shards + index.json", shards),
        ("training run (checkpoints, metrics.jsonl, loss_curve.png)", runs),
    ]
    if args.bert_steps > 0:
        _bert_stages(args, clean, vocab, bert_shards, bert_run, done)
        outputs += [
            ("BERT MLM+NSP shards (bert_mlm_nsp) + index.json", bert_shards),
            ("bert-tiny pretraining run (metrics.jsonl, loss_curve.png)", bert_run),
        ]
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


def _bert_stages(args, clean, vocab, shards, run, done) -> None:
    """BERT's rows from the same clean sample (128-token pairs, 20 predictions) and a short
    bert-tiny run with BERT's AdamW (a higher peak than bert-base's 1e-4: tiny, few steps)."""
    if not done(os.path.join(shards, "index.json")):
        job = ShardsJob(
            docs=clean, vocab=vocab, output=shards, objective="bert_mlm_nsp", inputs_length=128,
            workers=args.workers or None, overwrite=args.overwrite,
        )  # fmt: skip
        _call("shards (bert_mlm_nsp)", lambda: _shards(job), job)
    if args.overwrite and os.path.isdir(run):
        shutil.rmtree(run)
    if not done(os.path.join(run, "checkpoints", "latest")):
        steps = args.bert_steps
        opts = TrainOptions(
            shards=shards, preset="bert-tiny", steps=steps, output=run,
            batch_size=args.batch_size, device="cpu", vocab=vocab,
            eval_every=max(1, steps // 4), eval_rows=512, save_every=max(1, steps // 2), lr=2e-3,
            threads=args.threads,
        )  # fmt: skip
        _call("train (bert-tiny)", lambda: _train(opts), opts)
