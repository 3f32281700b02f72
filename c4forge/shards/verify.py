"""`c4forge shards verify DIR [--vocab V]`: every §3.6 check of a finished shard set, full
checksums included, and the shard set's vocabulary copy (``SHARDS/vocab/``) when it has one."""

from __future__ import annotations

import os
from typing import Any

from c4forge.formats import shards as fmt
from c4forge.shards.report import summary_lines


def verify_command(
    directory: str, vocab: str | None, *, quiet: bool = False, extra_ids: int | None = None
) -> int:
    run_vocab: Any = vocab
    if vocab is not None and os.path.isfile(vocab) and vocab.endswith(".model"):
        from c4forge.shards.build import load_vocabulary

        run_vocab = load_vocabulary(vocab, extra_ids).descriptor()
    shards = fmt.ShardSet.open(directory, vocab=run_vocab)
    result = shards.verify(checksums=True, progress=not quiet)
    if not quiet:
        copy = ", the vocabulary copy" if shards.vocab_dir else ""
        print(
            f"c4forge shards verify: {directory} OK: {result['files']} files, {result['rows']:,} rows, "
            f"schemas, metadata, row counts{copy} and every sha256 checked"
            + ("" if vocab else " (no --vocab given: vocabulary not compared)")
        )
        for line in summary_lines(shards.index, directory, None, ""):
            print(line)
    return 0
