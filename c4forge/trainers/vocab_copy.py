"""A run keeps a copy of its vocabulary (``RUN/vocab/``), so a run folder moved to another
machine still exports, fine-tunes and evaluates (issue 11 §3).

The copy is taken from ``--vocab``, else from the vocabulary a shard set carries next to its
``index.json`` (``SHARDS/vocab/``), else from the folder the checkpoint recorded. It is checked
against the shards' fingerprint (the sha256 of ``sentencepiece.model``) before and after copying,
and written under a temporary name, then renamed.
"""

from __future__ import annotations

import os
import shutil

from c4forge.errors import VerificationError
from c4forge.io.storage import read_json, sha256_file

RUN_VOCAB = "vocab"
VOCAB_FILES = ("sentencepiece.model", "sentencepiece.extra_ids.model", "vocab.json")


def find_shards_vocab(shards: str) -> str | None:
    """``SHARDS/vocab`` when the shard set carries its vocabulary, else None."""
    cand = os.path.join(shards, RUN_VOCAB)
    return cand if os.path.isfile(os.path.join(cand, "vocab.json")) else None


def vocab_fingerprint(vocab_dir: str) -> str:
    """sha256 of the plain SentencePiece model (what vocab.json and every index.json record)."""
    return sha256_file(os.path.join(vocab_dir, "sentencepiece.model"))


def check_vocab_dir(vocab_dir: str, sha256: str) -> None:
    """Both the recorded and the actual fingerprint of ``vocab_dir`` must be ``sha256``."""
    recorded = read_json(os.path.join(vocab_dir, "vocab.json")).get("sha256")
    actual = vocab_fingerprint(vocab_dir)
    if recorded != sha256 or actual != sha256:
        raise VerificationError(
            f"{vocab_dir}: vocabulary fingerprint {actual} (vocab.json says {recorded}); "
            f"this run's shards were made with {sha256}"
        )


def run_vocab_dir(run_dir: str) -> str | None:
    path = os.path.join(run_dir, RUN_VOCAB)
    return path if os.path.isfile(os.path.join(path, "vocab.json")) else None


def copy_run_vocab(source: str, run_dir: str, sha256: str) -> str | None:
    """Copy ``source`` to ``RUN/vocab`` (checked); keep an existing copy after checking it.

    Returns the copy's path, or None when there is nothing to copy from (the run then records
    only the vocabulary's fingerprint; export asks for --vocab).
    """
    target = os.path.join(run_dir, RUN_VOCAB)
    if run_vocab_dir(run_dir):
        check_vocab_dir(target, sha256)
        return target
    if not source or not os.path.isfile(os.path.join(source, "sentencepiece.model")):
        return None
    check_vocab_dir(source, sha256)
    tmp = f"{target}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in VOCAB_FILES:
        if os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(tmp, name))
    check_vocab_dir(tmp, sha256)
    os.replace(tmp, target)
    return target
