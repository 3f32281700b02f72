"""What verifying shards as they are read costs ``c4forge train`` (model.md §7.1).

Two figures, each alternated between ``--verify-shards quick`` (sizes only, the old default)
and ``read`` (sha256 of each shard's bytes on its first read in a process, the new default):

1. decode: CPU seconds (``time.process_time``) for the trainer's reader to decode every train
   shard once (``ShardReader.shard``: Arrow stream → numpy, id-range check), the path the hash
   rides on;
2. train: a tiny CPU ``train`` run (``--preset tiny``), its tokens/s and the process's CPU time.

The shards are span-corruption rows of the bundled C4 sample with a real SentencePiece vocabulary
(``tests/train_fixtures``), unless ``--shards DIR`` is given. On a shared machine the CPU
figures are the steadier ones; rounds alternate so that load drifts hit both modes alike.

Usage: ``python benchmarks/verify_reads.py --docs 400 --steps 30 --rounds 3``
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def decode_seconds(shards_dir: str, mode: str) -> tuple[float, int]:
    """CPU seconds to decode every train shard once in ``mode``, and the bytes decoded."""
    from c4forge.trainers.data import ShardReader, open_shard_set

    shards = open_shard_set(shards_dir, verify=mode)
    files = shards.split_shards("train")
    reader = ShardReader(shards, [p for p, _ in files], [r for _, r in files], cache=1)
    start = time.process_time()
    for i in range(len(files)):
        reader.shard(i)
    return time.process_time() - start, sum(os.path.getsize(p) for p, _ in files)


def train_figures(root: Path, out: Path, mode: str, steps: int, batch: int) -> tuple[float, float]:
    """(tokens/s, CPU seconds) of a tiny train run in ``mode``."""
    import train_fixtures as fx

    from c4forge.trainers.train import train

    opts = fx.tiny_options(
        root, out, steps=steps, batch_size=batch, verify_shards=mode, log_every=steps
    )
    start = time.process_time()
    summary = train(opts)
    return summary.tokens_per_s, time.process_time() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--docs", type=int, default=400, help="C4 sample documents in the shards")
    ap.add_argument("--inputs-length", type=int, default=128)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import torch
    import train_fixtures as fx

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        fx.build_data(root, docs=args.docs, inputs_length=args.inputs_length)
        shards = str(root / "shards")
        figures: dict[str, dict[str, list[float]]] = {
            m: {"decode": [], "tps": [], "cpu": []} for m in ("quick", "read")
        }
        size = 0
        for r in range(args.rounds):
            for mode in ("quick", "read") if r % 2 == 0 else ("read", "quick"):
                seconds, size = decode_seconds(shards, mode)
                tps, cpu = train_figures(
                    root, root / f"run-{mode}-{r}", mode, args.steps, args.batch_size
                )
                figures[mode]["decode"].append(seconds)
                figures[mode]["tps"].append(tps)
                figures[mode]["cpu"].append(cpu)
        print(
            f"train shards: {size / 1e6:.2f} MB; {args.steps} steps × {args.batch_size} rows, "
            f"inputs {args.inputs_length}; {args.rounds} rounds (median)"
        )
        for mode, f in figures.items():
            med = {k: sorted(v)[len(v) // 2] for k, v in f.items()}
            print(
                f"  {mode:5s}  decode {1000 * med['decode']:7.1f} CPU-ms "
                f"({size / 1e6 / max(med['decode'], 1e-9):6.0f} MB/CPU-s)   "
                f"train {med['tps']:8,.0f} tokens/s, {med['cpu']:6.2f} CPU-s"
            )


if __name__ == "__main__":
    main()
