"""Everything one GPU run should measure about the training step (model.md §4), in one process.

Phases (each prints a block; a phase that fails prints its error and the next one runs):

1. ``t5``: T5 ``base`` 64 × 512/114, bf16 autocast + ``torch.compile``: c4forge with its sync-free
   Adafactor against HF ``T5ForConditionalGeneration`` with ``torch.optim.Adafactor`` (the
   comparison the trainer's users make), and the step broken down on the same compiled model:
   forward + backward alone, + the sync-free Adafactor, + torch's Adafactor (the step before),
   each optimizer's ``step()`` alone, and the attention kernels' share of GPU time with the
   top-10 kernels (torch profiler, three steps).
2. ``bert``: ``bert-base`` 128 × 128 (20 predictions), AdamW: c4forge (sparse MLM head, mask-free
   attention on full rows) against HF ``BertForPreTraining`` (``labels=``), same weights.
3. ``loader``: the trainer's loader (``TrainStream``) alone over real shards: ms per batch.
4. ``cli``: ``c4forge train`` on the same shards, tokens/s and MFU read from its metrics.jsonl,
   next to phase 1's figure (the shards' vocabulary is smaller than 32,128, so MFU, which counts
   the lm_head the model really has, is the fair comparison; the goal is within 10 %).

``--smoke``: tiny shapes, a few steps, no compile, on whatever device there is (the CPU here),
so the script is known to run before a GPU is at hand; its figures mean nothing.

Usage: ``python benchmarks/gpu.py --shards .gpu-bench/shards`` (benchmarks/gpu.sh wraps it).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch
from train import batches, describe, make_step, t5_lengths  # also puts tests/ on sys.path

from c4forge.trainers.config import make_config
from c4forge.trainers.data import DataPlan, TrainStream, open_shard_set
from c4forge.trainers.device import resolve_device
from c4forge.trainers.flops import flops_per_example, mfu
from c4forge.trainers.models.t5 import GLUTransformer

# the HF reference models are test helpers (tests/hf_reference.py), on sys.path through `train`
build_hf_model = importlib.import_module("hf_reference").build_hf_model

# kernel names of attention (fused SDPA backends, Flex/Triton attention, softmax of the math path)
ATTENTION_KERNELS = ("attention", "fmha", "flash", "softmax", "sdpa", "attn", "efficient")


class Timer:
    """Mean seconds per call of ``fn`` after ``warmup`` calls, synchronising the device."""

    def __init__(self, dev) -> None:
        self.dev = dev

    def sync(self) -> None:
        if self.dev.kind == "cuda":
            torch.cuda.synchronize()

    def __call__(self, fn, warmup: int, steps: int) -> float:
        for _ in range(warmup):
            fn()
        self.sync()
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        self.sync()
        return (time.perf_counter() - start) / steps


def phase(title: str):
    """Print a header; run the phase; on error print it and carry on (one failure must not cost
    the whole GPU run)."""

    def wrap(fn):
        def run(*args, **kwargs):
            print(f"\n=== {title}", flush=True)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            except Exception:  # noqa: BLE001 - reported, and the next phase still runs
                print(f"!!! {title} failed:\n{traceback.format_exc()}", flush=True)
                return None
            finally:
                print(f"=== {title}: {time.perf_counter() - start:.1f} s", flush=True)

        return run

    return wrap


def profile_kernels(step, data, dev, n: int = 3) -> None:
    """Top-10 kernels (GPU time; CPU ops without CUDA) and the attention share."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if dev.kind == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for i in range(n):
            step(data[i % len(data)])
        if dev.kind == "cuda":
            torch.cuda.synchronize()
    averages = prof.key_averages()
    if dev.kind == "cuda":  # GPU kernels are the events of device type CUDA
        kernels = [e for e in averages if e.device_type == torch.autograd.DeviceType.CUDA]
        time_of = {e.key: e.self_device_time_total for e in kernels}
        unit = "GPU"
    else:
        kernels = [e for e in averages if e.key.startswith("aten::")]
        time_of = {e.key: e.self_cpu_time_total for e in kernels}
        unit = "CPU (no CUDA: CPU ops stand in for kernels)"
    total = sum(time_of.values()) or 1.0
    attention = sum(t for k, t in time_of.items() if any(a in k.lower() for a in ATTENTION_KERNELS))
    print(f"top-10 by self {unit} time over {n} steps (µs, share):")
    for name, t in sorted(time_of.items(), key=lambda kv: -kv[1])[:10]:
        print(f"  {t:>12,.0f}  {100 * t / total:5.1f} %  {name[:100]}")
    print(f"attention kernels: {100 * attention / total:.1f} % of {unit.split()[0]} time")


