"""The units of the rows step: whole clean shards, or parts of one cut at group boundaries.

Why parts: ``clean`` writes C4-sized shards (356,000 documents each), so a corpus of up to a few
hundred thousand pages has one train clean shard, and with the clean shard as the only unit a
second worker has nothing to do (and a 250k-page build would hold one worker's memory while a
1M-page build holds two). A clean shard is therefore cut into ``round(workers × its share of
the bytes)`` parts of at least ``MIN_PART_DOCUMENTS`` documents; a 1M-page output (two train
shards) on two workers stays one part per shard, so nothing is read twice (a part skips the
documents before it undecoded, but still inflates them).

Why the bytes do not change: with one row per example (``ObjectiveConfig.splittable``) a row
depends only on (seed, objective, clean shard, group, piece), and a part starts on a group
boundary and numbers its documents and groups from the clean shard's start. The one thing a
part cannot know is whether a document before it encodes to no tokens (such a document does
not count towards a group, so the groups after it shift): each part records the empty documents
it saw, and ``misplaced`` names the clean shards where a part other than the last saw one;
``stage.run`` builds those again as one part. Row ``order`` (the sort's tie-breaker) is
``(clean shard << 32) + (part << 24) + row in the part``, in the same order as the row numbers
of the whole shard.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from c4forge.corpus import clean_docs

MIN_PART_DOCUMENTS = 2_048  # 16 groups, about a second of tokenizing: less is not worth a part
PART_ROW_BITS = 24  # rows of one part fit under the part number in ``order``


@dataclass(frozen=True)
class Part:
    """Documents ``start`` to ``stop - 1`` (``stop`` None: to the end) of one clean shard."""

    split: str
    path: str
    index: int = 0
    count: int = 1
    start: int = 0
    stop: int | None = None

    @property
    def clean_index(self) -> int:
        return clean_docs.shard_index(self.path)

    @property
    def tag(self) -> str:
        """What the part adds to its record's and runs' names ("" for a whole clean shard)."""
        return "" if self.count == 1 else f"part{self.index:03d}-of-{self.count:03d}"

    def order_base(self) -> int:
        """``order`` of the part's first row, less the clean shard's bits."""
        return self.index << PART_ROW_BITS if self.count > 1 else 0


def whole(split: str, path: str) -> Part:
    return Part(split, path)


def wholes(clean_files: dict[str, list[str]]) -> list[Part]:
    """Each clean shard as one unit, splits in the given order."""
    return [whole(s, p) for s in clean_files for p in clean_files[s]]


def plan(
    clean_files: dict[str, list[str]],
    sizes: dict[str, int],
    documents: Callable[[str], int],
    workers: int,
    group: int,
) -> list[Part]:
    """The rows step's units: each clean shard in ``round(workers × its share of the bytes)``
    parts (at least one; parts of ``MIN_PART_DOCUMENTS`` or more, cut every ``group``
    documents). ``documents(path)`` is asked only for a file to be cut."""
    items = [(s, p) for s in clean_files for p in clean_files[s]]
    total = sum(sizes[p] for _s, p in items)
    out: list[Part] = []
    for split, path in items:
        count = round(workers * sizes[path] / total) if total > 0 else 1
        if count > 1:
            n = documents(path)
            count = min(count, n // MIN_PART_DOCUMENTS, -(-n // group))
        if count <= 1:
            out.append(whole(split, path))
            continue
        groups = -(-n // group)
        bounds = [k * groups // count * group for k in range(count)]
        for k in range(count):
            stop = bounds[k + 1] if k + 1 < count else None
            out.append(Part(split, path, k, count, bounds[k], stop))
    return out


def misplaced(records: dict[Part, dict]) -> set[tuple[str, str]]:
    """(split, path) of clean shards cut into parts where a part before the last read a
    document that encodes to no tokens: the groups of the parts after it would have shifted."""
    bad = set()
    for part, record in records.items():
        if part.count > 1 and part.index < part.count - 1:
            if record["stats"].get("documents_empty", 0):
                bad.add((part.split, part.path))
    return bad
