"""A brute-force oracle of exact-substring dedup, independent of ``c4forge.dedup.substrings``:
every N-byte window of every document in a dict, then the struck bytes per document, then the
character and line rules written again, character by character (the module docstring states
them). The tests compare the stage's documents and ``bytes_struck`` with it."""

from __future__ import annotations

import hashlib
from collections import defaultdict


def struck_bytes(docs: list[tuple[str, str]], n: int, keep: str) -> dict[str, set[int]]:
    """``{url: struck byte offsets}``: the union of every N-byte window occurring ≥ 2 times in
    the corpus (``keep="first"``: except the occurrence of smallest (md5(url), offset))."""
    places: dict[bytes, list[tuple[str, str, int]]] = defaultdict(list)
    for url, text in docs:
        raw = text.encode("utf-8")
        for s in range(len(raw) - n + 1):
            places[raw[s : s + n]].append((hashlib.md5(url.encode()).hexdigest(), url, s))
    struck: dict[str, set[int]] = defaultdict(set)
    for occurrences in places.values():
        if len(occurrences) < 2:
            continue
        owner = min(occurrences) if keep == "first" else None
        for occ in occurrences:
            if occ != owner:
                struck[occ[1]].update(range(occ[2], occ[2] + n))
    return struck


def finish(text: str, struck: set[int]) -> tuple[str | None, int]:
    """A character goes when one of its bytes is struck (a line break never); a line that
    lost a character is stripped and dropped when empty; no line left → ``None``. Returns the
    text and the bytes of the removed characters."""
    offset, removed = 0, []
    for ch in text:
        width = len(ch.encode("utf-8"))
        removed.append(ch != "\n" and any(offset + i in struck for i in range(width)))
        offset += width
    gone = sum(len(ch.encode("utf-8")) for ch, r in zip(text, removed) if r)
    if not gone:
        return text, 0
    lines, line, touched = [], [], False
    for ch, r in zip(text + "\n", removed + [False]):
        if ch == "\n":
            kept = "".join(line)
            if touched:
                kept = kept.strip()
            if kept or not touched:
                lines.append(kept)
            line, touched = [], False
        elif r:
            touched = True
        else:
            line.append(ch)
    return ("\n".join(lines) if any(lines) else None), gone


def oracle(docs: list[tuple[str, str]], n: int, keep: str) -> tuple[dict[str, str | None], int]:
    """``({url: text or None (dropped)}, bytes struck)`` of the corpus ``[(url, text)]``."""
    struck = struck_bytes(docs, n, keep)
    out, total = {}, 0
    for url, text in docs:
        out[url], gone = finish(text, struck.get(url, set()))
        total += gone
    return out, total
