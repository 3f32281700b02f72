"""Test helper (not a test): ``python killed_train.py STEP c4forge-train-args…`` runs
``c4forge train`` in this process and SIGKILLs it right after step STEP (its log, eval and
checkpoint done), through the trainer's step hooks: a hard crash, with no test switch in the
production code."""

from __future__ import annotations

import os
import signal
import sys

from c4forge.cli import build_parser
from c4forge.trainers.train import TrainOptions, train


def main() -> None:
    crash_step = int(sys.argv[1])
    args = build_parser().parse_args(["train", *sys.argv[2:]])
    opts = TrainOptions.from_args(args)

    def kill(step: int) -> None:
        if step == crash_step:
            os.kill(os.getpid(), signal.SIGKILL)

    train(opts, hooks=[kill])
    raise SystemExit(f"killed_train: the run ended before step {crash_step}")


if __name__ == "__main__":
    main()
