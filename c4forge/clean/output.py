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
import re
import zlib
from collections.abc import Iterable, Mapping
from typing import IO, Any

from c4forge.corpus import clean_docs
from c4forge.corpus.clean_docs import SHARD_RE
from c4forge.corpus.documents import OutDoc
from c4forge.errors import ConfigError
from c4forge.io import storage
from c4forge.io.behind import WriteBehind
from c4forge.io.pickle_batches import dump_batches, read_batches
from c4forge.rules.split import SPLITS

DOCS_PER_SHARD = 356_000  # C4's average shard size (c4/en 3.0.1: 364.6M docs / 1024 shards)
GZIP_LEVEL = 6
EXTENSIONS = {"jsonl": "json.gz", "parquet": "parquet"}


# --- the packed document: what the sorted runs hold ----------------------------------------------

PACK_LEVEL = 1  # zlib level of the packed payload: the fastest; the shards are gzip level 6
_TS_LEN = 4  # bytes of the timestamp's length prefix in the payload (big-endian)

PackedDoc = tuple[str, str, bytes]  # (url_md5, url, zlib(len(timestamp) + timestamp + text))


def pack_doc(doc: OutDoc) -> PackedDoc:
    """``OutDoc`` → ``(url_md5, url, payload)``, what a sorted run stores (``chunk_runs``).

    Why: the documents are written to storage twice on their way to a shard (a chunk's run,
    then its split by shard) and read back twice, so the payload is compressed once, for every
    engine. zlib level 1: about 3× smaller for page text at a fraction of the time level 6
    takes; the sort key fields
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


def write_document_shard(
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
                # deflate (the step's largest cost) on a second thread; sha256 of the lines
                # here, where the merge leaves room
                with WriteBehind(gz.write) as lines:
                    for doc in ordered:
                        line = json_line(doc)
                        content.update(line)
                        characters += len(doc.text)
                        documents += 1
                        lines.write(line)
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


def owned_shards(directory: str, stats: Mapping[str, Any] | None, has_work: bool) -> set[str]:
    """The shard files in ``directory`` an earlier clean run provably wrote, which this run may
    replace or delete; ``OutputExistsError`` naming the others (an AllenAI C4 download, the
    bundled sample copied there): clean deletes nothing it did not write, as ``shards`` refuses
    a folder of foreign ``.arrow`` files. Proof is the earlier run's ``stats.json`` (its
    ``outputs`` list every file it wrote) or its ``_work/`` (a run killed while writing shards:
    ``_work/`` goes only after stats.json)."""
    from c4forge.errors import OutputExistsError

    present = list_shard_files(directory)
    if has_work:
        return set(present)
    listed = {
        f.get("file")
        for block in ((stats or {}).get("outputs") or {}).values()
        if isinstance(block, Mapping)
        for f in block.get("files") or []
        if isinstance(f, Mapping)
    }
    foreign = sorted(n for n in present if n not in listed)
    if foreign:
        more = f" and {len(foreign) - 1} more" if len(foreign) > 1 else ""
        raise OutputExistsError(
            f"{directory} holds {foreign[0]}{more}, which no earlier clean run here wrote "
            "(no stats.json or _work/ lists it); clean deletes only its own files: move them "
            "away or choose another --output"
        )
    return set(present)


_TMP_RE = re.compile(r"^(?P<name>.+)\.tmp-\d+-[0-9a-f]{8}$")


def own_debris(directory: str, names: Iterable[str] = ()) -> list[str]:
    """The temporary siblings (``storage.tmp_name``) of files clean writes here — shards,
    ``names`` — that a killed run left."""
    own = set(names)
    found = []
    for entry in storage.listdir(directory):
        m = _TMP_RE.match(entry)
        if m and (SHARD_RE.match(m["name"]) or m["name"] in own):
            found.append(entry)
    return found


def remove_own_debris(directory: str, names: Iterable[str] = ()) -> None:
    """Delete ``own_debris``. Only called while this run holds the folder, so no writer of
    them is alive."""
    for entry in own_debris(directory, names):
        storage.remove(storage.join(directory, entry))


def remove_files(directory: str, names: Iterable[str]) -> None:
    """Delete ``names`` in ``directory`` where they exist (a missing file is the normal case)."""
    for name in names:
        storage.remove(storage.join(directory, name))


# --- sorted runs: documents reach the writers through storage, never through a shuffle -------
#
# Why: a shard grouped by a shuffle is one element to the runner (11.6 MB at 10,000 pages, a
# whole 356,000-document shard at crawl scale) and its documents cross the runner's data plane
# as text. Instead the last chunk pass writes the chunk's documents, sorted, into one run per
# output key; a split step cuts each run by shard once the document counts are known; the
# writer of a shard merges its runs (``heapq.merge``: one document per run in memory). Only
# ``(path, documents)`` cross the shuffles. Runs live under ``OUTPUT/_work/`` and are removed
# with it after stats.json; a task never deletes its inputs, and a retried task writes the
# same bytes (pickle of the same packed documents in the same order).

RUN_BATCH = 256  # packed documents per pickle record of a run
Run = tuple[str, int]  # (path, documents)


def write_run(path: str, docs: Iterable[PackedDoc]) -> int:
    """Packed documents (already in ``doc_order``) → a run file, atomically; the count."""
    with storage.atomic_writer(path) as f:
        return dump_batches(f, docs, RUN_BATCH, protocol=4)


def chunk_runs(
    pairs: Iterable[tuple[str, OutDoc]], directory: str, chunk_name: str
) -> Iterable[tuple[str, Run]]:
    """One chunk's ``(output key, OutDoc)`` → one sorted run per output key under
    ``directory``; yields ``(key, (path, documents))``. Holds the chunk's documents (packed)."""
    by_key: dict[str, list[PackedDoc]] = {}
    for key, doc in pairs:
        by_key.setdefault(key, []).append(pack_doc(doc))
    for key, docs in sorted(by_key.items()):
        docs.sort(key=doc_order)
        path = storage.join(directory, f"{chunk_name}.out-{key}.run")
        yield key, (path, write_run(path, docs))


