"""The demo's last stage: a downstream number. The freshly pretrained ``tiny`` model and a random
model of the same shape are fine-tuned alike on the bundled SST-2 subset (``c4forge/data/glue``:
the first 4,000 training rows and the full 872-row dev set, byte-exact GLUE files) and their dev
accuracies are printed side by side.

The budget keeps the demo near its two minutes: the ``cls`` head on the T5 encoder (no decoding;
the text head needs more steps than this to leave the majority class), 120 steps of 32 rows,
inputs cut at 64 tokens, learning rate 1e-3.
"""

from __future__ import annotations

import os

BUNDLED_GLUE = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", "glue")
MAJORITY = 444 / 872  # SST-2 dev: 444 positive of 872
STEPS = 120


def demo_transfer(run_dir: str, work: str, overwrite: bool = False) -> dict[str, float]:
    """Fine-tune pretrained and random-init on SST-2; print and return their dev accuracies."""
    import torch

    # One thread: the tiny model's matrices are too small to gain from more, and on a busy
    # machine a second spinning thread multiplied the CPU time (measured 5× on the shared host).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        accuracy = _both_inits(run_dir, work, overwrite)
    finally:
        torch.set_num_threads(threads)
    print(
        f"\nSST-2 dev accuracy after {STEPS} fine-tuning steps: pretrained "
        f"{100 * accuracy['pretrained']:.1f} % vs random init {100 * accuracy['random']:.1f} % "
        f"(majority class {100 * MAJORITY:.1f} %)",
        flush=True,
    )
    return accuracy


def _both_inits(run_dir: str, work: str, overwrite: bool) -> dict[str, float]:
    from c4forge.finetune.loop import FinetuneOptions, finetune
    from c4forge.io.storage import read_json

    accuracy = {}
    for init in ("pretrained", "random"):
        out = os.path.join(work, f"finetune-sst2-{init}")
        done = os.path.join(out, "results.json")
        if overwrite or not os.path.isfile(done):
            print(f"\n=== fine-tune ({init} init): SST-2, {STEPS} steps", flush=True)
            finetune(
                FinetuneOptions(
                    checkpoint=run_dir, task="sst2", data=BUNDLED_GLUE, output=out, head="cls",
                    steps=STEPS, lr=1e-3, batch_size=32, max_length=64, device="cpu",
                    random_init=init == "random", overwrite=True,
                )
            )  # fmt: skip
        accuracy[init] = read_json(done)["metrics"]["dev"]["accuracy"]
    return accuracy
