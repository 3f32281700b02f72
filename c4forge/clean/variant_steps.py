"""The per-element functions of the corpus variants' stages (issue 10), beside ``steps``.

Same conventions as ``c4forge.clean.steps``: module-level functions (``functools.partial`` of
them in the plan), ``fn(item, count)`` for a map, ``fn(k, lefts, rights, count)`` for a
co-group; each returns an iterable. The rules themselves are in ``c4forge.filters``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from c4forge.clean.counting import Count
from c4forge.clean.drop_samples import sample, with_url
from c4forge.clean.steps import Doc


def realnews(page: Any, count: Count, *, domains: Any) -> Iterator[Any]:
    """RealNews domain filter on the normalized URL (after length, before URL dedup)."""
    from c4forge.rules.realnews import realnews_filter

    if realnews_filter(page.normalized_url, domains, count):
        yield page


def to_doc(page: Any, count: Count, *, keep_sentences: bool) -> Iterator[Doc]:
    """The ``clean`` slot of variants without C4's line rules: the page as it is (nothing
    counted). Span dedup, if asked for, gets each line's Punkt sentences."""
    if keep_sentences:
        from c4forge.rules.sentences import split_sentences

        sentences = [split_sentences(line) for line in page.text.splitlines()]
        yield Doc(page.url, page.timestamp, page.normalized_url, "", sentences)
    else:
        yield Doc(page.url, page.timestamp, page.normalized_url, page.text)


def list_urls(path: str, count: Count) -> Iterator[tuple[str, int]]:
    """One URL-list file → ``(normalized URL, 1)`` per listed URL, streamed."""
    from c4forge.rules.url_list import iter_list_urls

    for url in iter_list_urls(path, count):
        yield url, 1


def normalized_url_of(doc: Doc) -> str:
    return doc.normalized_url


def webtext_join(key: str, locs: Iterable[Any], listed: Iterable[int], count: Count) -> Iterator[Any]:
    """One normalized URL: the location of its document (at most one) if the list names it."""
    from c4forge.rules.url_list import webtext_join as join

    kept = join(list(locs), sum(listed), count)
    if kept is not None:
        yield kept


def paragraph(doc: Doc, count: Count) -> Iterator[Doc]:
    from c4forge.rules.paragraphs import paragraph_filter

    if paragraph_filter(doc.text, with_url(count, doc.url)):
        yield doc


def langid_cld3(doc: Doc, count: Count, *, languages: frozenset[str]) -> Iterator[Doc]:
    from c4forge.langid.cld3_filter import cld3_language

    lang = cld3_language(doc.text, with_url(count, doc.url), languages)
    if lang is not None:
        yield doc._replace(language=lang)


def badwords_by_language(doc: Doc, count: Count, *, fraction: float) -> Iterator[Doc]:
    """mC4: each page against its own language's list (none → ``no_list``)."""
    from c4forge.rules.badwords import STAGE, badwords_filter

    bag: dict[str, int] = {}

    def both(stage: str, reason: str, n: int = 1) -> None:
        count(stage, reason, n)
        bag[reason] = n

    kept = badwords_filter(doc.text, doc.language, doc.normalized_url, both, fraction)
    for reason, n in bag.items():
        count(STAGE, f"{reason}:{doc.language}", n)
    if not kept:
        sample(count, STAGE, f"contains_badword:{doc.language}", doc.text, doc.url)
    if kept:
        yield doc


def split_by_language(doc: Doc, count: Count) -> Iterator[tuple[str, Any]]:
    """→ (``{lang}`` / ``{lang}-validation``, OutDoc): one shard set per language (mC4)."""
    from c4forge.clean.output import make_out_doc
    from c4forge.rules.split import release_split_name, split_of

    name = split_of(doc.normalized_url)
    count("split", name)
    count("split", f"{name}:{doc.language}")
    yield release_split_name(name, doc.language), make_out_doc(doc.url, doc.text, doc.timestamp)