def run_documents(item: tuple[str, Run], count: Any) -> Iterable[tuple[str, int]]:
    """``(key, run)`` → ``(key, documents)`` (summed per key: the shard counts need them)."""
    key, (_path, n) = item
    yield key, n


def split_run(
    item: tuple[str, Run], count: Any, totals: list[tuple[str, int]], *, options: Mapping[str, Any]
) -> Iterable[tuple[tuple[str, int, int], Run]]:
    """A chunk's run of one key → one run per shard of that key (``shard_of``), still sorted;
    yields ``((key, shard, shards), run)``. ``totals``: documents per key of the whole run."""
    key, (path, _n) = item
    n = shard_counts(dict(totals), options)[key]
    stem = path[: -len(".run")]
    parts: dict[int, list[PackedDoc]] = {}
    for doc in read_batches(path):  # one chunk's documents of one key, as ``chunk_runs`` held them
        parts.setdefault(shard_of(doc[0], n), []).append(doc)
    for shard, docs in sorted(parts.items()):
        sub = f"{stem}.{shard:05d}-of-{n:05d}.run"
        yield (key, shard, n), (sub, write_run(sub, docs))


def write_run_shard(
    shard: tuple[str, int, int], runs: Iterable[Run], count: Any, *, directory: str, fmt: str
) -> Iterable[dict]:
    """One shard from the merge of its runs (streamed: one document per run in memory)."""
    import heapq

    key, index, n = shard
    ordered = sorted(runs)
    merged = heapq.merge(*(read_batches(path) for path, _ in ordered), key=doc_order)
    stats = write_document_shard(
        directory, key, index, n, (unpack_doc(d) for d in merged), fmt, True
    )
    expected = sum(m for _, m in ordered)
    if stats["documents"] != expected:
        from c4forge.errors import VerificationError

        raise VerificationError(
            f"{stats['file']}: {expected:,} documents in its runs, {stats['documents']:,} written"
        )
    yield stats


def empty_shards(written: list[dict], options: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    """``(key, index, shards)`` of every shard no document went to (an empty corpus still gets
    its empty shards): the shard counts from the documents written, as the writers had them."""
    totals: dict[str, int] = {}
    for s in written:
        totals[s["split"]] = totals.get(s["split"], 0) + s["documents"]
    counts = shard_counts(totals, options)
    have = {(s["split"], s["index"]) for s in written}
    return [(k, i, n) for k, n in counts.items() for i in range(n) if (k, i) not in have]


def write_shards(engine: Any, runs: Any, job: Any) -> list[dict]:
    """``(output key, run)`` of every chunk (``chunk_runs``) → the shard files, on ``engine``'s
    primitives; returns the per-shard stats. The runs' documents per key are counted, each
    run is split by shard (``split_run``), and each shard's writer merges its runs
    (``write_run_shard``): only ``(path, documents)`` are shuffled. Shards no document went
    to are written empty here, on the driver."""
    import functools

    runs = engine.shared(runs)
    per_key = engine.flat_map(runs, "output/count", run_documents)
    totals = engine.side_list(engine.combine(per_key, "output/totals", sum), "output/totals")
    split = functools.partial(split_run, options=job.output_options)
    parts = engine.flat_map_with(runs, "output/split", split, totals)
    write = functools.partial(write_run_shard, directory=job.output, fmt=job.format)
    stats = list(engine.collect(engine.group(parts, "output/write", write), "output/stats"))
    for key, index, n in empty_shards(stats, job.output_options):
        stats.append(write_document_shard(job.output, key, index, n, [], job.format))
    return stats
