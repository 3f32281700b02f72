"""`c4forge shards` tokens per CPU-second against SentencePiece's own encode rate, same text.

For each round and each checkout given (``--code``, default this one), in turn: the shards
command in a subprocess (span corruption 512/114 unless options follow ``--``), its whole
process tree's CPU seconds (``scale.measure``), then the floor — SentencePiece's encode rate,
one thread, on every document of the clean output (``scale.encode_floor``) — so each ratio
compares two figures taken back to back under the same load. Rounds alternate the checkouts.
Prints one JSON line per run, and the load average beside it.

Usage: ``python benchmarks/shards_floor.py CLEAN VOCAB [--code DIR …] [--rounds 2]
[-- --engine local --workers 1]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scale  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def one_run(clean: Path, vocab: Path, code: Path, options: list[str], tmp: Path) -> dict:
    out = Path(tempfile.mkdtemp(prefix="shards-floor-", dir=tmp)) / "shards"
    cmd = [sys.executable, "-m", "c4forge", "shards", str(clean), "--vocab", str(vocab)]
    m = scale.measure([*cmd, "-o", str(out), *options], dict(os.environ, PYTHONPATH=str(code)))
    if m["returncode"] != 0:
        raise SystemExit(f"shards failed ({code}): {m['stderr'][-3000:]}")
    stats = json.loads((out / "index.json").read_text())["stats"]
    shutil.rmtree(out.parent, ignore_errors=True)
    tokens = sum(int(s["tokens"]) for s in stats.values())
    floor = scale.encode_floor(clean, vocab)
    rate = tokens / m["cpu"]
    return {
        "code": str(code),
        "options": options,
        "documents": sum(int(s["documents"]) for s in stats.values()),
        "tokens": tokens,
        "cpu_s": round(m["cpu"], 2),
        "tokens_per_cpu_s": round(rate),
        "floor_cpu_s": floor["cpu_s"],
        "floor_tokens_per_cpu_s": floor["tokens_per_cpu_s"],
        "floor_fraction": round(rate / floor["tokens_per_cpu_s"], 3),
        "load_1min": [round(m["load"], 2), floor["load_1min"]],
    }


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("clean", type=Path)
    ap.add_argument("vocab", type=Path)
    ap.add_argument("--code", type=Path, nargs="+", default=[ROOT])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tmp", type=Path, default=Path(tempfile.gettempdir()))
    args = ap.parse_args(argv)
    for _ in range(args.rounds):
        for code in args.code:
            row = one_run(
                args.clean.resolve(), args.vocab.resolve(), code.resolve(), options, args.tmp
            )
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