@phase("t5: c4forge vs HF, step breakdown, kernels")
def t5_phase(args, dev, compile_, peak) -> dict | None:
    args.targets_length = t5_lengths(args.inputs_length)
    data = batches(args, args.embedding_size, 4)
    cfg = make_config(args.preset, args.embedding_size, ffn="geglu")
    flops = flops_per_example(cfg, args.inputs_length, args.targets_length)
    tokens = args.batch_size * (args.inputs_length + args.targets_length)
    print(
        f"preset {args.preset} geglu, E {cfg.embedding_size}, batch {args.batch_size} × "
        f"{args.inputs_length}/{args.targets_length}, {flops:.3g} FLOPs/example"
    )
    timer = Timer(dev)
    rows: list[tuple[str, float]] = []

    def row(label: str, sec: float) -> None:
        util = mfu(flops, args.batch_size / sec, peak) if peak else math.nan
        shown = "n/a" if math.isnan(util) else f"{100 * util:.1f} %"
        print(f"  {label:<44} {1000 * sec:>9.1f} ms {tokens / sec:>12,.0f} tok/s  MFU {shown}")
        rows.append((label, sec))

    torch.manual_seed(0)
    model = GLUTransformer(cfg).to(dev.device)
    fwd = torch.compile(model) if compile_ else model
    it = iter(range(10**9))

    def cycle(step):
        return lambda: step(data[next(it) % len(data)])

    print("step variants (same compiled model; mean of the timed steps after warm-up):")
    bare = make_step("c4forge", model, dev, compile_, "none", fwd=fwd, full_inputs=True)
    fwd_bwd = timer(cycle(bare), args.warmup, args.steps)
    row("c4forge forward + backward only", fwd_bwd)
    ours = make_step("c4forge", model, dev, compile_, "adafactor", fwd=fwd, full_inputs=True)
    headline = timer(cycle(ours), args.warmup, args.steps)
    row("c4forge + sync-free Adafactor (the trainer)", headline)
    ref = make_step("c4forge", model, dev, compile_, "torch-adafactor", fwd=fwd, full_inputs=True)
    row("c4forge + torch.optim.Adafactor (before)", timer(cycle(ref), 1, args.steps))
    masked = make_step("c4forge", model, dev, compile_, "adafactor", fwd=fwd, full_inputs=False)
    row("c4forge + sync-free, rows not declared full", timer(cycle(masked), 1, args.steps))
    print("optimizer step() alone (gradients of one backward in place):")
    bare(data[0])
    for p in model.parameters():
        p.grad = torch.full_like(p, 1e-3)
    for label, opt in (("sync-free Adafactor", ours.optimizer), ("torch Adafactor", ref.optimizer)):
        sec = timer(opt.step, 2, args.steps)
        print(f"  {label:<44} {1000 * sec:>9.2f} ms ({100 * sec / headline:.1f} % of the step)")
    model.zero_grad(set_to_none=True)
    if not args.no_hf:
        del masked, bare
        hf = build_hf_model(cfg).to(dev.device)
        hf_step = make_step("hf-t5", hf, dev, compile_, "torch-adafactor")
        hf_sec = timer(cycle(hf_step), args.warmup, args.steps)
        row("HF T5 + torch.optim.Adafactor", hf_sec)
        print(f"c4forge over HF: {hf_sec / headline:.2f}× tokens/s (goal ≥ 1.5×)")
        del hf_step, hf
    print("profile of the trainer's step (c4forge + sync-free Adafactor):")
    profile_kernels(ours, data, dev)
    util = mfu(flops, args.batch_size / headline, peak) if peak else None
    return {"t5_mfu": util, "t5_fwd_bwd_s": fwd_bwd}


