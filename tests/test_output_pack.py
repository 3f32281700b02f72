"""Packed documents: what crosses the output shuffle on every engine.

A packed document round-trips exactly, sorts as the plain one, and shards written from packed
documents (``assign_shard`` → ``write_shard_group``) are byte-identical, in both formats, to
``write_shard`` of the plain documents (the path before packing), on real C4 documents."""

from __future__ import annotations

import gzip
import heapq
import json
import zlib
from pathlib import Path

import pytest
from clean_fixtures import C4_SAMPLE

from c4forge.clean import output as co


def _real_docs() -> list[co.OutDoc]:
    with gzip.open(C4_SAMPLE, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [co.make_out_doc(r["url"], r["text"], r["date"]) for r in rows]


@pytest.mark.parametrize(
    ("text", "timestamp"),
    [
        ("", "2019-04-18T12:00:00Z"),
        ("Zürich, 東京, emoji 😀, RTL שלום, combining é\n\ttabs", "2019-04-18T12:00:00Z"),
        ("a long page. " * 200_000, ""),  # 2.6 MB of text, an empty timestamp
        ("a lone surrogate \ud800 survives", "ts with ünïcode"),
    ],
)
def test_packed_documents_round_trip_exactly(text: str, timestamp: str) -> None:
    doc = co.make_out_doc("https://example.com/päge?q=1", text, timestamp)
    packed = co.pack_doc(doc)
    assert packed[:2] == (doc.url_md5, doc.url)  # the sort key stays plain
    assert isinstance(packed[2], bytes) and zlib.decompress(packed[2])  # zlib payload
    back = co.unpack_doc(packed)
    assert back == doc and type(back) is co.OutDoc
    assert co.doc_order(packed) == co.doc_order(doc)


def test_long_text_crosses_smaller() -> None:
    doc = co.make_out_doc("https://example.com/", "the same sentence again. " * 10_000, "t")
    assert len(co.pack_doc(doc)[2]) < len(doc.text) // 20


def test_real_documents_pack_smaller_and_sort_the_same() -> None:
    docs = _real_docs()
    packed = [co.pack_doc(d) for d in docs]
    assert [co.unpack_doc(p) for p in packed] == docs
    assert sum(len(p[2]) for p in packed) < 0.7 * sum(len(d.text.encode()) for d in docs)
    order = sorted(range(len(docs)), key=lambda i: co.doc_order(docs[i]))
    assert sorted(range(len(docs)), key=lambda i: co.doc_order(packed[i])) == order


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_shards_from_packed_documents_are_byte_identical(tmp_path: Path, fmt: str) -> None:
    """Real C4 documents in 3 train shards: written as every engine writes them (assigned,
    packed, grouped with the markers, unpacked by ``write_shard_group``), in arrival order and
    as a merge of sorted runs (the local engine), against ``write_shard`` of the plain
    documents."""
    docs = _real_docs()
    assert len(docs) > 50
    shards = {"train": 3, "validation": 1}
    before, grouped, merged = (tmp_path / n for n in ("before", "grouped", "merged"))
    for d in (before, grouped, merged):
        d.mkdir()
    groups: dict[tuple[str, int], list] = {}
    for key, value in co.shard_markers(shards):
        groups[key] = [value]
    for doc in reversed(docs):  # arrival order differs from the shard order
        key, value = co.assign_shard(("train", doc), shards)
        groups[key].append(value)
    for (split, index), values in sorted(groups.items()):
        plain = [co.unpack_doc(v) for v in values if v is not None]
        expected = co.write_shard(str(before), split, index, shards[split], plain, fmt)
        got = co.write_shard_group(str(grouped), fmt, shards, (split, index), values)
        packed = [v for v in values if v is not None]
        runs = [sorted(packed[i::2], key=co.doc_order) for i in range(2)]
        stream = heapq.merge(*runs, key=co.doc_order)
        got_merged = co.write_shard_group(str(merged), fmt, shards, (split, index), stream, True)
        assert got == expected == got_merged
    assert sum(len(v) - 1 for v in groups.values()) == len(docs)
    for path in before.iterdir():
        assert (grouped / path.name).read_bytes() == path.read_bytes()
        assert (merged / path.name).read_bytes() == path.read_bytes()
    assert len(list(before.iterdir())) == 4  # an empty validation shard too
