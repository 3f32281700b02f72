"""Word n-grams over normalised text, and the index a corpus document is matched against.

Normalisation (why: GLUE's files are tokenised, ``doesn 't``, web text is not, ``doesn't``;
both must give the same words): lower case, every run of characters that are not letters or
digits (punctuation, ``_``, whitespace) becomes one space, then split. An example field
contributes its word ``n``-grams (GPT-3's decontamination used n = 13); a field shorter than
``n`` words contributes itself whole when it has at least ``MIN_WORDS`` words (GPT-3's floor
for short tasks), and nothing otherwise (too short to tell a copy from a common phrase; it is
counted as ``short_fields`` in the benchmark's fingerprint, not silently ignored).

The grams are kept as strings (exact, no hash collisions); the index of GLUE's dev sets is a
few megabytes, small enough to broadcast to every worker.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

MIN_WORDS = 8
_NON_WORD = re.compile(r"[\W_]+")


def words(text: str) -> list[str]:
    """Lower-cased words; punctuation and whitespace collapsed (module docstring)."""
    return _NON_WORD.sub(" ", text.lower()).split()


def field_grams(text: str, n: int) -> list[str]:
    """The grams one example field contributes (its n-grams, or itself whole when shorter than
    ``n`` words but at least ``min(n, MIN_WORDS)``; none below that)."""
    w = words(text)
    if len(w) >= n:
        return [" ".join(w[i : i + n]) for i in range(len(w) - n + 1)]
    if len(w) >= min(n, MIN_WORDS):
        return [" ".join(w)]
    return []


def doc_grams(text: str, lengths: Sequence[int], prefixes: set[str] | None = None) -> Iterator[str]:
    """The word k-grams of a document for each k in ``lengths`` (the index's gram lengths,
    longest first). With ``prefixes`` (the first ``min(lengths)`` words of every gram), only
    the positions whose shortest gram is such a prefix: the same matches for one join per
    position instead of one per length (the stage's cost on a large corpus)."""
    w = words(text)
    if not lengths:
        return
    shortest = min(lengths)
    for i in range(len(w) - shortest + 1):
        if prefixes is not None and " ".join(w[i : i + shortest]) not in prefixes:
            continue
        for k in lengths:
            if i + k <= len(w):
                yield " ".join(w[i : i + k])


@dataclass(frozen=True)
class Example:
    """One evaluation example: benchmark, split, 0-based row, 1-based line, text fields."""

    benchmark: str
    split: str
    index: int
    line: int
    texts: tuple[str, ...]


@dataclass
class NgramIndex:
    """Gram → the benchmarks (by position in ``names``) and, with ``examples``, the examples
    holding it. ``lengths``: the distinct gram lengths (``n``, and shorter whole fields)."""

    n: int
    names: tuple[str, ...]
    grams: dict[str, int] = field(default_factory=dict)  # gram → first benchmark position
    lengths: tuple[int, ...] = ()
    owners: dict[str, list[int]] | None = None  # gram → example ids (positions in ``examples``)
    examples: list[Example] | None = None
    prefixes: set[str] = field(default_factory=set)  # first min(lengths) words of every gram

    def first_match(self, text: str) -> int | None:
        """Position (in ``names``) of the first benchmark sharing a gram with ``text``."""
        best: int | None = None
        for g in doc_grams(text, self.lengths, self.prefixes):
            pos = self.grams.get(g)
            if pos is not None and (best is None or pos < best):
                best = pos
                if best == 0:
                    break
        return best

    def matched_examples(self, text: str) -> set[int]:
        """Ids of every example sharing a gram with ``text`` (needs ``owners``)."""
        assert self.owners is not None
        found: set[int] = set()
        for g in doc_grams(text, self.lengths, self.prefixes):
            ids = self.owners.get(g)
            if ids:
                found.update(ids)
        return found

    def without_owners(self) -> NgramIndex:
        """The part the clean stage needs (what is broadcast to the workers)."""
        return NgramIndex(self.n, self.names, self.grams, self.lengths, prefixes=self.prefixes)


def build_index(
    examples_by_benchmark: Sequence[tuple[str, Iterable[Example]]], n: int, keep_owners: bool
) -> tuple[NgramIndex, dict[str, dict]]:
    """The index over every benchmark (in the given order) and per benchmark its gram
    statistics: ``{"ngrams", "short_fields", "grams_sha256"}``."""
    index = NgramIndex(n, tuple(name for name, _ in examples_by_benchmark))
    if keep_owners:
        index.owners, index.examples = {}, []
    lengths: set[int] = set()
    info: dict[str, dict] = {}
    for pos, (name, examples) in enumerate(examples_by_benchmark):
        mine: set[str] = set()
        short = 0
        for ex in examples:
            eid = None
            if index.examples is not None:
                eid = len(index.examples)
                index.examples.append(ex)
            for text in ex.texts:
                grams = field_grams(text, n)
                if not grams:
                    short += 1
                for g in grams:
                    mine.add(g)
                    index.grams.setdefault(g, pos)
                    lengths.add(g.count(" ") + 1)
                    if index.owners is not None:
                        ids = index.owners.setdefault(g, [])
                        if not ids or ids[-1] != eid:
                            ids.append(eid)
        digest = hashlib.sha256("\n".join(sorted(mine)).encode("utf-8")).hexdigest()
        info[name] = {"ngrams": len(mine), "short_fields": short, "grams_sha256": digest}
    index.lengths = tuple(sorted(lengths, reverse=True))
    if lengths:
        shortest = min(lengths)
        index.prefixes = {" ".join(g.split(" ")[:shortest]) for g in index.grams}
    return index, info
