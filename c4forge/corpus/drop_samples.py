"""``clean --keep-samples N``: per drop reason, a deterministic sample of what was dropped.

A rule that drops a line or a page reports it next to its counter: ``sample(count, stage,
reason, text, url)``. The ``count`` callback of a run with ``--keep-samples`` keeps, per
``stage/reason``, the ``N`` records ``(hash, text, url)`` with the smallest hash (md5 of the
text and the URL: a property of the item, not of where or when it was seen); callbacks without
sampling ignore it. Partial samples merge with ``merge`` (the smallest ``N`` of the union, each
record once): associative, commutative and idempotent, so the final sample is the same for
every engine, worker count, bundle split, retry or resumed chunk.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

Record = tuple[str, str, str]  # (md5 hex, text, url)
SAMPLES_DIR = "samples"
MAX_TEXT = 20_000  # characters of a sampled page kept (a page can be 190,000)


def key_of(stage: str, reason: str) -> str:
    return f"{stage}/{reason}"


def record(text: str, url: str) -> Record:
    text = text[:MAX_TEXT]
    digest = hashlib.md5(f"{text}\0{url}".encode("utf-8", "surrogatepass")).hexdigest()
    return digest, text, url


def sample(count: Any, stage: str, reason: str, text: str, url: str = "") -> None:
    """Report a dropped item to ``count`` if it samples (a ``SampleCount`` with ``keep > 0``,
    ``--keep-samples``); else nothing."""
    if sampling(count):
        count.sample(stage, reason, text, url)


def add_records(count: Any, samples: Mapping[str, Iterable[Iterable[str]]]) -> None:
    """Samples recorded elsewhere (``{stage/reason: [(hash, text, url)…]}``, a resumed chunk's)
    into ``count``'s sample, when it keeps one."""
    if samples and sampling(count):
        for key, recs in samples.items():
            for rec in recs:
                count.add_record(key, tuple(rec))


def merge(parts: Iterable[Iterable[Record]], n: int) -> tuple[Record, ...]:
    """The ``n`` smallest distinct records of the union of ``parts`` (the combine)."""
    return tuple(sorted({tuple(r) for part in parts for r in part})[:n])


def merge_values(values: Iterable[tuple[Record, ...]], *, n: int) -> tuple[Record, ...]:
    """``merge`` as an engine combine function: values and result are tuples of records."""
    return merge(values, n)


class SampleBag:
    """Per ``stage/reason`` the ``n`` smallest records seen (sorted)."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.by_key: dict[str, list[Record]] = {}

    def add(self, key: str, rec: Record) -> bool:
        """Keep ``rec`` if it is among the ``n`` smallest so far; True when kept."""
        kept = self.by_key.setdefault(key, [])
        if rec in kept or (len(kept) >= self.n and rec >= kept[-1]):
            return False
        bisect.insort(kept, rec)
        del kept[self.n :]
        return True

    def merge(self, other: Mapping[str, Iterable[Iterable[str]]]) -> None:
        for key, recs in other.items():
            for r in recs:
                self.add(key, tuple(r))  # type: ignore[arg-type]

    def as_dict(self) -> dict[str, list[Record]]:
        return {k: list(v) for k, v in sorted(self.by_key.items()) if v}


def write_samples(output: str, samples: Mapping[str, Iterable[Record]], n: int) -> list[str]:
    """``OUTPUT/samples/<stage>.<reason>.jsonl`` (one record a line, hash order) and an
    ``index.json``; returns the file names. Deterministic bytes, atomic writes."""
    import json

    from c4forge.io import storage

    folder = storage.join(output, SAMPLES_DIR)
    storage.rmtree(folder)
    storage.makedirs(folder)
    index: dict[str, Any] = {"n": n, "reasons": {}}
    names = []
    for key in sorted(samples):
        recs = merge([samples[key]], n)
        if not recs:
            continue
        stage, reason = key.split("/", 1)
        name = f"{stage}.{reason.replace(':', '-').replace('/', '-')}.jsonl"
        lines = [
            json.dumps({"hash": h, "url": u, "text": t}, ensure_ascii=False, sort_keys=True)
            for h, t, u in recs
        ]
        storage.write_bytes(storage.join(folder, name), ("\n".join(lines) + "\n").encode())
        index["reasons"][key] = {"stage": stage, "reason": reason, "file": name, "kept": len(recs)}
        names.append(name)
    storage.write_bytes(
        storage.join(folder, "index.json"),
        (json.dumps(index, indent=2, sort_keys=True) + "\n").encode(),
    )
    return names


def read_samples(output: str) -> dict[str, list[dict]]:
    """``{stage/reason: [{"hash", "url", "text"}, …]}`` of a clean output (empty if none)."""
    import json
    import os

    folder = os.path.join(output, SAMPLES_DIR)
    path = os.path.join(folder, "index.json")
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        index = json.load(f)
    out = {}
    for key, info in index["reasons"].items():
        with open(os.path.join(folder, info["file"]), encoding="utf-8") as f:
            out[key] = [json.loads(line) for line in f if line.strip()]
    return out


def sampling(count: Any) -> bool:
    """True when ``count`` is a ``SampleCount`` that keeps samples (rules check once per page,
    not per line). An attribute read, not ``isinstance`` of the protocol: it runs per page."""
    return getattr(count, "keep", 0) > 0


class WithUrl:
    """A ``SampleCount`` whose samples carry the page's URL (the rules see text only)."""

    __slots__ = ("count", "url", "keep")

    def __init__(self, count: Any, url: str) -> None:
        self.count, self.url, self.keep = count, url, getattr(count, "keep", 0)

    def __call__(self, stage: str, reason: str, n: int = 1) -> None:
        self.count(stage, reason, n)

    def sample(self, stage: str, reason: str, text: str, url: str = "") -> None:
        self.count.sample(stage, reason, text, url or self.url)

    def add_record(self, key: str, rec: tuple[str, str, str]) -> None:
        self.count.add_record(key, rec)


def with_url(count: Any, url: str) -> Any:
    """``count`` itself when it does not sample (the default run pays one attribute lookup)."""
    return WithUrl(count, url) if sampling(count) else count
