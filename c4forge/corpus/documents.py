"""The records that travel through a clean plan: ``UrlEntry`` (a page as URL dedup sees it,
without its text), ``Doc`` (a page after the ``clean`` slot, the one document type of every
engine and every stage after it) and ``OutDoc`` (what the last stage hands the writer)."""

from __future__ import annotations

from typing import Any, NamedTuple

from c4forge.io.storage import md5_hex


class Doc(NamedTuple):
    """A page after cleaning. ``sentences`` (Punkt, per line) is kept only until span dedup,
    which rebuilds the text from them."""

    url: str
    timestamp: str
    normalized_url: str
    text: str
    sentences: Any = None
    language: str = "en"  # set by language ID (CLD3 in --variant multilingual)
    # Substring dedup's candidate fingerprints, from its winnowing pass to its window pass in
    # memory only (never written to a chunk's scratch file); None everywhere else.
    marks: Any = None


class UrlEntry(NamedTuple):
    """What URL dedup needs of a page (c4_rules.md §4.2), without its text: the text stays in
    the chunk that read it (``c4forge.clean.passes``); ``loc`` is ``(chunk, record)``."""

    normalized_url: str
    timestamp: str
    text_md5: str
    url: str
    loc: tuple[int, int]
    text: str = ""  # only with --keep-samples: a dropped copy's sample (drop_samples.MAX_TEXT)


class OutDoc(NamedTuple):
    """A document ready to write; tuple order is the in-shard sort order."""

    url_md5: str
    url: str
    text: str
    timestamp: str


def make_out_doc(url: str, text: str, timestamp: str) -> OutDoc:
    return OutDoc(md5_hex(url), url, text, timestamp)
