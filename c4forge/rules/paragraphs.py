"""mC4's paragraph filter (``--variant multilingual``), as TFDS ``c4_utils.paragraph_filter``.

mC4 skips C4's English line heuristics and instead keeps a page only if it has at least three
"paragraphs" — lines of at least 200 characters — which drops navigation-only pages in any
script. Lines are ``text.split("\\n")`` (the reference's split, not ``splitlines``), lengths
in code points. Runs right after URL dedup, before line dedup.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from typing import Any

from c4forge.corpus import drop_samples as ds
from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.documents import Doc
from c4forge.corpus.stages import StageJob

STAGE = "paragraph"
REASONS: tuple[str, ...] = ("too_few_paragraphs", "passed")
FLOW = Flow(REASONS[:1], REASONS[1:], title="≥ 3 paragraphs of ≥ 200 chars")
MIN_PARAGRAPHS = 3
MIN_PARAGRAPH_CHARS = 200


def paragraph_filter(text: str, count: Count) -> bool:
    """Keep the page iff it has ``MIN_PARAGRAPHS`` lines of ``MIN_PARAGRAPH_CHARS`` or more
    (reference counters ``paragraph-filter: filtered / passed``)."""
    lengths = [len(line) for line in text.split("\n")]
    if (
        len(lengths) < MIN_PARAGRAPHS
        or min(heapq.nlargest(MIN_PARAGRAPHS, lengths)) < MIN_PARAGRAPH_CHARS
    ):
        count(STAGE, "too_few_paragraphs")
        ds.sample(count, STAGE, "too_few_paragraphs", text)
        return False
    count(STAGE, "passed")
    return True


# --- the plan's stage ----------------------------------------------------------------------


def paragraph(doc: Doc, count: Count) -> Iterator[Doc]:
    if paragraph_filter(doc.text, ds.with_url(count, doc.url)):
        yield doc


def stage(job: StageJob) -> Any:
    """``--variant multilingual``: a document stage after ``clean`` (which keeps the page as
    it is there)."""
    from c4forge.corpus.stages import MapStage

    return MapStage(STAGE, paragraph, flow=FLOW) if job.spec.paragraph_filter else None
