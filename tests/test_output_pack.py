"""Packed documents and sorted runs: how documents reach the shard writers on every engine.

A packed document round-trips exactly, sorts as the plain one, and shards written from sorted
runs of packed documents (``chunk_runs`` → ``split_run`` → ``write_run_shard``) are
byte-identical, in both formats, to ``write_document_shard`` of the plain documents, on real C4
documents."""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path

import pytest
from clean_fixtures import C4_SAMPLE

from c4forge.clean import output as clean_output
from c4forge.corpus import documents


def _real_docs() -> list[documents.OutDoc]:
    with gzip.open(C4_SAMPLE, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [documents.make_out_doc(r["url"], r["text"], r["date"]) for r in rows]


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
    doc = documents.make_out_doc("https://example.com/päge?q=1", text, timestamp)
    packed = clean_output.pack_doc(doc)
    assert packed[:2] == (doc.url_md5, doc.url)  # the sort key stays plain
    assert isinstance(packed[2], bytes) and zlib.decompress(packed[2])  # zlib payload
    back = clean_output.unpack_doc(packed)
    assert back == doc and type(back) is documents.OutDoc
    assert clean_output.doc_order(packed) == clean_output.doc_order(doc)


def test_long_text_crosses_smaller() -> None:
    doc = documents.make_out_doc("https://example.com/", "the same sentence again. " * 10_000, "t")
    assert len(clean_output.pack_doc(doc)[2]) < len(doc.text) // 20


def test_real_documents_pack_smaller_and_sort_the_same() -> None:
    docs = _real_docs()
    packed = [clean_output.pack_doc(d) for d in docs]
    assert [clean_output.unpack_doc(p) for p in packed] == docs
    assert sum(len(p[2]) for p in packed) < 0.7 * sum(len(d.text.encode()) for d in docs)
    order = sorted(range(len(docs)), key=lambda i: clean_output.doc_order(docs[i]))
    assert sorted(range(len(docs)), key=lambda i: clean_output.doc_order(packed[i])) == order


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_shards_from_sorted_runs_are_byte_identical(tmp_path: Path, fmt: str) -> None:
    """Real C4 documents in 3 train shards, written as every engine writes them (two chunks'
    sorted runs, split by shard, merged by each shard's writer; the empty validation shard
    written on the driver), against ``write_document_shard`` of the plain documents."""
    docs = _real_docs()
    assert len(docs) > 50
    options = {"train": 3, "validation": "auto"}
    before, out, work = (tmp_path / n for n in ("before", "runs", "work"))
    for d in (before, out, work):
        d.mkdir()
    runs = []
    for c, part in enumerate((docs[0::2], docs[1::2][::-1])):  # arrival order is not shard order
        runs += clean_output.chunk_runs((("train", d) for d in part), str(work), f"chunk-{c:05d}")
    totals = [("train", sum(n for _key, (_path, n) in runs))]
    parts: dict[tuple[str, int, int], list] = {}
    for item in runs:
        for key, run in clean_output.split_run(item, None, totals, options=options):
            parts.setdefault(key, []).append(run)
    assert all(len(v) == 2 for v in parts.values())  # every shard merges both chunks' runs
    stats = [
        s
        for key, shard_runs in sorted(parts.items())
        for s in clean_output.write_run_shard(key, shard_runs, None, directory=str(out), fmt=fmt)
    ]
    for key, index, n in clean_output.empty_shards(stats, options):
        stats.append(clean_output.write_document_shard(str(out), key, index, n, [], fmt))
    expected = [
        clean_output.write_document_shard(
            str(before),
            "train",
            i,
            3,
            [d for d in docs if clean_output.shard_of(d.url_md5, 3) == i],
            fmt,
        )
        for i in range(3)
    ]
    expected.append(clean_output.write_document_shard(str(before), "validation", 0, 1, [], fmt))
    assert sorted(stats, key=lambda s: (s["split"], s["index"])) == expected
    for path in before.iterdir():
        assert (out / path.name).read_bytes() == path.read_bytes()
    assert len(list(before.iterdir())) == 4  # an empty validation shard too
