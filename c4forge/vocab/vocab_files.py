"""A vocabulary folder on disk or in a bucket: its files, its descriptor, and its copies.

Why one module: a `c4forge vocab` folder is copied three times (a shard set's ``SHARDS/vocab/``,
a run's ``RUN/vocab/``, a fine-tuning's ``FT/vocab/``), so that each stays usable when moved
without the folder it was made from. One file list, one copy function (through
``c4forge.io.storage``: local paths and buckets alike), one descriptor reader with one error for
"not a vocabulary here" (``InputError``; a descriptor of another format is the usual
``VerificationError`` of ``check_format``).

The shard set's copy is also listed in its index.json (``vocab_files``: each file's size and
sha256, formats.md §3.3); ``c4forge.formats.shards`` keeps that block (``write_vocab_copy``,
``check_vocab_copy``), above this module: the vocabulary knows no shard set.
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

from c4forge.errors import InputError, VerificationError
from c4forge.io import storage

VOCAB_FORMAT = "c4forge.vocab"
MODEL_FILE = "sentencepiece.model"
EXTRA_IDS_MODEL_FILE = "sentencepiece.extra_ids.model"
DESCRIPTOR_FILE = "vocab.json"
VOCAB_FILES: tuple[str, ...] = (MODEL_FILE, EXTRA_IDS_MODEL_FILE, DESCRIPTOR_FILE)
COPY_DIR = "vocab"  # SHARDS/vocab, RUN/vocab, FT/vocab

Files = tuple[tuple[str, bytes], ...]


# ----------------------------------------------------------------------------- reading


def is_vocab_dir(directory: str | None) -> bool:
    """Does ``directory`` hold a vocabulary descriptor? (Only a missing file answers no: any
    other failure to look, e.g. a bucket that refuses the request, propagates.)"""
    return bool(directory) and storage.exists(storage.join(directory, DESCRIPTOR_FILE))


def copy_dir(parent: str) -> str | None:
    """``PARENT/vocab`` when it holds a vocabulary (a shard set's or a run's copy), else None."""
    cand = storage.join(parent, COPY_DIR)
    return cand if is_vocab_dir(cand) else None


def read_descriptor(vocab: str) -> dict[str, Any]:
    """``vocab.json`` of a vocabulary folder (or the path of a vocab.json itself), format
    checked. ``InputError`` when there is none."""
    from c4forge.io.storage import check_format

    path = (
        vocab
        if os.path.basename(vocab) == DESCRIPTOR_FILE
        else storage.join(vocab, DESCRIPTOR_FILE)
    )
    desc = storage.read_json_if_exists(path)
    if desc is None:
        raise InputError(f"{vocab}: not a c4forge vocabulary (no {DESCRIPTOR_FILE})")
    check_format(desc, path, VOCAB_FORMAT)
    return desc


def fingerprint(vocab_dir: str) -> str:
    """sha256 of the plain SentencePiece model (what vocab.json and every index.json record)."""
    return storage.sha256(storage.join(vocab_dir, MODEL_FILE))


def read_files(folder: str) -> Files:
    """``(name, bytes)`` of the folder's vocabulary files that exist, in ``VOCAB_FILES`` order
    (read now, e.g. before an --overwrite could remove the source)."""
    out = []
    for name in VOCAB_FILES:
        path = storage.join(folder, name)
        if storage.exists(path):
            out.append((name, storage.read_bytes(path)))
    return tuple(out)


def check_vocab_dir(vocab_dir: str, sha256: str) -> None:
    """Both the recorded and the actual fingerprint of ``vocab_dir`` must be ``sha256``."""
    recorded = read_descriptor(vocab_dir).get("sha256")
    actual = fingerprint(vocab_dir)
    if recorded != sha256 or actual != sha256:
        raise VerificationError(
            f"{vocab_dir}: vocabulary fingerprint {actual} (vocab.json says {recorded}); "
            f"this run's shards were made with {sha256}"
        )


# ----------------------------------------------------------------------------- copying


def write_files(folder: str, files: Files) -> None:
    """Write ``files`` into ``folder`` (each atomically; an intact one is left alone), the
    descriptor last: a folder with a vocab.json is a complete copy."""
    storage.makedirs(folder)
    ordered = sorted(files, key=lambda f: (f[0] == DESCRIPTOR_FILE, f[0]))
    for name, data in ordered:
        path = storage.join(folder, name)
        if storage.exists(path) and storage.read_bytes(path) == data:
            continue
        storage.write_bytes(path, data)


def copy_vocab(source: str, target: str) -> str:
    """Copy the vocabulary folder ``source`` to ``target`` (local or remote); returns
    ``target``."""
    files = read_files(source)
    if not any(name == MODEL_FILE for name, _ in files):
        raise InputError(f"{source}: no {MODEL_FILE} to copy")
    write_files(target, files)
    return target


def copy_run_vocab(source: str | None, run_dir: str, sha256: str) -> str | None:
    """Copy ``source`` to ``RUN/vocab`` (checked before and after); keep an existing copy after
    checking it. Returns the copy's path, or None when there is nothing to copy from (the run
    then records only the vocabulary's fingerprint; export asks for --vocab)."""
    target = storage.join(run_dir, COPY_DIR)
    if is_vocab_dir(target):
        check_vocab_dir(target, sha256)
        return target
    if not source or not storage.exists(storage.join(source, MODEL_FILE)):
        return None
    check_vocab_dir(source, sha256)
    copy_vocab(source, target)
    check_vocab_dir(target, sha256)
    return target


def plain_model_files(vocab: Any, source: str) -> Files:
    """The files of the folder `c4forge vocab` would have made of a plain SentencePiece model
    ``source`` (given with --extra-ids), from its loaded ``Vocabulary``."""
    from c4forge import __version__

    descriptor = {
        **vocab.descriptor(),
        "format": VOCAB_FORMAT,
        "format_version": 1,
        "created_by": f"c4forge {__version__}",
        "extra_ids_model_sha256": hashlib.sha256(vocab.extra_ids_model_proto()).hexdigest(),
        "source": {"plain_model": os.path.basename(source)},
    }
    return (
        (MODEL_FILE, vocab.__getstate__()["proto"]),
        (EXTRA_IDS_MODEL_FILE, vocab.extra_ids_model_proto()),
        (DESCRIPTOR_FILE, storage.dumps_pretty(descriptor).encode("utf-8")),
    )


def source_files(vocab: Any, source: str) -> Files:
    """What a copy of the vocabulary given as ``source`` (a folder, its vocab.json, or a plain
    ``.model``) holds."""
    if os.path.basename(source) == DESCRIPTOR_FILE:
        return read_files(os.path.dirname(source) or ".")
    if (not storage.is_remote(source) and os.path.isdir(source)) or is_vocab_dir(source):
        return read_files(source)
    return plain_model_files(vocab, source)
