"""Small real inputs for the trainer tests: a SentencePiece vocabulary trained on the bundled C4
sample and span-corruption shards written with ``c4forge.formats.shards``.

Rows come from the project's own span corruption (``c4forge.objectives``, objectives.md §3) over
consecutive pieces of the tokenised sample; grouping, keys and shard assignment are simplified
(round robin), which the trainer does not depend on.
"""

from __future__ import annotations

import gzip
import json
import os

import numpy as np

from c4forge.formats import shards as fmt
from c4forge.io.storage import sha256, write_json
from c4forge.objectives.functions import span_corruption
from c4forge.objectives.lengths import span_corruption_lengths

SAMPLE = os.path.join(
    os.path.dirname(__file__), "..", "c4forge", "data", "sample", "c4-sample.00000-of-00001.json.gz"
)


# SentencePiece settings of a T5-style model (objectives.md §1): unigram, pad 0, EOS 1, UNK 2, no BOS.
T5_SPM_SETTINGS = {
    "model_type": "unigram",
    "pad_id": 0,
    "eos_id": 1,
    "unk_id": 2,
    "bos_id": -1,
    "num_threads": 1,
    "minloglevel": 2,
}
# The `vocabulary` block of index.json, key by key (formats.md §3.6): the tests' own copy of the
# spec, so that `Vocabulary.descriptor()` is checked against it rather than against itself.
VOCABULARY_KEYS = (
    "sha256",
    "num_pieces",
    "extra_ids",
    "vocab_size",
    "embedding_size",
    "pad_id",
    "eos_id",
    "unk_id",
    "bos_id",
)


def sample_texts(limit: int = 400) -> list[str]:
    with gzip.open(SAMPLE, "rt", encoding="utf-8") as f:
        return [json.loads(line)["text"] for _, line in zip(range(limit), f)]


def build_vocab(out: str, pieces: int = 1000, docs: int = 300) -> dict:
    """Train a real SentencePiece unigram model; write the c4forge vocab directory (formats.md §2)."""
    import sentencepiece as spm

    os.makedirs(out, exist_ok=True)
    text_path = os.path.join(out, "train.txt")
    with open(text_path, "w", encoding="utf-8") as f:
        for t in sample_texts(docs):
            f.write(t.replace("\n", " ") + "\n")
    spm.SentencePieceTrainer.train(
        input=text_path,
        model_prefix=os.path.join(out, "sentencepiece"),
        vocab_size=pieces,
        **T5_SPM_SETTINGS,
    )
    os.remove(text_path)
    vocab_size = pieces + 100
    desc = {
        "format": "c4forge.vocab",
        "format_version": 1,
        "sha256": sha256(os.path.join(out, "sentencepiece.model")),
        "num_pieces": pieces,
        "extra_ids": 100,
        "vocab_size": vocab_size,
        "embedding_size": -(-vocab_size // 128) * 128,
        "pad_id": 0,
        "eos_id": 1,
        "unk_id": 2,
        "bos_id": -1,
    }
    write_json(os.path.join(out, "vocab.json"), desc)
    return desc


def _rows(
    vocab_dir: str, desc: dict, texts: list[str], inputs_length: int, packing: str, seed: int
):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=os.path.join(vocab_dir, "sentencepiece.model"))
    stream = np.array([t for ids in sp.encode(texts) for t in ids], dtype=np.int64)
    rng = np.random.default_rng(seed)
    tokens_length, targets_length = span_corruption_lengths(inputs_length)
    if packing == "concat":
        piece_len = tokens_length
    else:  # two or three short examples per row
        piece_len = tokens_length // 3
    examples = [
        span_corruption(stream[i : i + piece_len], rng, vocab_size=desc["vocab_size"])
        for i in range(0, len(stream) - piece_len, piece_len)
    ]
    names = ["inputs", "targets"]
    if packing == "per_document":
        names += [
            "inputs_segment_ids",
            "inputs_positions",
            "targets_segment_ids",
            "targets_positions",
        ]
    rows: list[dict[str, np.ndarray]] = []
    cur: dict[str, np.ndarray] | None = None
    fill = [0, 0]
    for inp, tgt in examples:
        inp, tgt = inp[:inputs_length], tgt[:targets_length]
        if packing == "concat":
            row = {
                n: np.zeros(inputs_length if n.startswith("inputs") else targets_length, np.int64)
                for n in names
            }
            row["inputs"][: len(inp)] = inp
            row["targets"][: len(tgt)] = tgt
            rows.append(row)
            continue
        if cur is None or fill[0] + len(inp) > inputs_length or fill[1] + len(tgt) > targets_length:
            cur = {
                n: np.zeros(inputs_length if n.startswith("inputs") else targets_length, np.int64)
                for n in names
            }
            rows.append(cur)
            fill = [0, 0]
        seg = int(cur["inputs_segment_ids"].max()) + 1
        for side, seq, k in (("inputs", inp, 0), ("targets", tgt, 1)):
            sl = slice(fill[k], fill[k] + len(seq))
            cur[side][sl] = seq
            cur[f"{side}_segment_ids"][sl] = seg
            cur[f"{side}_positions"][sl] = np.arange(len(seq))
            fill[k] += len(seq)
    cols = {n: np.stack([r[n] for r in rows]) for n in names}
    return cols, tokens_length, targets_length


