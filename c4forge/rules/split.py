"""Train/validation split by URL hash (c4_rules.md §11), as TFDS c4/en 3.1.0 does it.

A hash of the normalized URL, not a random draw, so the same page lands in the same split on
every run, runner and worker count.
"""

from __future__ import annotations

import hashlib

from c4forge.clean.counting import Flow

STAGE = "split"
# Every document goes to one split (the funnel's "written" row, not a stage row).
FLOW = Flow((), ("train", "validation"))
VALIDATION_MODULUS = 1000  # ≈ 0.1 % of pages go to validation


def split_of(normalized_url: str) -> str:
    """``"validation"`` iff md5(normalized_url) as an integer is divisible by 1000."""
    h = int(hashlib.md5(normalized_url.encode("utf-8")).hexdigest(), 16)
    return "validation" if h % VALIDATION_MODULUS == 0 else "train"


def release_split_name(split: str, language: str | None = None) -> str:
    """The split part of a shard name: ``train`` / ``validation`` for C4, and as in the public
    mC4 release (TFDS multilingual split names) ``{lang}`` / ``{lang}-validation`` for
    ``--variant multilingual``, so shards are ``c4-de.00000-of-00004.json.gz`` and
    ``c4-de-validation.00000-of-00001.json.gz`` (``und`` included)."""
    if split not in ("train", "validation"):
        raise ValueError(f"unknown split {split!r}")
    if language is None:
        return split
    return language if split == "train" else f"{language}-validation"
