"""SentencePiece's encode rate in one process alone, then in two processes at once on the same
text: whether this machine's two cores give two cores' worth of encoding (the ceiling for a
two-worker `c4forge shards`). Prints tokens per CPU-second and per wall second per process.

Usage: ``python benchmarks/encode_pair.py CLEAN_OUTPUT VOCAB [--docs 40000]``
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import time
from typing import Any

from c4forge.corpus import clean_docs
from c4forge.vocab.vocab import Vocabulary

TEXTS: list[str] = []


def encode(vocab: str, q: Any) -> None:
    v = Vocabulary.load(vocab)
    c0, w0, n = time.process_time(), time.time(), 0
    for i in range(0, len(TEXTS), 256):
        n += sum(len(x) for x in v.encode_arrays(TEXTS[i : i + 256], num_threads=1))
    q.put((n, time.process_time() - c0, time.time() - w0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("clean")
    ap.add_argument("vocab")
    ap.add_argument("--docs", type=int, default=40_000)
    args = ap.parse_args()
    path = clean_docs.list_clean_shards(args.clean, "train")[0]
    for i, d in enumerate(clean_docs.iter_documents(path)):
        if i >= args.docs:
            break
        TEXTS.append(d["text"])
    ctx = mp.get_context("fork")  # the children see TEXTS without a copy through a pipe
    for k in (1, 2, 1, 2):
        q = ctx.Queue()
        procs = [ctx.Process(target=encode, args=(args.vocab, q)) for _ in range(k)]
        for p in procs:
            p.start()
        res = [q.get() for _ in procs]
        for p in procs:
            p.join()
        rates = [
            f"{n / c / 1e6:.2f} M tok/CPU-s, {n / w / 1e6:.2f} M tok/wall-s" for n, c, w in res
        ]
        print(f"{k} process(es): {rates}", flush=True)


if __name__ == "__main__":
    main()
