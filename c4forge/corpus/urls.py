"""The URL key of a page (c4_rules.md §4.1): URL dedup groups on it, the split hashes it, and
the readers and the URL-list join compute it, so it lives below all of them.

``normalize_url`` copies the reference's three regex steps verbatim, quirks included (it is
not a URL canonicaliser: it only has to give the same keys as TFDS c4/en 3.1.0).
"""

from __future__ import annotations

import re

# Reference (tfds text/c4_utils.py `_normalize_url`): unanchored, case-sensitive; the second
# pattern's `.*` runs to the end of the string (URLs never contain a newline).
_SCHEME_RE = re.compile(r"https?:\/\/(www\.)?")
_TRACKING_RE = re.compile(r"\?(utm_|ref|feed).*")


def normalize_url(url: str) -> str:
    """§4.1: drop every ``http(s)://(www.)``, cut at the first ``?utm_``/``?ref``/``?feed``,
    strip trailing ``/``."""
    url = _SCHEME_RE.sub("", url)
    url = _TRACKING_RE.sub("", url)
    return url.rstrip("/")