@phase("flex: T5 forward + backward with FlexAttention (--attn flex)")
def flex_phase(args, dev, compile_, peak, sdpa_fwd_bwd: float | None) -> None:
    """The bias read in a score_mod, padding in a block mask: against the SDPA figure of phase 1
    (opt-in: one more compile of the model)."""
    args.targets_length = t5_lengths(args.inputs_length)
    data = batches(args, args.embedding_size, 4)
    cfg = make_config(args.preset, args.embedding_size, ffn="geglu", attn="flex")
    torch.manual_seed(0)
    model = GLUTransformer(cfg).to(dev.device)
    fwd = torch.compile(model) if compile_ else model
    step = make_step("c4forge", model, dev, compile_, "none", fwd=fwd, full_inputs=True)
    it = iter(range(10**9))
    sec = Timer(dev)(lambda: step(data[next(it) % len(data)]), args.warmup, args.steps)
    flops = flops_per_example(cfg, args.inputs_length, args.targets_length)
    util = mfu(flops, args.batch_size / sec, peak) if peak else math.nan
    print(f"flex forward + backward: {1000 * sec:.1f} ms ({100 * util:.1f} % MFU)")
    if sdpa_fwd_bwd:
        print(f"SDPA forward + backward (phase t5): {1000 * sdpa_fwd_bwd:.1f} ms")


@phase("bert: c4forge vs HF (bert-base, AdamW)")
def bert_phase(args, dev, compile_, peak) -> None:
    from train_encoder import main_bert

    bert_args = argparse.Namespace(**vars(args))
    bert_args.preset = args.bert_preset
    bert_args.batch_size = args.bert_batch_size
    bert_args.inputs_length = args.bert_length
    bert_args.predictions = max(1, round(0.15 * args.bert_length))
    bert_args.ffn = None
    bert_args.shards = None  # random full rows: the mask-free path, as a full real row takes
    main_bert(bert_args, dev, compile_, peak)


@phase("loader: the trainer's TrainStream alone")
def loader_phase(args) -> None:
    shards = open_shard_set(args.shards)
    obj = shards.index["objective"]
    n = args.loader_batches
    stream = TrainStream(shards, DataPlan(batch_size=args.cli_batch_size), 0, n)
    start = time.perf_counter()
    count = sum(1 for _ in stream)
    sec = (time.perf_counter() - start) / max(1, count)
    print(
        f"{count} batches of {args.cli_batch_size} × {obj['inputs_length']}/"
        f"{obj['targets_length']} from {args.shards}: {1000 * sec:.2f} ms per batch "
        f"(one process, first epoch's decode included)"
    )


