"""The shard set's own copy of its vocabulary: ``SHARDS/vocab/`` beside index.json.

Why: a shard set (and a run trained on it) must stay usable when moved to another machine
without the vocabulary folder it was built with (export, fine-tuning, evaluation). The model
files are small, so the build copies them and records each file's size and sha256 under
index.json's ``vocab_files`` key (formats.md §3.3); ``sentencepiece.model`` must also have the
fingerprint of index.json's ``vocabulary.sha256``. The copy is a `c4forge vocab` folder
(``Vocabulary.load(SHARDS/vocab)`` opens it): a vocab folder is copied file for file; a plain
``.model`` given with ``--extra-ids`` gets the two model files and a ``vocab.json`` made from
the loaded vocabulary.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from typing import Any

from c4forge import __version__
from c4forge.errors import VerificationError
from c4forge.formats.shards import VOCAB_DIR, VOCAB_INDEX_KEY, check_vocab_copy
from c4forge.io import storage

INDEX_KEY = VOCAB_INDEX_KEY

MODEL_FILE = "sentencepiece.model"
EXTRA_IDS_MODEL_FILE = "sentencepiece.extra_ids.model"
DESCRIPTOR_FILE = "vocab.json"
COPIED = (MODEL_FILE, EXTRA_IDS_MODEL_FILE, DESCRIPTOR_FILE)  # what a vocab folder holds


def vocab_files(vocab: Any, source: str) -> tuple[tuple[str, bytes], ...]:
    """(name, bytes) of the copy, read now (before an --overwrite could remove the source)."""
    if os.path.isdir(source) or os.path.basename(source) == DESCRIPTOR_FILE:
        folder = source if os.path.isdir(source) else os.path.dirname(source) or "."
        files = []
        for name in COPIED:
            path = os.path.join(folder, name)
            if os.path.isfile(path):
                with open(path, "rb") as f:
                    files.append((name, f.read()))
        return tuple(files)
    # A plain SentencePiece model: make the folder `c4forge vocab` would have made of it.
    from c4forge.io.storage import dumps_pretty

    descriptor = {
        **vocab.descriptor(),
        "format": "c4forge.vocab",
        "format_version": 1,
        "created_by": f"c4forge {__version__}",
        "extra_ids_model_sha256": hashlib.sha256(vocab.extra_ids_model_proto()).hexdigest(),
        "source": {"plain_model": os.path.basename(source)},
    }
    return (
        (MODEL_FILE, vocab.__getstate__()["proto"]),
        (EXTRA_IDS_MODEL_FILE, vocab.extra_ids_model_proto()),
        (DESCRIPTOR_FILE, dumps_pretty(descriptor).encode("utf-8")),
    )


def _record(name: str, data: bytes) -> dict[str, Any]:
    return {"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def write_vocab_copy(
    output: str, files: tuple[tuple[str, bytes], ...], vocabulary: Mapping[str, Any]
) -> dict[str, Any]:
    """Write the copy (an intact file is left alone) and check it; returns index.json's
    ``vocab_files`` block."""
    directory = storage.join(output, VOCAB_DIR)
    storage.makedirs(directory)
    block = expected_block(files)
    for (name, data), rec in zip(sorted(files), block["files"]):
        path = storage.join(directory, name)
        if not (storage.exists(path) and _intact(path, rec)):
            storage.write_bytes(path, data)
    check_vocab_copy(output, block, vocabulary, checksums=True)
    return block


def expected_block(files: tuple[tuple[str, bytes], ...]) -> dict[str, Any]:
    """The ``vocab_files`` block a copy of ``files`` has."""
    return {"directory": VOCAB_DIR, "files": [_record(n, d) for n, d in sorted(files)]}


def copy_is_current(
    output: str, index: Mapping[str, Any], files: tuple[tuple[str, bytes], ...]
) -> bool:
    """Does the finished set at ``output`` hold an intact copy of exactly ``files``?"""
    block = index.get(VOCAB_INDEX_KEY)
    if block != expected_block(files):
        return False
    try:
        check_vocab_copy(output, block, index["vocabulary"], checksums=True)
    except VerificationError:
        return False
    return True


def _intact(path: str, rec: Mapping[str, Any]) -> bool:
    return storage.size(path) == rec["bytes"] and storage.sha256(path) == rec["sha256"]
