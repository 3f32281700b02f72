"""The per-element functions of the clean plan: each calls the rules of ``c4forge.filters``
and reports through the ``count`` callback. Module-level (and ``functools.partial`` of them),
so every engine can ship them to its workers by reference. No engine imports here.

Signatures follow the engine primitives (``c4forge.engines.base``): ``fn(item, count)`` for a
map, ``fn(key, values, count)`` for a group, ``fn(key, lefts, rights, count)`` for a co-group;
each returns an iterable of output items.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from c4forge.clean.counting import Count
from c4forge.clean.drop_samples import sample, with_url


class Doc(NamedTuple):
    """A page after cleaning (the one document type of every engine). ``sentences`` (Punkt,
    per line) is kept only until span dedup, which rebuilds the text from them."""

    url: str
    timestamp: str
    normalized_url: str
    text: str
    sentences: Any = None
    language: str = "en"  # set by language ID (CLD3 in --variant multilingual)


# --- read and per-page stages ------------------------------------------------------------------


def read_input(
    path: str, count: Count, *, max_record_bytes: int, input_format: str
) -> Iterator[Any]:
    """One input path → its pages (c4_rules.md §3). The reader counts every ``wet.*`` reason."""
    if input_format == "wet":
        from c4forge.readers.wet import open_binary, read_wet

        with open_binary(path) as stream:
            yield from read_wet(
                stream, path.rsplit("/", 1)[-1], count, max_record_bytes=max_record_bytes
            )
    else:  # "warc" or "auto" (decided per file by sniffing its first records)
        from c4forge.readers.warc_html import read_path

        yield from read_path(
            path, count, input_format=input_format, max_record_bytes=max_record_bytes
        )


def length(page: Any, count: Count) -> Iterator[Any]:
    """Drop pages over 190,000 characters (§5), before URL dedup as in the reference."""
    from c4forge.rules.lines import length_filter

    if length_filter(page.text, with_url(count, page.url)):
        yield page


class UrlEntry(NamedTuple):
    """What URL dedup needs of a page (c4_rules.md §4.2), without its text: the text stays in
    the chunk that read it (``c4forge.clean.passes``); ``loc`` is ``(chunk, record)``."""

    normalized_url: str
    timestamp: str
    text_md5: str
    url: str
    loc: tuple[int, int]
    text: str = ""  # only with --keep-samples: a dropped copy's sample (drop_samples.MAX_TEXT)


def key_by_normalized_url(entry: Any, count: Count) -> Iterator[tuple[str, Any]]:
    yield entry.normalized_url, entry


def url_dedup(key: str, pages: Iterable[Any], count: Count) -> Iterator[Any]:
    """One normalized URL's pages (or ``UrlEntry``s) → the kept copy (§4.2, D3), counted once
    here."""
    from c4forge.dedup.urls import choose_url_copy_counted

    yield choose_url_copy_counted(list(pages), count)


def clean(page: Any, count: Count, *, keep_sentences: bool) -> Iterator[Doc]:
    """Line and page heuristics (§6). With span dedup only the sentences are kept (span dedup
    rebuilds the text from them)."""
    from c4forge.rules.lines import clean_page

    cleaned = clean_page(page.text, with_url(count, page.url))
    if cleaned is None:
        return
    if keep_sentences:
        yield Doc(page.url, page.timestamp, page.normalized_url, "", cleaned.sentences)
    else:
        yield Doc(page.url, page.timestamp, page.normalized_url, cleaned.text)


# --- exact dedup (§8), keys only -----------------------------------------------------------
# A document is addressed by its location ``loc = (chunk, record)`` (unique, small); the owner
# order is md5(url) first, as in ``filters.dedup`` (the location stands in for the url as the
# tie-break of equal md5s, which distinct URLs never have).


def _url_md5(url: str) -> bytes:
    import hashlib

    return hashlib.md5(url.encode("utf-8")).digest()  # byte order = hex order


def span_occurrences(loc: tuple, doc: Doc, count: Count) -> Iterator[tuple[bytes, tuple]]:
    """``(window md5, (md5(url), loc, line, j, length))`` per window: ~50 bytes, no text."""
    import hashlib

    from c4forge.dedup import exact as dd

    url_md5 = _url_md5(doc.url)
    for line_index, line_sents in enumerate(doc.sentences):
        for j, window in dd.span_windows(line_sents):
            key = hashlib.md5("\n".join(window).encode("utf-8")).digest()
            yield key, (url_md5, loc, line_index, j, len(window))


def span_removals(key: Any, occurrences: Iterable[tuple], count: Count) -> Iterator[tuple]:
    """One window's occurrences → (loc, removal) for every copy but the owner's. Streams the
    grouped values (never copied into a list)."""
    from c4forge.dedup import exact as dd

    repeated = False
    for loc, removal in dd.iter_span_removals(occurrences):
        repeated = True
        yield loc, tuple(removal)
    if repeated:
        count(dd.STAGE, "repeated_windows")


def apply_span_removals(
    loc: tuple, doc: Doc, removals: Iterable[tuple], count: Count, *, min_sentences: int = 3
) -> Iterator[Doc]:
    from c4forge.dedup import exact as dd

    found = [dd.SpanRemoval(*r) for r in removals]
    counted = with_url(count, doc.url)
    text = dd.apply_span_removals(doc.sentences, found, counted, min_sentences)
    if text is not None:
        yield doc._replace(text=text, sentences=None)


def line_occurrences(loc: tuple, doc: Doc, count: Count) -> Iterator[tuple[str, tuple]]:
    """``(line md5, (md5(url), loc))`` once per distinct line of the page."""
    from c4forge.dedup import exact as dd

    owner = (_url_md5(doc.url), loc)
    for key, _ in dd.line_occurrences(doc.url, doc.text):
        yield key, owner


def line_owner(candidates: Iterable[tuple]) -> tuple:
    """TFDS: the smallest md5(url) owns a line (a combine over partial results)."""
    return min(candidates)


def owner_to_loc(item: tuple[str, tuple], count: Count) -> Iterator[tuple[tuple, str]]:
    key, owner = item
    yield owner[1], key


def apply_line_dedup(
    loc: tuple, doc: Doc, owned: Iterable[str], count: Count, *, min_sentences: int = 3
) -> Iterator[Doc]:
    """``min_sentences=0``: no Punkt recheck (variants without the line rules, as TFDS)."""
    from c4forge.dedup import exact as dd
    from c4forge.rules.sentences import split_sentences

    counted = with_url(count, doc.url)
    text = dd.apply_line_dedup(doc.text, list(owned), counted, split_sentences, min_sentences)
    if text is not None:
        yield doc._replace(text=text)


# --- MinHash near-dedup (issue 5) --------------------------------------------------------------
# A graph node is ``md5hex(url):chunk:record``: md5 first (fixed width), so string order and the
# component minimum (the survivor) are md5(url)'s; the suffix routes a decision to its chunk.


def node_of(loc: tuple, doc: Doc) -> str:
    from c4forge.dedup import minhash as mh

    return f"{mh.node_id(doc.url)}:{loc[0]}:{loc[1]}"


def loc_of_node(node: str) -> tuple[int, int]:
    _, chunk, record = node.rsplit(":", 2)
    return int(chunk), int(record)


def band_entries(loc: tuple, doc: Doc, count: Count, *, params: Any) -> Iterator[tuple]:
    from c4forge.dedup import minhash as mh

    sig = mh.signature(doc.text, params)
    if sig is not None:
        yield from mh.band_entries(node_of(loc, doc), sig, params)


def bucket_pairs(key: Any, members: Iterable[tuple], count: Count, *, params: Any) -> Iterator:
    from c4forge.dedup import minhash as mh

    yield from mh.bucket_pairs(members, params)


def either(flags: Iterable[bool]) -> bool:
    """One entry per distinct pair: true when any bucket verified it."""
    return any(flags)


def pair_edge(item: tuple, count: Count) -> Iterator[tuple[str, str]]:
    from c4forge.dedup import minhash as mh

    pair, ok = item
    yield from mh.pair_edge(pair, [ok], count)


def canonical_edge(edge: tuple[str, str], count: Count) -> Iterator[tuple[str, str]]:
    from c4forge.dedup import minhash as mh

    e = mh.canonical(edge)
    if e is not None:
        yield e


def large_star_input(edge: tuple[str, str], count: Count) -> Iterator[tuple[str, str]]:
    from c4forge.dedup import minhash as mh

    yield from mh.large_star_input(edge)


def small_star_input(edge: tuple[str, str], count: Count) -> Iterator[tuple[str, str]]:
    from c4forge.dedup import minhash as mh

    yield from mh.small_star_input(edge)


def large_star(node: str, nbrs: Iterable[str], count: Count) -> Iterator[tuple[str, str]]:
    from c4forge.dedup import minhash as mh

    yield from mh.large_star(node, nbrs)


def small_star(node: str, nbrs: Iterable[str], count: Count) -> Iterator[tuple[str, str]]:
    from c4forge.dedup import minhash as mh

    yield from mh.small_star(node, nbrs)


def count_unconverged(node: str, nbrs: Iterable[str], count: Count) -> Iterator[Any]:
    from c4forge.dedup import minhash as mh

    if not mh.is_star_node(node, nbrs):
        count(mh.STAGE, "unconverged")
    return iter(())


def removed_loc(node: str, count: Count) -> Iterator[tuple[tuple[int, int], bool]]:
    yield loc_of_node(node), True


def removed_node(edge: tuple[str, str], count: Count) -> Iterator[str]:
    from c4forge.dedup import minhash as mh

    yield mh.removed_node(edge)


def mark_removed(loc: tuple, doc: Doc, removed: Iterable[bool], count: Count) -> Iterator[Doc]:
    from c4forge.dedup import minhash as mh

    if any(True for _ in removed):
        count(mh.STAGE, "removed")
        sample(count, mh.STAGE, "removed", doc.text, doc.url)
    else:
        count(mh.STAGE, "passed")
        yield doc


# --- langid, bad words, split ------------------------------------------------------------------


def langid(doc: Doc, count: Count, *, language: str) -> Iterator[Doc]:
    from c4forge.langid.langdetect_filter import langid_filter

    if langid_filter(doc.text, with_url(count, doc.url), language):
        yield doc


def badwords(doc: Doc, count: Count, *, language: str, fraction: float) -> Iterator[Doc]:
    from c4forge.rules.badwords import badwords_filter

    counted = with_url(count, doc.url)
    if badwords_filter(doc.text, language, doc.normalized_url, counted, fraction):
        yield doc


def split(doc: Doc, count: Count) -> Iterator[tuple[str, Any]]:
    """→ (split, OutDoc): the output key of the document (c4_rules.md §11)."""
    from c4forge.clean.output import make_out_doc
    from c4forge.rules.split import split_of

    name = split_of(doc.normalized_url)
    count("split", name)
    yield name, make_out_doc(doc.url, doc.text, doc.timestamp)