@phase("cli: c4forge train on real shards")
def cli_phase(args, bench_mfu: float | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        argv = [
            sys.executable,
            "-m",
            "c4forge",
            "train",
            args.shards,
            "--preset",
            args.preset,
            "--steps",
            str(args.cli_steps),
            "--batch-size",
            str(args.cli_batch_size),
            "--output",
            run,
            "--log-every",
            str(args.cli_log_every),
            "--no-progress",
            "--eval-every",
            str(10 * args.cli_steps),
            "--save-every",
            str(10 * args.cli_steps),
            "--device",
            args.device,
            "--eval-rows",
            str(args.cli_batch_size),
        ]
        if args.smoke:
            argv.append("--no-compile")
        print("$ " + " ".join(argv), flush=True)
        start = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if done.returncode != 0:
            print(done.stdout[-3000:] + done.stderr[-3000:])
            raise RuntimeError(f"c4forge train exited with {done.returncode}")
        print("\n".join(done.stdout.strip().splitlines()[-4:]))
        records = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    logged = [r for r in records if "tokens_per_s" in r]
    steady = logged[1:] or logged  # the first window holds the compile
    tps = statistics.median(r["tokens_per_s"] for r in steady)
    step_s = statistics.median(r["step_time_s"] for r in steady)
    util = [r["mfu"] for r in steady if isinstance(r.get("mfu"), int | float)]
    shown = f"{100 * statistics.median(util):.1f} %" if util else "n/a"
    print(
        f"c4forge train {args.preset} × {args.cli_batch_size}: {tps:,.0f} tokens/s, "
        f"{1000 * step_s:.1f} ms/step, MFU {shown} (median of {len(steady)} logged windows "
        f"after the first; whole command {wall:.0f} s)"
    )
    if util and bench_mfu:
        print(f"CLI MFU / benchmark MFU: {statistics.median(util) / bench_mfu:.2f} (goal ≥ 0.90)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes, no compile: any device")
    ap.add_argument("--shards", help="t5 shards for the loader and CLI phases")
    ap.add_argument("--phases", default="t5,bert,loader,cli", help="and flex (opt-in)")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument(
        "--results",
        help="JSON file the figures are merged into (phases may run as "
        "separate processes: the cli phase reads the t5 phase's MFU from it)",
    )
    args = ap.parse_args()
    dev = resolve_device(args.device)
    big = dict(preset="base", batch_size=64, inputs_length=512, steps=10, warmup=3)
    big.update(bert_preset="bert-base", bert_batch_size=128, bert_length=128)
    big.update(cli_steps=60, cli_batch_size=64, cli_log_every=10, loader_batches=100)
    small = dict(preset="tiny", batch_size=2, inputs_length=64, steps=2, warmup=1)
    small.update(bert_preset="bert-tiny", bert_batch_size=2, bert_length=32)
    small.update(cli_steps=4, cli_batch_size=2, cli_log_every=2, loader_batches=5)
    for k, v in (small if args.smoke else big).items():
        setattr(args, k, v)
    args.embedding_size = 32128
    args.peak_tflops = None
    if args.smoke and dev.kind != "cuda":
        torch.set_num_threads(min(2, torch.get_num_threads()))
    compile_ = dev.kind == "cuda" and not args.smoke
    peak = dev.peak_flops
    if dev.kind != "cuda":
        print(
            f"NOTE: no CUDA device ({dev.kind}): this run checks the script, not the speed; "
            "the GPU figures come from a run on an H100/H200."
        )
    describe(dev, compile_)
    if dev.kind == "cuda":
        torch.set_float32_matmul_precision("high")
    phases = args.phases.split(",")
    results = {}
    if args.results and os.path.isfile(args.results):
        with open(args.results) as f:
            results = json.load(f)
    if "t5" in phases:
        results.update(t5_phase(args, dev, compile_, peak) or {})
        if args.results:
            with open(args.results, "w") as f:
                json.dump(results, f)
    bench_mfu = results.get("t5_mfu")
    if "flex" in phases:
        flex_phase(args, dev, compile_, peak, results.get("t5_fwd_bwd_s"))
    if dev.kind == "cuda":
        torch.cuda.empty_cache()
    if "bert" in phases:
        bert_phase(args, dev, compile_, peak)
    for name, fn in (("loader", loader_phase), ("cli", cli_phase)):
        if name not in phases:
            continue
        if not args.shards or not os.path.isfile(os.path.join(args.shards, "index.json")):
            print(f"\n=== {name}: skipped (no shards: benchmarks/gpu.sh --prepare builds them)")
            continue
        fn(args) if name == "loader" else fn(args, bench_mfu)
    with contextlib.suppress(Exception):
        if dev.kind == "cuda":
            peak_gib = torch.cuda.max_memory_allocated() / 2**30
            print(f"\npeak GPU memory allocated: {peak_gib:.1f} GiB")


if __name__ == "__main__":
    main()
