"""Writing C4 shards (c4_rules.md §12, formats.md §1): names, shard assignment, bytes.

Everything here is a plain function so the Beam writer DoFn, the Spark engine and tests produce
the same bytes. Determinism comes from three choices: the shard of a document is
``int(md5(url), 16) % N``; a shard is sorted by ``(md5(url) hex, url)``; gzip gets mtime 0, no
file name and level 6. Files appear under their final name only when complete (temporary
sibling + rename), through ``c4forge.io.storage`` (local files or any Beam filesystem).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import zlib
from collections.abc import Iterable, Mapping
from typing import IO, Any, NamedTuple

from c4forge.errors import ConfigError
from c4forge.formats import clean_docs
from c4forge.formats.clean_docs import SHARD_RE
from c4forge.io import storage
from c4forge.io.storage import md5_hex
from c4forge.rules.split import SPLITS

DOCS_PER_SHARD = 356_000  # C4's average shard size (c4/en 3.0.1: 364.6M docs / 1024 shards)
GZIP_LEVEL = 6
EXTENSIONS = {"jsonl": "json.gz", "parquet": "parquet"}


class OutDoc(NamedTuple):
    """A document ready to write; tuple order is the in-shard sort order."""

    url_md5: str
    url: str
    text: str
    timestamp: str


def make_out_doc(url: str, text: str, timestamp: str) -> OutDoc:
    return OutDoc(md5_hex(url), url, text, timestamp)


# --- the packed document: what crosses the output shuffle ---------------------------------------

PACK_LEVEL = 1  # zlib level of the packed payload: the fastest; the shards are gzip level 6
_TS_LEN = 4  # bytes of the timestamp's length prefix in the payload (big-endian)

PackedDoc = tuple[str, str, bytes]  # (url_md5, url, zlib(len(timestamp) + timestamp + text))


def pack_doc(doc: OutDoc) -> PackedDoc:
    """``OutDoc`` → ``(url_md5, url, payload)``, the value that crosses the output shuffle.

    Why: documents cross one shuffle, into the output shards, and they are most of the
    shuffle bytes of a keys-only run. Spark compresses its shuffle files (lz4 by
    default) but Beam's runners do not compress what crosses a GroupByKey (the DirectRunner
    holds it in memory, Dataflow's shuffle service is billed per byte), and the local engine
    pickles; so the plan compresses the payload once, for every engine. zlib level 1: about
    3× smaller for page text at a fraction of the time level 6 takes; the sort key fields
    (``url_md5``, ``url``) stay plain so ``doc_order`` and a merge of sorted runs read them
    without decompressing. The payload is the timestamp (length-prefixed) then the text, in
    UTF-8 (``surrogatepass``: any ``str`` round-trips; the shard writer decides what is valid).
    """
    ts = doc.timestamp.encode("utf-8", "surrogatepass")
    raw = b"".join(
        (len(ts).to_bytes(_TS_LEN, "big"), ts, doc.text.encode("utf-8", "surrogatepass"))
    )
    return doc.url_md5, doc.url, zlib.compress(raw, PACK_LEVEL)


def unpack_doc(packed: PackedDoc) -> OutDoc:
    """The inverse of ``pack_doc``: exactly the ``OutDoc`` that was packed."""
    url_md5, url, payload = packed
    raw = memoryview(zlib.decompress(payload))
    end = _TS_LEN + int.from_bytes(raw[:_TS_LEN], "big")
    timestamp = str(raw[_TS_LEN:end], "utf-8", "surrogatepass")
    return OutDoc(url_md5, url, str(raw[end:], "utf-8", "surrogatepass"), timestamp)


def shard_name(split: str, index: int, count: int, fmt: str = "jsonl") -> str:
    return clean_docs.shard_name(split, index, count, EXTENSIONS[fmt])


def auto_shards(documents: int) -> int:
    return max(1, math.ceil(documents / DOCS_PER_SHARD))


def parse_shards_option(value: str | int, flag: str) -> str | int:
    """``auto`` or a positive integer; anything else is a ConfigError naming the flag."""
    if isinstance(value, int) or str(value) != "auto":
        try:
            n = int(value)
        except ValueError:
            raise ConfigError(
                f"{flag} must be 'auto' or a positive integer, got {value!r}"
            ) from None
        if n < 1:
            raise ConfigError(f"{flag} must be >= 1, got {n}")
        return n
    return "auto"


def resolve_shards(option: str | int, documents: int) -> int:
    return auto_shards(documents) if option == "auto" else int(option)


def split_kind(key: str) -> str:
    """``train`` or ``validation`` for an output key (``de-validation`` is a validation set)."""
    return "validation" if key == "validation" or key.endswith("-validation") else "train"


def output_keys(docs_per_key: Mapping[str, int], by_language: bool = False) -> list[str]:
    """The shard sets of a run: always ``train`` and ``validation`` (empty ones included);
    by language (``--variant multilingual``), both sets of every language with a document,
    named as the public mC4 release's splits (``de``, ``de-validation``)."""
    if not by_language:
        return list(SPLITS)
    suffix = "-validation"
    langs = sorted({k[: -len(suffix)] if k.endswith(suffix) else k for k in docs_per_key})
    return [k for lang in langs for k in (lang, f"{lang}{suffix}")]


