"""The bundled real sample: what `c4forge demo` and the tests feed the pipeline.

Two inputs, both real text (see c4forge/data/sample/SOURCES.md):

* ``real-warc-html-to-wet.resiliparse.warc.wet.gz`` — 191 WET conversion records made from real
  WARC HTML responses (Common Crawl, archive.org, wget crawls).
* ``CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz`` — 697 real Common Crawl pages
  (CC-MAIN-2019-30, every text/html response of one WARC file, text extracted by dolma),
  multilingual: they exercise language ID and give the train split most of its text.
  :func:`dolma_sample_as_wet` wraps them as WET conversion records.
* ``c4-sample.00000-of-00001.json.gz`` — 1,000 real C4 documents. Every one of their URLs
  falls in C4's validation split (md5 % 1000 == 0: they come from c4-validation), so they
  become our validation split too, a real held-out set. :func:`c4_sample_as_wet`
  wraps them as WET conversion records (one gzip member per record, as Common Crawl writes
  them), so they travel the whole cleaning job; a C4 page fed back through the cleaner should
  come out unchanged, which makes this a fidelity check as well as a corpus.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import uuid
from importlib import resources

from c4forge.io.storage import write_bytes

SAMPLE_PACKAGE = "c4forge.data"
DERIVED_WET = "real-warc-html-to-wet.resiliparse.warc.wet.gz"
C4_DOCS = "c4-sample.00000-of-00001.json.gz"
DOLMA_CC = "CC-MAIN-20190717121559-20190717143559-00140.jsonl.gz"


def sample_path(name: str) -> str:
    """Filesystem path of a file in c4forge/data/sample/."""
    return str(resources.files(SAMPLE_PACKAGE).joinpath("sample", name))


def iter_c4_sample() -> list[dict]:
    """The 1,000 real C4 documents ({"text", "url", "date"}), in file order."""
    with gzip.open(sample_path(C4_DOCS), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def c4_docs_to_wet_bytes(docs: list[dict]) -> bytes:
    """Serialise documents as a Common Crawl style WET file (gzip member per record).

    Each record's WARC-Record-ID is a name-based UUID (uuid5) of its URL, date and position
    instead of warcio's random one, so the same documents always give the same bytes (the
    demo's inputs, and every checksum computed from them, are reproducible).
    """
    from warcio.warcwriter import WARCWriter

    out = io.BytesIO()
    writer = WARCWriter(out, gzip=True)
    for position, doc in enumerate(docs):
        payload = doc["text"].encode("utf-8")
        date = doc.get("timestamp") or doc["date"]
        record_id = uuid.uuid5(uuid.NAMESPACE_URL, f"{position}\t{date}\t{doc['url']}")
        headers = [
            ("WARC-Target-URI", doc["url"]),
            ("WARC-Date", date),
            ("WARC-Record-ID", f"<urn:uuid:{record_id}>"),
            ("Content-Type", "text/plain"),
        ]
        record = writer.create_warc_record(
            doc["url"], "conversion", payload=io.BytesIO(payload), warc_headers_dict=dict(headers)
        )
        writer.write_record(record)
    return out.getvalue()


def c4_sample_as_wet(directory: str) -> str:
    """Write (once) the C4 sample as a WET file into ``directory`` and return its path.

    The bytes are deterministic (see :func:`c4_docs_to_wet_bytes`); an existing file is kept.
    """
    path = os.path.join(directory, "c4-sample-as-wet.warc.wet.gz")
    if not os.path.exists(path):
        write_bytes(path, c4_docs_to_wet_bytes(iter_c4_sample()))
    return path


def iter_dolma_sample() -> list[dict]:
    """The 697 real CC-MAIN-2019-30 pages as {"text", "url", "timestamp"} (dolma metadata)."""
    with gzip.open(sample_path(DOLMA_CC), "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    return [
        {"text": r["text"], "url": r["metadata"]["url"], "timestamp": r["metadata"]["warc_date"]}
        for r in rows
    ]


def dolma_sample_as_wet(directory: str) -> str:
    """Write (once) the dolma Common Crawl pages as a WET file and return its path."""
    path = os.path.join(directory, "dolma-cc-main-2019-30-as-wet.warc.wet.gz")
    if not os.path.exists(path):
        write_bytes(path, c4_docs_to_wet_bytes(iter_dolma_sample()))
    return path


def demo_inputs(directory: str) -> list[str]:
    """All WET inputs of the demo (2,588 real pages in three files)."""
    return [sample_path(DERIVED_WET), dolma_sample_as_wet(directory), c4_sample_as_wet(directory)]
