"""Train/validation split by URL hash (c4_rules.md §11), as TFDS c4/en 3.1.0 does it.

A hash of the normalized URL, not a random draw, so the same page lands in the same split on
every run, runner and worker count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.documents import Doc
from c4forge.corpus.stages import StageJob

STAGE = "split"
SPLITS = ("train", "validation")  # C4's splits: every other module reads them from here
# Every document goes to one split (the funnel's "written" row, not a stage row).
FLOW = Flow((), SPLITS)
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
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}")
    if language is None:
        return split
    return language if split == "train" else f"{language}-validation"


# --- the plan's stage: the last one, it yields ``(output key, OutDoc)`` ----------------------


def split(doc: Doc, count: Count) -> Iterator[tuple[str, Any]]:
    """→ (split, OutDoc): the output key of the document (c4_rules.md §11)."""
    from c4forge.corpus.documents import make_out_doc

    name = split_of(doc.normalized_url)
    count(STAGE, name)
    yield name, make_out_doc(doc.url, doc.text, doc.timestamp)


def split_by_language(doc: Doc, count: Count) -> Iterator[tuple[str, Any]]:
    """→ (``{lang}`` / ``{lang}-validation``, OutDoc): one shard set per language (mC4)."""
    from c4forge.corpus.documents import make_out_doc

    name = split_of(doc.normalized_url)
    count(STAGE, name)
    count(STAGE, f"{name}:{doc.language}")
    yield release_split_name(name, doc.language), make_out_doc(doc.url, doc.text, doc.timestamp)


def stage(job: StageJob) -> Any:
    from c4forge.corpus.stages import MapStage

    return MapStage(STAGE, split_by_language if job.spec.multilingual else split, flow=FLOW)