def shard_counts(docs_per_key: Mapping[str, int], options: Mapping[str, Any]) -> dict[str, int]:
    """Shard count of every output key (``options``: ``train`` / ``validation`` as
    ``auto`` or a count, applied to each language's sets; ``by_language``)."""
    keys = output_keys(docs_per_key, bool(options.get("by_language")))
    return {k: resolve_shards(options[split_kind(k)], docs_per_key.get(k, 0)) for k in keys}


def shard_of(url_md5: str, count: int) -> int:
    return int(url_md5, 16) % count


# --- shard assignment: the one implementation every engine calls --------------------------------


def assign_shard(element: tuple[str, OutDoc], shards: Mapping[str, int]) -> tuple:
    """``(output key, OutDoc)`` → ``((output key, shard index), PackedDoc)`` (``shards``: the
    ``shard_counts`` of the run); the document crosses the shuffle packed (``pack_doc``)."""
    key, doc = element
    return (key, shard_of(doc.url_md5, shards[key])), pack_doc(doc)


def shard_markers(shards: Mapping[str, int]) -> list[tuple[tuple[str, int], None]]:
    """One ``((key, index), None)`` per shard, grouped with the documents so that every shard
    is written, an empty one too."""
    return [((key, i), None) for key, n in shards.items() for i in range(n)]


def write_shard_group(
    directory: str,
    fmt: str,
    shards: Mapping[str, int],
    shard: tuple[str, int],
    values: Iterable,
    presorted: bool = False,
) -> dict:
    """One shard's group (packed documents from ``assign_shard`` and its marker) → the file;
    its ``outputs`` entry. ``presorted``: ``values`` already in ``sorted_docs`` order (streamed,
    never a list; documents are unpacked one at a time)."""
    key, index = shard
    docs = (unpack_doc(v) for v in values if v is not None)
    return write_shard(directory, key, index, shards[key], docs, fmt, presorted)


def doc_order(doc: OutDoc | PackedDoc) -> tuple[str, str]:
    """The order of documents in a shard (``sorted_docs``); the same for a packed document,
    whose first two fields are the same plain ``url_md5`` and ``url``."""
    return doc[0], doc[1]


def json_line(doc: OutDoc) -> bytes:
    """One C4 record: keys text, timestamp, url in that order, compact, UTF-8, ``\\n``."""
    obj = {"text": doc.text, "timestamp": doc.timestamp, "url": doc.url}
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def sorted_docs(docs: Iterable[OutDoc]) -> list[OutDoc]:
    return sorted(docs, key=doc_order)


def write_shard(
    directory: str,
    split: str,
    index: int,
    count: int,
    docs: Iterable[OutDoc],
    fmt: str = "jsonl",
    presorted: bool = False,
) -> dict:
    """Write one shard (sorted here, unless ``presorted``: then streamed in the given order,
    a merge of sorted runs) and return its ``outputs`` entry for stats.json.

    ``content_sha256`` is the sha256 of the uncompressed JSONL in both formats, so a Parquet
    run and a JSONL run of the same corpus can be compared, and so can gzip builds.
    """
    name = shard_name(split, index, count, fmt)
    path = storage.join(directory, name)
    ordered: Iterable[OutDoc] = docs if presorted else sorted_docs(docs)
    if fmt != "jsonl":
        ordered = list(ordered)
    content = hashlib.sha256()
    characters = 0
    documents = 0
    with storage.atomic_writer(path) as raw:
        sink = storage.HashingWriter(raw)
        if fmt == "jsonl":
            with gzip.GzipFile(
                filename="", mode="wb", compresslevel=GZIP_LEVEL, fileobj=sink, mtime=0
            ) as gz:
                for doc in ordered:
                    line = json_line(doc)
                    content.update(line)
                    characters += len(doc.text)
                    documents += 1
                    gz.write(line)
        elif fmt == "parquet":
            for doc in ordered:
                content.update(json_line(doc))
                characters += len(doc.text)
                documents += 1
            _write_parquet(ordered, sink)  # type: ignore[arg-type]
        else:
            raise ConfigError(f"unknown output format {fmt!r}")
    return {
        "split": split,
        "index": index,
        "file": name,
        "documents": documents,
        "characters": characters,
        "bytes": sink.size,
        "sha256": sink.sha256.hexdigest(),
        "content_sha256": content.hexdigest(),
    }


def _write_parquet(ordered: list[OutDoc], sink: IO[bytes]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # Column order follows the JSONL key order; pyarrow's defaults otherwise (snappy), which
    # every Parquet reader (datasets, pandas, DuckDB, Spark) understands.
    schema = pa.schema([("text", pa.string()), ("timestamp", pa.string()), ("url", pa.string())])
    table = pa.table(
        {
            "text": [d.text for d in ordered],
            "timestamp": [d.timestamp for d in ordered],
            "url": [d.url for d in ordered],
        },
        schema=schema,
    )
    pq.write_table(table, sink)


def list_shard_files(directory: str) -> list[str]:
    """Base names of existing shard files (any split, count, format) in ``directory``."""
    return [n for n in storage.listdir(directory) if SHARD_RE.match(n)]


def remove_files(directory: str, names: Iterable[str]) -> None:
    """Delete ``names`` in ``directory`` where they exist (a missing file is the normal case)."""
    for name in names:
        storage.remove(storage.join(directory, name))
