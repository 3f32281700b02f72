"""Training throughput of the GLU-Transformer against HF ``T5ForConditionalGeneration`` of the
same config, side by side in one process (model.md §4).

Each model runs full training steps (forward, fp32 token-weighted loss, backward, Adafactor) on
the same batches: bf16 autocast + ``torch.compile`` on CUDA, fp32 eager on the CPU. Batches come
from ``--shards DIR`` (real rows, so the non-pad figure is meaningful) or are random full-length
rows. Printed per model: tokens/s (row shape, padding included), non-pad tokens/s, step time,
model TFLOP/s from the spec's encoder-decoder formula, and MFU where the device peak is known
(``--peak-tflops`` to set one, e.g. for a CPU), and CPU ms per step with tokens per CPU-second
(``time.process_time``, all threads), the steadier figure on a shared CPU.

The encoder side (``--preset bert-tiny … bert-base``, benchmarks/train_encoder.py): c4forge's
BERT against HF ``BertForPreTraining`` with the same weights on the same batches.

Usage: ``python benchmarks/train.py --preset small --batch-size 8 --inputs-length 512 --steps 3``
or ``python benchmarks/train.py --preset bert-base --batch-size 8 --steps 3``
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import sys
import time
from pathlib import Path

import numpy as np
import torch

from c4forge.trainers.config import make_config
from c4forge.trainers.data import DataPlan, TrainStream, decoder_input_tokens, open_shard_set
from c4forge.trainers.device import resolve_device
from c4forge.trainers.flops import flops_per_example, mfu
from c4forge.trainers.loss import weighted_cross_entropy
from c4forge.trainers.models.t5 import GLUTransformer
from c4forge.trainers.optim import build_optimizer

# The HF reference models are test helpers (tests/hf_reference.py), not part of the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from hf_reference import build_hf_model  # noqa: E402
from optim_references import torch_adafactor  # noqa: E402


def t5_lengths(inputs_length: int) -> int:
    """targets_length for span corruption at d = 0.15, m = 3 (objectives.md §3.3)."""
    t = inputs_length - 1
    while True:
        n = round((t + 1) * 0.15)
        if (t + 1) - n + round(n / 3.0) + 1 > inputs_length:
            break
        t += 1
    n = round(t * 0.15)
    return n + round(n / 3.0) + 1


def batches(args, embedding_size: int, n: int) -> list[dict[str, torch.Tensor]]:
    if args.shards:
        shards = open_shard_set(args.shards)
        obj = shards.index["objective"]
        args.inputs_length, args.targets_length = obj["inputs_length"], obj["targets_length"]
        stream = TrainStream(shards, DataPlan(batch_size=args.batch_size), 0, n)
        out = []
        for item in stream:
            out.append({k: item[k].to(torch.int64) for k in ("inputs", "targets")})
        return out
    rng = np.random.default_rng(0)
    high = min(embedding_size, 32000)
    return [
        {
            "inputs": torch.from_numpy(
                rng.integers(3, high, (args.batch_size, args.inputs_length))
            ),
            "targets": torch.from_numpy(
                rng.integers(3, high, (args.batch_size, args.targets_length))
            ),
        }
        for _ in range(n)
    ]


def make_optimizer(kind: str, model) -> torch.optim.Optimizer | None:
    """``adafactor``: c4forge's (sync-free); ``torch-adafactor``: torch.optim.Adafactor, the
    reference; ``none``: forward + backward only (the step without its optimizer)."""
    if kind == "none":
        return None
    if kind == "torch-adafactor":
        return torch_adafactor(model.parameters())
    return build_optimizer(kind, model.parameters())


def make_step(name, model, dev, compile_, optimizer="adafactor", fwd=None, full_inputs=False):
    """One training step of ``model`` on a batch, as a closure. ``fwd``: an already compiled
    model to share (variants of one model then compile once); ``full_inputs``: the rows have no
    padding (c4forge's model then attends without a padding mask, as the trainer does)."""
    model.train()
    opt = make_optimizer(optimizer, model)
    if fwd is None:
        fwd = torch.compile(model) if compile_ else model
    autocast = (
        torch.autocast(dev.kind, dtype=torch.bfloat16)
        if dev.kind == "cuda"
        else contextlib.nullcontext()
    )

    def step(batch):
        inputs = batch["inputs"].to(dev.device, non_blocking=True)
        targets = batch["targets"].to(dev.device, non_blocking=True)
        dec = decoder_input_tokens(targets)
        with autocast:
            if name == "hf-t5":
                logits = fwd(
                    input_ids=inputs, attention_mask=inputs != 0, decoder_input_ids=dec
                ).logits
            else:
                logits = fwd(inputs, dec, full_inputs=full_inputs)
        loss_sum, weight = weighted_cross_entropy(logits.float(), targets)
        (loss_sum / weight.clamp_min(1)).backward()
        if opt is None:
            model.zero_grad(set_to_none=True)
        else:
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss_sum

    step.optimizer = opt

    return step


def interleaved(steps_by_model: dict, data, dev, steps: int, warmup: int) -> dict:
    """Wall and CPU seconds per step of each model, after ``warmup`` untimed steps each.

    The models take turns step by step, so on a shared machine every model sees the same load
    (timing one model after the other made the later one look faster or slower by the load
    of the moment). CPU seconds are this process's (all threads): on a shared CPU box, tokens
    per CPU-second is steadier than wall time, which counts the time other processes hold
    the cores.
    """

    def sync() -> None:
        if dev.kind == "cuda":
            torch.cuda.synchronize()

    for i in range(warmup):
        for step in steps_by_model.values():
            step(data[i % len(data)])
    sync()
    wall = dict.fromkeys(steps_by_model, 0.0)
    cpu = dict.fromkeys(steps_by_model, 0.0)
    for i in range(steps):
        for name, step in steps_by_model.items():
            t0, c0 = time.perf_counter(), time.process_time()
            step(data[(warmup + i) % len(data)])
            sync()
            wall[name] += time.perf_counter() - t0
            cpu[name] += time.process_time() - c0
    return {name: (wall[name] / steps, cpu[name] / steps) for name in steps_by_model}


def describe(dev, compile_) -> None:
    precision = "bf16 autocast" if dev.kind == "cuda" else "fp32"
    print(
        f"device {dev.name} ({dev.kind}), {precision}, compile {'on' if compile_ else 'off'}, "
        f"torch {torch.__version__}, threads {torch.get_num_threads()}"
    )


def report(models, make, data, dev, compile_, args, flops, tokens, nonpad, peak) -> None:
    """Time the models' steps (``make`` builds each), interleaved; one row per model."""
    header = (
        f"{'model':<9} {'step ms':>9} {'tokens/s':>11} {'non-pad/s':>11} {'TFLOP/s':>8} {'MFU':>7}"
        f" {'CPU ms':>9} {'tokens/CPU-s':>13}"
    )
    print(header)
    steps = {name: make(name, model, dev, compile_) for name, model in models}
    timings = interleaved(steps, data, dev, args.steps, args.warmup)
    results = {}
    for name, (sec, cpu) in timings.items():
        results[name] = sec
        tflops = flops * args.batch_size / sec / 1e12
        util = mfu(flops, args.batch_size / sec, peak) if peak else math.nan
        print(
            f"{name:<9} {1000 * sec:>9.1f} {tokens / sec:>11,.0f} {nonpad / sec:>11,.0f} "
            f"{tflops:>8.3f} {'n/a' if math.isnan(util) else f'{100 * util:.1f}%':>7}"
            f" {1000 * cpu:>9.1f} {tokens / cpu:>13,.0f}"
        )
    reference = [n for n in results if n.startswith("hf-")]
    if reference:
        name = {"hf-t5": "HF T5", "hf-bert": "HF BERT"}[reference[0]]
        print(f"speed-up over {name}: {results[reference[0]] / results['c4forge']:.2f}×")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--ffn", default=None, help="default geglu (t5), gelu (bert)")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--inputs-length", type=int, default=None, help="default 512 (t5), 128 (bert)")
    ap.add_argument("--predictions", type=int, default=20, help="bert: masked positions per row")
    ap.add_argument("--targets-length", type=int, default=None)
    ap.add_argument("--embedding-size", type=int, default=32128)
    ap.add_argument("--shards", help="real rows from a shard directory (sets the lengths)")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--device", default="auto")
    ap.add_argument("--no-compile", action="store_true")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--peak-tflops", type=float, help="device peak for MFU when not known")
    args = ap.parse_args()
    dev = resolve_device(args.device)
    compile_ = dev.kind == "cuda" and not args.no_compile
    peak = args.peak_tflops * 1e12 if args.peak_tflops else dev.peak_flops
    if args.preset.startswith("bert-"):
        from train_encoder import main_bert  # benchmarks/ is the script's directory

        args.inputs_length = args.inputs_length or 128
        main_bert(args, dev, compile_, peak)
        return
    args.inputs_length = args.inputs_length or 512
    if args.targets_length is None:
        args.targets_length = t5_lengths(args.inputs_length)
    data = batches(args, args.embedding_size, args.steps + args.warmup)
    cfg = make_config(args.preset, args.embedding_size, ffn=args.ffn or "geglu")
    flops = flops_per_example(cfg, args.inputs_length, args.targets_length)
    tokens = args.batch_size * (args.inputs_length + args.targets_length)
    nonpad = sum(int((b["inputs"] != 0).sum() + (b["targets"] != 0).sum()) for b in data) / len(
        data
    )
    describe(dev, compile_)
    print(
        f"preset {args.preset} ffn {cfg.ffn} d_ff {cfg.d_ff}, E {cfg.embedding_size}, batch "
        f"{args.batch_size} × {args.inputs_length}/{args.targets_length}, {flops:.3g} FLOPs/example, "
        f"{'real shard rows' if args.shards else 'random full rows'}"
    )
    torch.manual_seed(0)
    models = [("c4forge", GLUTransformer(cfg).to(dev.device))]
    if not args.no_hf:
        models.append(("hf-t5", build_hf_model(cfg).to(dev.device)))
    full = all(bool((b["inputs"] != 0).all()) for b in data)  # as the trainer's host check
    make = functools.partial(make_step, full_inputs=full)
    report(models, make, data, dev, compile_, args, flops, tokens, nonpad, peak)


if __name__ == "__main__":
    main()
