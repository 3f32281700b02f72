"""Corpus-wide exact dedup (c4_rules.md §8): the plan's ``dedup`` stage, whole, in one module.

Each mode is three steps, so any engine runs it at any scale, keys only (the documents stay in
their chunk; ``c4forge.clean.passes``): ``emit_*`` (per document: its keys) → a decision per
key through the engine (``decide_span``, or the ``line_owner`` combine) → ``apply_*`` (per
document, with the decisions sent back to its chunk). No step holds a global set: the only
state is one key's occurrences or one document's decisions. Every owner choice is a minimum
over hashes, so the result does not depend on arrival order, worker count or runner.

A document is addressed by its location ``loc = (chunk, record)`` (unique, small); the owner
order is md5(url) first, the location standing in for the url as the tie-break of equal md5s
(which distinct URLs never have). Counters go through ``count`` under stage ``dedup`` (§13).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from c4forge.corpus import drop_samples as ds
from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.documents import Doc
from c4forge.corpus.stages import StageJob
from c4forge.io.storage import md5_hex

STAGE = "dedup"
SPAN_WINDOW = 3  # sentences per window (§2)
MIN_SENTENCES = 3  # minimum sentences per page, rechecked after dedup (§2)
# A window made only of lone end marks ("." "?" "!" '"', Punkt's debris of "! ! !") is not text.
LONE_END_MARKS = frozenset({".", "?", "!", '"'})
# Pages leaving exact dedup, per mode; the info counters are per sentence or per line.
_DROPS = ("empty", "too_few_sentences")
FLOWS: dict[str, Flow] = {
    "spans": Flow(
        _DROPS,
        ("passed",),
        ("repeated_windows", "duplicate_sentence"),
        title="dedup",
        detail="lines/sentences",
    ),
    "lines": Flow(
        _DROPS,
        ("passed",),
        ("global_duplicate", "local_duplicate", "line_passed"),
        title="dedup",
        detail="lines/sentences",
    ),
}


# --------------------------------------------------------------------------------------------
# §8.1 spans (D1: three-sentence windows, "all but one")


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


def span_key(window: Sequence[str]) -> bytes:
    """md5 of the window's sentences joined with ``\\n`` (sentences never contain one); the
    16-byte digest, not hex: the key crosses a shuffle once per window."""
    return hashlib.md5("\n".join(window).encode("utf-8")).digest()


def iter_span_removals(occurrences: Iterable[tuple]) -> Iterator[tuple[Any, SpanRemoval]]:
    """Step 3, for one key: every occurrence except the owner's, as ``(loc, removal)``.

    An occurrence is ``(md5(url), loc, line_index, j, length)``; the owner is the minimum, so
    one copy survives corpus-wide, also when all copies are on one page. Nothing for a unique window. ``occurrences`` must be
    re-iterable (a list, or Beam's grouped values): two passes, no copy, so a window repeated
    on millions of pages (boilerplate) does not have to fit in a list on one worker.
    """
    it = iter(occurrences)
    if next(it, None) is None or next(it, None) is None:
        return
    owner = min(occurrences)
    for o in occurrences:
        if o != owner:  # (loc, line_index, j) is unique, so only the owner compares equal
            yield o[1], SpanRemoval(o[2], o[3], o[4])


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


def line_key(line: str) -> str:
    """The reference's ``_hash_text(line.strip().lower())``."""
    return md5_hex(line.strip().lower())


def line_keys(text: str) -> Iterator[str]:
    """Step 1: each distinct line key of the page, once.

    The reference emits one pair per line; repeats within a page cannot change the per-key
    minimum, so emitting each key once per page gives the same owners with a smaller shuffle.
    """
    seen: set[str] = set()
    for line in text.split("\n"):
        key = line_key(line)
        if key not in seen:
            seen.add(key)
            yield key


def line_owner(candidates: Iterable[tuple]) -> tuple:
    """Step 2, for one key: the page that keeps the line, the smallest ``(md5(url), loc)`` (a
    combine over partial results: associative, commutative)."""
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


# --------------------------------------------------------------------------------------------
# The plan's stage: the per-element steps the engines run, and ``stage(job)``.


def _url_md5(url: str) -> bytes:
    return hashlib.md5(url.encode("utf-8")).digest()  # byte order = hex order


def emit_spans(loc: tuple, doc: Doc, count: Count) -> Iterator[tuple[bytes, tuple]]:
    """``(window md5, (md5(url), loc, line, j, length))`` per window: ~50 bytes, no text."""
    url_md5 = _url_md5(doc.url)
    for line_index, line_sents in enumerate(doc.sentences):
        for j, window in span_windows(line_sents):
            yield span_key(window), (url_md5, loc, line_index, j, len(window))


def decide_span(key: Any, occurrences: Iterable[tuple], count: Count) -> Iterator[tuple]:
    """One window's occurrences → ``(loc, removal)`` for every copy but the owner's. Streams
    the grouped values (never copied into a list)."""
    repeated = False
    for loc, removal in iter_span_removals(occurrences):
        repeated = True
        yield loc, tuple(removal)
    if repeated:
        count(STAGE, "repeated_windows")


def apply_spans(
    loc: tuple, doc: Doc, removals: Iterable[tuple], count: Count, *, min_sentences: int = 3
) -> Iterator[Doc]:
    found = [SpanRemoval(*r) for r in removals]
    text = apply_span_removals(doc.sentences, found, ds.with_url(count, doc.url), min_sentences)
    if text is not None:
        yield doc._replace(text=text, sentences=None)


def emit_lines(loc: tuple, doc: Doc, count: Count) -> Iterator[tuple[str, tuple]]:
    """``(line md5, (md5(url), loc))`` once per distinct line of the page."""
    owner = (_url_md5(doc.url), loc)
    for key in line_keys(doc.text):
        yield key, owner


def _owner_to_loc(item: tuple[str, tuple], count: Count) -> Iterator[tuple[tuple, str]]:
    key, owner = item
    yield owner[1], key


def apply_lines(
    loc: tuple, doc: Doc, owned: Iterable[str], count: Count, *, min_sentences: int = 3
) -> Iterator[Doc]:
    """``min_sentences=0``: no Punkt recheck (variants without the line rules, as TFDS)."""
    from c4forge.rules.sentences import split_sentences

    counted = ds.with_url(count, doc.url)
    text = apply_line_dedup(doc.text, list(owned), counted, split_sentences, min_sentences)
    if text is not None:
        yield doc._replace(text=text)


def stage(job: StageJob) -> Any:
    """``--dedup spans`` (C4's default) or ``lines`` (TFDS 3.1.0); ``none``: no stage."""
    from c4forge.corpus.stages import JoinStage

    min_sentences = job.spec.min_sentences_after_dedup
    if job.dedup == "spans":
        return JoinStage(
            STAGE,
            emit_spans,
            decide_span,
            functools.partial(apply_spans, min_sentences=min_sentences),
            "md5 of a three-sentence span",
            flow=FLOWS["spans"],
        )
    if job.dedup == "lines":
        return JoinStage(
            STAGE,
            emit_lines,
            _owner_to_loc,
            functools.partial(apply_lines, min_sentences=min_sentences),
            "md5 of a line",
            combine=line_owner,
            flow=FLOWS["lines"],
        )
    return None
