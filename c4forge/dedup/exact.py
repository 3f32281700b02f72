"""Corpus-wide exact dedup (c4_rules.md §8) as pure functions, one per step of the shuffle.

Each mode is three steps, so any engine runs it at any scale (the plan's ``dedup`` stage wires
them; tests run that stage through the local engine):
``*_occurrences`` (per page: emit keys) → ``*_owner``/``span_removals`` (per key: decide) →
``apply_*`` (per page, joined by url with the decisions). No step holds a global set: the only
state is one key's occurrences or one page's decisions. Every owner choice is a minimum over
hashes, so the result does not depend on arrival order, worker count or runner.

Counters go through the ``count`` callback under stage ``dedup`` (c4_rules.md §13).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import NamedTuple

from c4forge.clean import drop_samples as ds
from c4forge.clean.counting import Count, Flow

STAGE = "dedup"
SPAN_WINDOW = 3  # sentences per window (§2)
MIN_SENTENCES = 3  # minimum sentences per page, rechecked after dedup (§2)
# A window made only of lone end marks ("." "?" "!" '"', Punkt's debris of "! ! !") is not text.
LONE_END_MARKS = frozenset({".", "?", "!", '"'})
# Pages leaving exact dedup, per mode; the info counters are per sentence or per line.
_DROPS = ("empty", "too_few_sentences")
FLOWS: dict[str, Flow] = {
    "spans": Flow(
        _DROPS, ("passed",), ("repeated_windows", "duplicate_sentence"),
        title="dedup", detail="lines/sentences",
    ),
    "lines": Flow(
        _DROPS, ("passed",), ("global_duplicate", "local_duplicate", "line_passed"),
        title="dedup", detail="lines/sentences",
    ),
}


def md5_hex(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


# --------------------------------------------------------------------------------------------
# §8.1 spans (D1: three-sentence windows, "all but one")


class SpanOccurrence(NamedTuple):
    """Where a window occurs. Tuple order is the owner order: smallest md5(url), then url,
    then first position in the page (line, then sentence index)."""

    url_md5: str
    url: str
    line_index: int
    j: int
    length: int  # sentences in the window: 3, or fewer for a short line


class SpanRemoval(NamedTuple):
    line_index: int
    j: int
    length: int


def span_windows(sentences: Sequence[str]) -> Iterator[tuple[int, tuple[str, ...]]]:
    """``(j, lowercased window)`` for one line's Punkt sentences (§8.1 step 1).

    A line of n < 3 sentences is one window of n; an empty line gives none; windows made only of
    lone end marks are skipped.
    """
    n = len(sentences)
    if n == 0:
        return
    low = [s.lower() for s in sentences]
    size = min(n, SPAN_WINDOW)
    for j in range(n - size + 1):
        window = tuple(low[j : j + size])
        if all(s in LONE_END_MARKS for s in window):
            continue
        yield j, window


def span_key(window: Sequence[str]) -> str:
    """md5 hex of the window's sentences joined with ``\\n`` (sentences never contain one)."""
    return md5_hex("\n".join(window))


def span_occurrences(
    url: str, sentences: Sequence[Sequence[str]]
) -> Iterator[tuple[str, SpanOccurrence]]:
    """Step 2: ``(key, occurrence)`` for every window of every line of one page.

    ``sentences`` is ``CleanedPage.sentences`` (Punkt sentences per kept line), so Punkt is not
    run a second time.
    """
    url_md5 = md5_hex(url)
    for line_index, line_sents in enumerate(sentences):
        for j, window in span_windows(line_sents):
            yield span_key(window), SpanOccurrence(url_md5, url, line_index, j, len(window))


def iter_span_removals(occurrences: Iterable[tuple]) -> Iterator[tuple[str, SpanRemoval]]:
    """Step 3, for one key: every occurrence except the owner's, as ``(url, removal)``.

    The owner is the minimum ``(md5(url), url, line_index, j)``: one copy survives corpus-wide,
    also when all copies are on one page. Nothing for a unique window. ``occurrences`` must be
    re-iterable (a list, or Beam's grouped values): two passes, no copy, so a window repeated
    on millions of pages (boilerplate) does not have to fit in a list on one worker.
    """
    it = iter(occurrences)
    if next(it, None) is None or next(it, None) is None:
        return
    owner = min(occurrences)
    for o in occurrences:
        if o != owner:  # (url, line_index, j) is unique, so only the owner compares equal
            yield o[1], SpanRemoval(o[2], o[3], o[4])


def span_removals(occurrences: Iterable[SpanOccurrence]) -> list[tuple[str, SpanRemoval]]:
    """``iter_span_removals`` as a list (empty: the window is unique)."""
    return list(iter_span_removals(list(occurrences)))


def count_span_key(
    occurrences: Iterable[SpanOccurrence], count: Count
) -> list[tuple[str, SpanRemoval]]:
    """``span_removals`` plus the ``repeated_windows`` counter (once per repeated key)."""
    removals = span_removals(occurrences)
    if removals:
        count(STAGE, "repeated_windows")
    return removals


