"""Line and page heuristics of C4 (c4_rules.md §5, §6), in the reference's exact order.

This is TFDS c4/en 3.1.0 ``clean_page`` with the same counters; every consequence of its
order (a page-level ``{`` only counts on a line that survived the earlier line checks, the
final strip touches only the first line…) is reference behaviour and is kept on purpose.

Two stages of the plan live here, both the page rules of §5–§6 with their constants recorded
together in stats.json: ``length`` (per page, before URL dedup: ``length_stage``) and ``clean``
(the page → ``Doc`` slot after URL dedup: ``stage``; the page as it is for the variants
without C4's line rules).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from c4forge.corpus import drop_samples as ds
from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.documents import Doc
from c4forge.corpus.stages import StageJob
from c4forge.rules.sentences import split_sentences

STAGE = "clean"
LENGTH_STAGE = "length"

MAX_PAGE_CHARS = 190_000  # reference: `len(text) > 1.9e5` drops the page
MIN_WORDS_PER_LINE = 5
MIN_NUM_SENTENCES = 3
MAX_WORD_LENGTH = 1000
END_MARKS = (".", "?", "!", '"')  # ASCII `"` only
ELLIPSIS = "..."
# `\d` is Unicode-aware in Python 3 (any decimal digit, e.g. Arabic-Indic), as in the reference.
CITATION_PATTERN = r"\[\d*\]|\[edit\]|\[citation needed\]"
CITATION_RE = re.compile(CITATION_PATTERN)
POLICY_SUBSTRINGS = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)
JAVASCRIPT = "javascript"
LOREM_IPSUM = "lorem ipsum"
CURLY_BRACKET = "{"

# The flows of the two stages this module counts (c4_rules.md §13; carried by the plan's stages).
LENGTH_FLOW = Flow(("too_long_page",), ("passed",), title=f"length ≤ {MAX_PAGE_CHARS:,} chars")
FLOW = Flow(
    ("loremipsum", "squigglybracket", "too_few_sentences"),
    ("passed",),
    # per line (not a page): why a line went, and the lines kept
    ("too_long_word", "no_endmark", "too_short", "javascript", "policy", "line_passed"),
    title="line & page rules",
    detail="lines",
)


@dataclass
class CleanedPage:
    text: str
    # Punkt sentences of each kept line (the lines of ``text.split("\n")``, in order), so span
    # dedup does not run Punkt a second time.
    sentences: list[list[str]] = field(default_factory=list)


def _has_too_long_word(line: str) -> bool:
    # A line no longer than the limit cannot hold a longer token (cheap exact shortcut).
    return len(line) > MAX_WORD_LENGTH and any(len(w) > MAX_WORD_LENGTH for w in line.split())


def clean_page(text: str, count: Count) -> CleanedPage | None:
    """§6: filter the lines of ``text``; ``None`` when the page is dropped (reason counted).

    The checks run in the reference's order, which decides the reason a line is counted under.
    Line-level reasons are tallied locally and reported once per page (same totals; a Beam
    counter update per line costs more than the rules themselves)."""
    kept: list[str] = []
    sentences: list[list[str]] = []
    num_sentences = 0
    too_long_word = no_endmark = too_short = javascript = policy = 0
    page_reason = None
    keep = ds.sampling(count)  # --keep-samples: report each dropped line
    for raw in text.splitlines():
        line = raw.strip()
        if len(line) > MAX_WORD_LENGTH and _has_too_long_word(line):
            too_long_word += 1
            if keep:
                ds.sample(count, STAGE, "too_long_word", line)
            continue
        if "[" in line:  # every citation marker starts with "["
            line = CITATION_RE.sub("", line)  # not stripped again (reference)
        if not line.endswith(END_MARKS) or line.endswith(ELLIPSIS):
            no_endmark += 1
            if keep:
                ds.sample(count, STAGE, "no_endmark", line)
            continue
        # `len(line.split()) < 5` without splitting the whole line: with maxsplit=4 the list
        # has min(words, 5) items (str.split(None, n) drops trailing whitespace too).
        if len(line.split(None, MIN_WORDS_PER_LINE - 1)) < MIN_WORDS_PER_LINE:
            too_short += 1
            if keep:
                ds.sample(count, STAGE, "too_short", line)
            continue
        low = line.lower()
        if LOREM_IPSUM in low:
            page_reason = "loremipsum"
            break
        if JAVASCRIPT in low:
            javascript += 1
            if keep:
                ds.sample(count, STAGE, "javascript", line)
            continue
        if CURLY_BRACKET in line:
            page_reason = "squigglybracket"
            break
        if any(p in low for p in POLICY_SUBSTRINGS):
            policy += 1
            if keep:
                ds.sample(count, STAGE, "policy", line)
            continue
        sents = split_sentences(line)
        num_sentences += len(sents)
        kept.append(line)
        sentences.append(sents)
    for reason, n in (
        ("too_long_word", too_long_word),
        ("no_endmark", no_endmark),
        ("too_short", too_short),
        ("javascript", javascript),
        ("policy", policy),
        ("line_passed", len(kept)),
    ):
        if n:
            count(STAGE, reason, n)
    if page_reason is not None:  # a page-level drop stops the scan: nothing after it counts
        count(STAGE, page_reason)
        ds.sample(count, STAGE, page_reason, text)
        return None
    if num_sentences < MIN_NUM_SENTENCES:
        count(STAGE, "too_few_sentences")
        ds.sample(count, STAGE, "too_few_sentences", text)
        return None
    count(STAGE, "passed")
    cleaned = "\n".join(kept).strip()
    # The whole-text strip can only change the first line (kept lines end with an end mark;
    # a citation removed at the start leaves a leading space): re-split it so ``sentences``
    # matches the lines of the returned text.
    first = cleaned.split("\n", 1)[0]
    if first != kept[0]:
        sentences[0] = split_sentences(first)
    return CleanedPage(text=cleaned, sentences=sentences)


def length_filter(page_text: str, count: Count) -> bool:
    """§5: keep a page of at most ``MAX_PAGE_CHARS`` characters (stage ``length``)."""
    if len(page_text) > MAX_PAGE_CHARS:
        count(LENGTH_STAGE, "too_long_page")
        ds.sample(count, LENGTH_STAGE, "too_long_page", page_text)
        return False
    count(LENGTH_STAGE, "passed")
    return True


# --- the plan's stages ------------------------------------------------------------------------


def length(page: Any, count: Count) -> Iterator[Any]:
    """Drop pages over 190,000 characters (§5), before URL dedup as in the reference."""
    if length_filter(page.text, ds.with_url(count, page.url)):
        yield page


def clean(page: Any, count: Count, *, keep_sentences: bool) -> Iterator[Doc]:
    """Line and page heuristics (§6). With span dedup only the sentences are kept (span dedup
    rebuilds the text from them)."""
    cleaned = clean_page(page.text, ds.with_url(count, page.url))
    if cleaned is None:
        return
    if keep_sentences:
        yield Doc(page.url, page.timestamp, page.normalized_url, "", cleaned.sentences)
    else:
        yield Doc(page.url, page.timestamp, page.normalized_url, cleaned.text)


def as_is(page: Any, count: Count, *, keep_sentences: bool) -> Iterator[Doc]:
    """The ``clean`` slot of variants without C4's line rules: the page as it is (nothing
    counted). Span dedup, if asked for, gets each line's Punkt sentences."""
    if keep_sentences:
        sentences = [split_sentences(line) for line in page.text.splitlines()]
        yield Doc(page.url, page.timestamp, page.normalized_url, "", sentences)
    else:
        yield Doc(page.url, page.timestamp, page.normalized_url, page.text)


def as_is_stage(job: Any) -> Any:
    """The page → document slot that changes nothing (not a funnel stage): a clean corpus
    read back (``--input-format c4``)."""
    from c4forge.corpus.stages import MapStage

    return MapStage(STAGE, functools.partial(as_is, keep_sentences=job.dedup == "spans"))


def length_stage(job: Any) -> Any:
    from c4forge.corpus.stages import MapStage

    return MapStage(LENGTH_STAGE, length, flow=LENGTH_FLOW)


def stage(job: StageJob) -> Any:
    """The page → document slot: the rules, or (``en.noclean``, ``multilingual``) the page
    unchanged, then not a funnel stage (``flow=None``)."""
    from c4forge.corpus.stages import MapStage

    keep_sentences = job.dedup == "spans"
    if job.spec.clean:
        return MapStage(STAGE, functools.partial(clean, keep_sentences=keep_sentences), flow=FLOW)
    return as_is_stage(job)
