"""Documents of a clean corpus as pages: the read step of ``clean --input-format c4``.

Why: users of the released C4 (AllenAI's ``c4-*.json.gz``) or of an earlier ``c4forge clean``
want the corpus-wide stages (``--dedup-substrings`` above all) over documents that are clean
already, without running the crawl rules again. Each JSON line (or Parquet row) with ``text``,
``url`` and ``timestamp`` (or ``date``, as some copies name it) is one page, counted under the
read step's reasons (c4_rules.md §3 step 11's order: ``no_url``, ``no_content``,
``no_timestamp``); a line that is not a JSON object with a string ``text`` is an input error
naming file and line (``corpus.clean_docs.iter_documents``): such a file is not C4.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def read_documents(path: str, count: Any) -> Iterator[Any]:
    """One clean shard → its pages (``readers.wet.Page``), counted under ``wet``."""
    from c4forge.corpus.clean_docs import iter_documents
    from c4forge.corpus.urls import normalize_url
    from c4forge.readers.wet import STAGE, Page

    count(STAGE, "files")
    records = 0
    for rec in iter_documents(path):
        records += 1
        count(STAGE, "records")
        url = rec["url"].strip()
        stamp = rec.get("timestamp") or rec.get("date") or ""
        if not url:
            count(STAGE, "no_url")
        elif not rec["text"]:
            count(STAGE, "no_content")
        elif not isinstance(stamp, str) or not stamp:
            count(STAGE, "no_timestamp")
        else:
            count(STAGE, "pages")
            yield Page(url, stamp, rec["text"], normalize_url(url))
    if not records:
        count(STAGE, "empty_file")