def apply_span_removals(
    sentences: Sequence[Sequence[str]],
    removals: Iterable[SpanRemoval],
    count: Count,
    min_sentences: int = MIN_SENTENCES,
) -> str | None:
    """Step 4–5 for one page: delete marked sentences, rebuild lines, recheck the page.

    Marks are a union over removals (overlap caveat of §8.1). Every line is rebuilt as its
    remaining sentences joined by one space, as c4 1.0.0 did, even where nothing was removed.
    Returns the new text, or ``None`` when the page is dropped (``empty``/``too_few_sentences``).
    ``min_sentences=0`` skips the recheck, for variants without the line rules (as lines).
    """
    keep = ds.sampling(count)
    marked: dict[int, set[int]] = {}
    for r in removals:
        marked.setdefault(r.line_index, set()).update(range(r.j, r.j + r.length))
    lines: list[str] = []
    kept_sentences = 0
    removed = 0
    for line_index, line_sents in enumerate(sentences):
        drop = marked.get(line_index, ())
        kept = [s for i, s in enumerate(line_sents) if i not in drop]
        removed += len(line_sents) - len(kept)
        if keep and drop:
            for i in sorted(drop):
                if i < len(line_sents):
                    ds.sample(count, STAGE, "duplicate_sentence", line_sents[i])
        if kept:
            lines.append(" ".join(kept))
            kept_sentences += len(kept)
    if removed:
        count(STAGE, "duplicate_sentence", removed)
    if kept_sentences == 0:
        count(STAGE, "empty")
        if keep:
            ds.sample(count, STAGE, "empty", "\n".join(" ".join(s) for s in sentences))
        return None
    if kept_sentences < min_sentences:
        count(STAGE, "too_few_sentences")
        if keep:
            ds.sample(count, STAGE, "too_few_sentences", "\n".join(lines))
        return None
    count(STAGE, "passed")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# §8.2 lines (TFDS c4/en 3.1.0, exact)


class LineOwner(NamedTuple):
    """Candidate owner of a line key; ``min`` picks the smallest md5(url) (url breaks md5 ties,
    which the reference never meets)."""

    url_md5: str
    url: str


def line_key(line: str) -> str:
    """The reference's ``_hash_text(line.strip().lower())``."""
    return md5_hex(line.strip().lower())


def line_occurrences(url: str, text: str) -> Iterator[tuple[str, LineOwner]]:
    """Step 1: ``(key, candidate)`` once per distinct line key of the page.

    The reference emits one pair per line; repeats within a page cannot change the per-key
    minimum, so emitting each key once per page gives the same owners with a smaller shuffle.
    """
    owner = LineOwner(md5_hex(url), url)
    seen: set[str] = set()
    for line in text.split("\n"):
        key = line_key(line)
        if key not in seen:
            seen.add(key)
            yield key, owner


def line_owner(candidates: Iterable[LineOwner]) -> LineOwner:
    """Step 2, for one key: the page that keeps the line (a combine: associative, commutative)."""
    return min(candidates)


def apply_line_dedup(
    text: str,
    owned_keys: Iterable[str],
    count: Count,
    split_sentences: Callable[[str], list[str]],
    min_sentences: int = MIN_SENTENCES,
) -> str | None:
    """Steps 3–5 for one page: keep owned lines at their first occurrence, recheck with Punkt.

    ``owned_keys`` are the keys this page owns (joined by url). ``split_sentences`` is Punkt;
    it runs on the **joined** text as in the reference, so a page can lose a sentence here
    without losing a line (a line ending in ``"`` merges with the next). ``min_sentences=0``
    skips the recheck (and Punkt): the reference's ``remove_duplicate_text(pages,
    min_num_sentences=0)`` for variants without the line rules (``multilingual``,
    ``en.noclean``).
    """
    owned = set(owned_keys)
    keep = ds.sampling(count)
    seen: set[str] = set()
    kept: list[str] = []
    for line in text.split("\n"):
        key = line_key(line)
        if key not in owned:
            count(STAGE, "global_duplicate")
            if keep:
                ds.sample(count, STAGE, "global_duplicate", line)
        elif key in seen:
            count(STAGE, "local_duplicate")
            if keep:
                ds.sample(count, STAGE, "local_duplicate", line)
        else:
            count(STAGE, "line_passed")
            kept.append(line)
            seen.add(key)
    new_text = "\n".join(kept)
    if not new_text:
        count(STAGE, "empty")
        ds.sample(count, STAGE, "empty", text)
        return None
    if min_sentences and len(split_sentences(new_text)) < min_sentences:
        count(STAGE, "too_few_sentences")
        ds.sample(count, STAGE, "too_few_sentences", new_text)
        return None
    count(STAGE, "passed")
    return new_text
