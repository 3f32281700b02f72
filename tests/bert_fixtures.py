"""Real BERT pretraining rows for the trainer tests: the bundled C4 sample laid out as the C4
release, a real SentencePiece vocabulary (`c4forge vocab`'s code path) and `c4forge shards
--objective bert_mlm_nsp` run for real (Beam, one worker)."""

from __future__ import annotations

from pathlib import Path

from shards_fixtures import shards_argv, train_vocab, write_c4_release

SEQ = 64  # max_seq_length of the test rows
PREDICTIONS = 10  # max_predictions_per_seq


def build_bert_data(root: Path, *, per_train_file: int = 60, total: int = 150) -> dict:
    """``root/docs`` (C4 layout), ``root/vocab`` and ``root/bert`` (bert_mlm_nsp shards: two
    train shards, one validation shard); returns the paths."""
    from c4forge.cli import main

    docs = write_c4_release(root / "docs", per_train_file, total)
    vocab = str(root / "vocab")
    train_vocab(vocab, docs, vocab_size=800, sample_chars=400_000)
    out = str(root / "bert")
    options = {
        "objective": "bert_mlm_nsp",
        "inputs_length": SEQ,
        "max_predictions_per_seq": PREDICTIONS,
        "num_shards": "train=2,validation=1",
        "workers": 1,
    }
    assert main(shards_argv(docs, vocab, out, "--quiet", **options)) == 0
    return {"docs": docs, "vocab": vocab, "shards": out}