def build_shards(
    out: str,
    vocab_dir: str,
    desc: dict,
    *,
    inputs_length: int = 64,
    train_shards: int = 3,
    validation_shards: int = 1,
    packing: str = "concat",
    docs: int = 120,
    seed: int = 0,
) -> dict:
    """Span-corruption shards of the C4 sample (train: first docs, validation: the next 20)."""
    texts = sample_texts(docs + 20)
    train, tokens_length, targets_length = _rows(
        vocab_dir, desc, texts[:docs], inputs_length, packing, seed
    )
    valid, _, _ = _rows(vocab_dir, desc, texts[docs:], inputs_length, packing, seed + 1)
    spec = fmt.column_spec("span_corruption", packing, inputs_length, targets_length, "uint16")
    vocabulary = {k: desc[k] for k in VOCABULARY_KEYS}
    manifest = fmt.make_manifest(
        objective={
            "name": "span_corruption",
            "inputs_length": inputs_length,
            "targets_length": targets_length,
            "tokens_length": tokens_length,
            "packing": packing,
        },
        schema=spec,
        seed=seed,
        source={"documents": {"train": docs, "validation": 20}},
        token_dtype="uint16",
        vocabulary=vocabulary,
        batch_rows=16,
        compression=None,
        created_by="c4forge tests",
    )
    os.makedirs(out, exist_ok=True)
    splits = {}
    for split, cols, count in (
        ("train", train, train_shards),
        ("validation", valid, validation_shards),
    ):
        n = len(cols["inputs"])
        records = []
        for i in range(count):
            sel = np.arange(i, n, count)  # round-robin rows → shards of unequal-ish sizes
            meta = fmt.shard_metadata(
                manifest["dataset_fingerprint"], desc["sha256"], split, i, count
            )
            path = os.path.join(out, fmt.shard_file_name(split, i, count))
            records.append(
                fmt.write_shard(
                    path, spec, {k: v[sel] for k, v in cols.items()}, meta, batch_rows=16
                )
            )
        splits[split] = fmt.split_summary(count, records)
    manifest["splits"] = splits
    manifest["versions"] = fmt.library_versions()
    fmt.write_index(out, manifest)
    return manifest


def build_data(root, *, docs: int, packed_docs: int = 0, **shard_kw) -> dict:
    """A vocabulary (`root/vocab`), span-corruption shards of `docs` documents (`root/shards`)
    and, with `packed_docs`, per-document packed shards (`root/packed`); returns vocab.json."""
    vocab_dir = str(root / "vocab")
    desc = build_vocab(vocab_dir, docs=150)
    build_shards(str(root / "shards"), vocab_dir, desc, docs=docs, **shard_kw)
    if packed_docs:
        build_shards(
            str(root / "packed"), vocab_dir, desc, docs=packed_docs, packing="per_document"
        )
    return desc


def tiny_options(root, out, **kw):
    """`TrainOptions` of a tiny CPU run on `build_data`'s folders; `kw` sets the rest."""
    from c4forge.trainers.train import TrainOptions

    base = {
        "shards": str(root / "shards"),
        "output": str(out),
        "preset": "tiny",
        "batch_size": 4,
        "vocab": str(root / "vocab"),
        "log_every": 1,
        "eval_rows": 8,
        "progress": False,
    }
    return TrainOptions(**{**base, **kw})
