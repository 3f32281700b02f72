"""Does pretraining on the bundled sample help downstream? GLUE dev scores of models pretrained
on the bundled real sample against the same fine-tuning from a random start (finetune.md §6–§7).

For each model/head: SST-2, CoLA, MRPC, STS-B and RTE (the real GLUE train/dev files), pretrained
and random init, ``--seeds`` seeds, the same budget everywhere (a fixed random subset of
``--train-examples`` training rows, ``--steps`` steps of ``--batch-size``, ``--max-length`` input
tokens, the full dev sets). Printed: task score × 100 mean ± std over seeds, the GLUE average,
fine-tuning examples/s, wall and CPU seconds. Runs in one process with one torch thread (the
steadier setting on a shared CPU).

Pretraining (skipped when ``--work`` already holds it): clean → vocab (2,000 pieces) → shards
(span corruption 128/29; ``bert_mlm_nsp`` 128 for BERT) → ``train`` 300 steps of ``tiny`` /
``bert-tiny`` with the demo's settings (``c4forge demo`` leaves the same folders, so ``--work`` may be a demo folder).

Usage: ``python benchmarks/finetune.py --work c4forge-demo --glue ../shared/data/glue``
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")

TASKS = ["sst2", "cola", "mrpc", "stsb", "rte"]
MODELS = {"tiny": ("t5", ["text"]), "bert-tiny": ("bert", ["cls", "hire"])}


def _cli(argv: list[str]) -> None:
    from c4forge.cli import main

    print("\n$ c4forge " + " ".join(argv), flush=True)
    if main(argv) != 0:
        raise SystemExit(f"failed: c4forge {' '.join(argv)}")


def pretrain(work: str, preset: str, steps: int) -> str:
    """The pretraining run of ``preset`` in ``work`` (made with the demo's settings if missing)."""
    from c4forge.samples import demo_inputs

    clean, vocab = os.path.join(work, "clean"), os.path.join(work, "vocab")
    bert = preset.startswith("bert")
    shards = os.path.join(work, "shards_bert" if bert else "shards")
    run = os.path.join(work, "run_bert" if bert else "run")
    if not os.path.exists(os.path.join(clean, "stats.json")):
        _cli(["clean", *demo_inputs(os.path.join(work, "input")), "-o", clean])
    if not os.path.exists(os.path.join(vocab, "vocab.json")):
        _cli(["vocab", clean, "-o", vocab, "--vocab-size", "2000"])
    if not os.path.exists(os.path.join(shards, "index.json")):
        extra = ["--objective", "bert_mlm_nsp"] if bert else []
        _cli(["shards", clean, "--vocab", vocab, "-o", shards, "--inputs-length", "128", *extra])
    if not os.path.exists(os.path.join(run, "checkpoints", "latest")):
        # the demo's settings: T5 with AdamWScale 3e-3; BERT with its own AdamW at 2e-3
        recipe = ["--lr", "2e-3"] if bert else ["--optimizer", "adamwscale", "--lr", "3e-3"]
        _cli(
            [
                "train",
                shards,
                "--preset",
                preset,
                "--steps",
                str(steps),
                "-o",
                run,
                "--batch-size",
                "32",
                "--device",
                "cpu",
                "--vocab",
                vocab,
                *recipe,
                "--warmup",
                str(steps // 10),
            ]
        )
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", default="finetune-bench", help="pretraining folder (or a demo's)")
    p.add_argument("--glue", required=True, help="GLUE folder (CoLA/, SST-2/, …)")
    p.add_argument("--out", default=None, help="fine-tuning outputs (default WORK/glue-bench)")
    p.add_argument("--models", default="tiny,bert-tiny")
    p.add_argument("--heads", default=None, help="only these heads (default: text; cls,hire)")
    p.add_argument("--tasks", default=",".join(TASKS))
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--steps", type=int, default=150)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--max-length", type=int, default=64)
    p.add_argument("--train-examples", type=int, default=2000)
    p.add_argument("--lr", type=float, default=None, help="cls/hire learning rate (default 5e-4)")
    p.add_argument("--pretrain-steps", type=int, default=300)
    p.add_argument(
        "--collect",
        nargs="+",
        metavar="DIR",
        help="only print the table of the finished runs under these folders (results.json)",
    )
    args = p.parse_args()
    if args.collect:
        collect(args.collect, args.tasks.split(","), args.seeds)
        return

    import torch

    from c4forge.finetune.glue import GlueOptions, run_glue

    torch.set_num_threads(1)
    out_root = args.out or os.path.join(args.work, "glue-bench")
    tasks = args.tasks.split(",")
    report = []
    for name in args.models.split(","):
        family, heads = MODELS[name]
        if args.heads:
            heads = [h for h in args.heads.split(",") if h in heads]
        t0, c0 = time.perf_counter(), time.process_time()
        run = pretrain(args.work, name, args.pretrain_steps)
        pre_cpu = time.process_time() - c0
        for head in heads:
            # text: the T5 recipe (Adafactor, constant 1e-3); cls/hire: a compact-model rate
            lr = None if head == "text" else (args.lr or 5e-4)
            t0, c0 = time.perf_counter(), time.process_time()
            table = run_glue(
                GlueOptions(
                    checkpoint=run,
                    data=args.glue,
                    output=os.path.join(out_root, name, head),
                    tasks=tasks,
                    heads=[head],
                    seeds=args.seeds,
                    also_random_init=True,
                    steps=args.steps,
                    batch_size=args.batch_size,
                    max_length=args.max_length,
                    max_train_examples=args.train_examples,
                    lr=lr,
                    device="cpu",
                    progress=False,
                )
            )
            glue = json.load(open(os.path.join(out_root, name, head, "glue.json")))
            report.append(
                {
                    "model": name,
                    "head": head,
                    "lr": lr,
                    "rows": glue["rows"],
                    "wall_s": time.perf_counter() - t0,
                    "cpu_s": time.process_time() - c0,
                    "pretrain_cpu_s": pre_cpu,
                }
            )
            print(table, flush=True)
    print(
        f"\nBudget per run: {args.train_examples} training rows (fixed random subset), "
        f"{args.steps} steps × batch {args.batch_size}, max length {args.max_length}, full dev "
        f"sets, {args.seeds} seeds; device cpu, 1 torch thread.\n"
    )
    header = (
        "| model | head | init | "
        + " | ".join(tasks)
        + " | GLUE | ex/s (wall) | ex/CPU-s | wall s | CPU s |"
    )
    print(header)
    print("|" + "---|" * (len(tasks) + 7))
    for rep in report:
        for row in rep["rows"]:
            cells = [
                f"{100 * row['tasks'][t]['mean']:.1f} ± {100 * row['tasks'][t]['std']:.1f}"
                for t in tasks
            ]
            exs = sum(row["tasks"][t]["examples_per_s"] for t in tasks) / len(tasks)
            per_cpu = [row["tasks"][t].get("examples_per_cpu_s") for t in tasks]
            exc = f"{sum(per_cpu) / len(tasks):.0f}" if all(per_cpu) else ""
            wall = sum(row["tasks"][t]["wall_seconds"] for t in tasks)
            print(
                f"| {rep['model']} | {rep['head']} | {row['init']} | "
                + " | ".join(cells)
                + f" | {100 * row['glue']['mean']:.1f} ± {100 * row['glue']['std']:.1f}"
                + f" | {exs:.0f} | {exc} | {wall:.0f} | |"
            )
        print(
            f"| {rep['model']} | {rep['head']} | both | "
            + " | " * len(tasks)
            + f" | | | {rep['wall_s']:.0f} | {rep['cpu_s']:.0f} |"
        )
    with open(os.path.join(out_root, "bench.json"), "w") as f:
        json.dump({"args": vars(args), "report": report}, f, indent=1)


def collect(folders: list[str], tasks: list[str], seeds: int) -> None:
    """The table of whatever finished (an interrupted or split benchmark): per head/init, tasks
    with all seeds done; CPU seconds of training summed from the runs' own records."""
    import glob

    from c4forge.finetune.glue import summarise

    runs = []
    for folder in folders:
        pattern = os.path.join(folder, "**", "seed-*", "results.json")
        runs += [json.load(open(p)) for p in sorted(glob.glob(pattern, recursive=True))]
    for head in sorted({r["head"] for r in runs}):
        mine = [r for r in runs if r["head"] == head]
        done = [t for t in tasks if sum(r["task"] == t for r in mine) == 2 * seeds]
        rows = summarise([r for r in mine if r["task"] in done], done, seeds)
        print(f"\n{head}: tasks with every seed and both inits done: {', '.join(done)}")
        print("| init | " + " | ".join(done) + " | mean | ex/CPU-s | train CPU s | eval s |")
        print("|" + "---|" * (len(done) + 5))
        for row in rows:
            cells = [
                f"{100 * row['tasks'][t]['mean']:.1f} ± {100 * row['tasks'][t]['std']:.1f}"
                for t in done
            ]
            rs = [r for r in mine if r["init"] == row["init"] and r["task"] in done]
            cpu = sum(r["timing"].get("train_cpu_seconds", 0) for r in rs)
            ev = sum(r["timing"]["eval_seconds"] for r in rs)
            exc = [row["tasks"][t].get("examples_per_cpu_s") for t in done]
            exc_s = f"{sum(exc) / len(exc):.0f}" if all(exc) else ""
            print(
                f"| {row['init']} | "
                + " | ".join(cells)
                + f" | {100 * row['glue']['mean']:.1f} ± {100 * row['glue']['std']:.1f}"
                + f" | {exc_s} | {cpu:.0f} | {ev:.0f} |"
            )


if __name__ == "__main__":
    main()
