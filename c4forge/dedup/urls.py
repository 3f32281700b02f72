"""URL dedup (c4_rules.md §4): the plan's ``url_dedup`` stage, one page per normalized URL
(``c4forge.corpus.urls.normalize_url``, which the readers and the URL-list join share)."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from c4forge.corpus.counting import Flow
from c4forge.corpus.drop_samples import sample
from c4forge.corpus.stages import StageJob

if TYPE_CHECKING:
    from c4forge.corpus.counting import Count

P = TypeVar("P")  # a Page or a UrlEntry
# URL dedup (stage ``url_dedup``): one page per normalized URL; ``tie_text_md5`` counts groups.
DEDUP_FLOW = Flow(
    ("duplicate_url",), ("passed",), ("tie_text_md5",), title="URL dedup", detail="groups"
)


def text_md5(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def choose_url_copy(pages: Sequence[P]) -> tuple[P, bool]:
    """§4.2 / D3: the newest ``timestamp`` (string order = ISO-8601 order); ties by the
    smallest md5 of the text, then the smallest raw url. The flag says whether the md5 decided,
    i.e. the newest copies did not all have the same text (counted as ``tie_text_md5``).

    ``pages`` are anything with ``timestamp``, ``url`` and ``text_md5``: a ``Page``, or the
    keys-only ``UrlEntry`` of the clean job (the text stays in its chunk)."""
    if not pages:
        raise ValueError("choose_url_copy needs at least one page")
    newest = max(p.timestamp for p in pages)
    tied = [p for p in pages if p.timestamp == newest]
    if len(tied) == 1:
        return tied[0], False
    keyed = [(p.text_md5, p.url, i) for i, p in enumerate(tied)]
    best = min(keyed)
    decided_by_md5 = any(k[0] != best[0] for k in keyed)
    return tied[best[2]], decided_by_md5


def choose_url_copy_counted(pages: Sequence[P], count: Count) -> P:
    """``choose_url_copy`` plus its counters (``url_dedup``: every copy but one is a
    ``duplicate_url``, the survivor ``passed``, an md5 decision ``tie_text_md5``); the one place
    URL dedup is counted, for every engine and the resumable front."""
    kept, tie_by_text = choose_url_copy(pages)
    if len(pages) > 1:
        count("url_dedup", "duplicate_url", len(pages) - 1)
        for p in pages:
            if p is not kept:
                sample(count, "url_dedup", "duplicate_url", p.text, p.url)
    if tie_by_text:
        count("url_dedup", "tie_text_md5")
    count("url_dedup", "passed")
    return kept


# --- the plan's stage: key every page by its normalized URL, keep one copy per key ------------


def key_by_normalized_url(entry: Any, count: Count) -> Iterator[tuple[str, Any]]:
    yield entry.normalized_url, entry


def url_dedup(key: str, pages: Iterable[Any], count: Count) -> Iterator[Any]:
    """One normalized URL's pages (or ``UrlEntry``s) → the kept copy (§4.2, D3), counted once
    here."""
    yield choose_url_copy_counted(list(pages), count)


def stage(job: StageJob) -> Any:
    """Every plan has it, between the page stages and ``clean``."""
    from c4forge.corpus.stages import GroupStage

    return GroupStage(
        "url_dedup", key_by_normalized_url, url_dedup, "normalized URL", flow=DEDUP_FLOW
    )
