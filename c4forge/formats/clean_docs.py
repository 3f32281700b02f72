"""Read clean documents: our `c4forge clean` output and the AllenAI C4 release files alike.

Both use `c4-{split}.{index:05d}-of-{count:05d}.json.gz` (JSON lines with at least `text` and
`url`), and `c4forge clean --format parquet` writes `.parquet` with the same columns. Downstream
stages (`vocab`, `shards`) only need the file list of one split in index order and a document
iterator, so this module is all they share. Paths of any kind go through ``c4forge.io.storage``.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections.abc import Iterator
from typing import IO, Any

from c4forge.errors import InputError, StorageError
from c4forge.io import storage
from c4forge.io.storage import check_format

CLEAN_STATS_FORMAT = "c4forge.clean.stats"
STATS_NAME = "stats.json"  # a clean output's stats file (its format: CLEAN_STATS_FORMAT)
# The one pattern of clean shard names, for the writer (``clean.output``: which files in an
# output folder are shards) and every reader: ``c4-{split}.{index:05d}-of-{count:05d}.{ext}``,
# the split ``train``/``validation`` or a language's sets (mC4: ``c4-de``, ``c4-de-validation``,
# ``c4-zh-Latn``), ``json.gz`` or ``parquet``: exactly what the writer and the AllenAI release
# name. (The reader once also took ``.json``, digits in the split and short indices: names
# nothing writes, which the writer's stale-shard sweep did not treat as shards.)
SHARD_RE = re.compile(
    r"^c4-(?P<split>[A-Za-z][A-Za-z-]*)\.(?P<index>\d{5,})-of-(?P<count>\d{5,})"
    r"\.(?P<ext>json\.gz|parquet)$"
)


def shard_name(split: str, index: int, count: int, ext: str = "json.gz") -> str:
    """The file name of shard ``index`` of ``count`` of ``split`` (matches ``SHARD_RE``)."""
    return f"c4-{split}.{index:05d}-of-{count:05d}.{ext}"


def _listdir(directory: str) -> list[str]:
    if storage.is_remote(directory):
        try:
            return [p.rsplit("/", 1)[-1] for p, _ in storage.match(directory.rstrip("/") + "/c4-*")]
        except StorageError as err:
            raise InputError(f"cannot list documents folder {directory}: {err}") from err
    directory = storage.normalize(directory)
    if not os.path.exists(directory):
        raise InputError(f"documents folder {directory} does not exist")
    if not os.path.isdir(directory):
        raise InputError(
            f"{directory} is not a folder of c4-{{split}}.NNNNN-of-NNNNN.json.gz files"
        )
    return os.listdir(directory)


def _join(directory: str, name: str) -> str:
    return storage.join(directory, name)


def list_clean_shards(directory: str, split: str) -> list[str]:
    """Paths of `c4-{split}.*` files in index order; [] when the folder has none of that split.

    Refuses a missing folder and an inconsistent set (two shard counts, a duplicated index)
    because silently reading half of a corpus is the failure we most want to avoid.
    """
    found: dict[int, str] = {}
    counts: set[int] = set()
    for name in sorted(_listdir(directory)):
        m = SHARD_RE.match(name)
        if not m or m["split"] != split:
            continue
        index = int(m["index"])
        if index in found:
            raise InputError(
                f"{directory}: two files for {split} shard {index}: {os.path.basename(found[index])}, {name}"
            )
        found[index] = _join(directory, name)
        counts.add(int(m["count"]))
    if len(counts) > 1:
        raise InputError(
            f"{directory}: {split} files disagree on the shard count: {sorted(counts)}"
        )
    return [found[i] for i in sorted(found)]


def shard_index(path: str) -> int:
    """The NNNNN of `c4-{split}.NNNNN-of-MMMMM.*` (0 for a file not named that way)."""
    m = SHARD_RE.match(os.path.basename(path))
    return int(m["index"]) if m else 0


def _open_binary(path: str) -> IO[bytes]:
    if not storage.is_remote(path) and not storage.exists(path):
        raise InputError(f"document file {path} does not exist")
    return storage.open_read(path)


def iter_documents(path: str, start: int = 0, stop: int | None = None) -> Iterator[dict[str, Any]]:
    """Yield each record of a clean file as a dict with a str `text` and `url` ("" if absent);
    with ``start``/``stop``, only documents ``start`` to ``stop - 1`` (a part of the file:
    the documents before it are counted, not decoded, and reading ends at ``stop``).

    A record that is not a JSON object, or whose `text` is not a string, is an input error
    naming file and line: such a file is not a C4 file and guessing would hide it. Empty text is
    valid here; the consumers drop and count empty documents.
    """
    if path.endswith(".parquet"):
        for i, rec in enumerate(_iter_parquet(path)):
            if stop is not None and i >= stop:
                return
            if i >= start:
                yield rec
        return
    with _open_binary(path) as raw:
        lines = gzip_lines(raw) if path.endswith(".gz") else raw
        doc = 0
        try:
            for lineno, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                if stop is not None and doc >= stop:
                    return
                if doc >= start:
                    yield _record(line, path, lineno)
                doc += 1
        except (OSError, EOFError, zlib.error) as err:
            raise InputError(f"{path}: unreadable or truncated file: {err}") from err


GZIP_READ = 1 << 20  # compressed bytes per read of ``gzip_lines``


def gzip_lines(raw: IO[bytes]) -> Iterator[bytes]:
    """The lines of a gzip stream (every member, zero padding skipped), without their ``\\n``.

    Why not ``gzip.GzipFile``: its line iterator costs a Python call chain per line, about
    a fifth of reading a clean shard (a third of the JSON decoding); inflating 1 MiB reads
    and splitting the text costs one call per read. Same strictness: a stream cut inside a
    member raises ``EOFError``, a corrupt one ``zlib.error`` (zlib checks each member's CRC
    and length).
    """
    d: Any = None  # the member being inflated; None between members
    pending: list[bytes] = []  # the text after the last newline (one long line: many parts)
    while True:
        data = raw.read(GZIP_READ)
        if not data:
            break
        out = []
        while data:
            if d is None:
                data = data.lstrip(b"\x00")  # padding between or after members
                if not data:
                    break
                d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out.append(d.decompress(data))
            data = d.unused_data if d.eof else b""
            if d.eof:
                d = None
        block = b"".join(out)
        if b"\n" not in block:
            pending.append(block)
            continue
        lines = b"".join([*pending, block]).split(b"\n")
        pending = [lines.pop()]
        yield from lines
    if d is not None:
        raise EOFError("Compressed file ended before the end-of-stream marker was reached")
    tail = b"".join(pending)
    if tail:
        yield tail


def _record(line: bytes, path: str, lineno: int) -> dict[str, Any]:
    try:
        rec = json.loads(line)
    except ValueError as err:
        raise InputError(f"{path}:{lineno}: not a JSON line ({err})") from err
    if not isinstance(rec, dict):
        raise InputError(f"{path}:{lineno}: expected a JSON object, found {type(rec).__name__}")
    text = rec.get("text")
    if not isinstance(text, str):
        raise InputError(
            f"{path}:{lineno}: record has no string 'text' field (keys: {sorted(rec)})"
        )
    url = rec.get("url")
    rec["url"] = url if isinstance(url, str) else ""
    return rec


def _iter_parquet(path: str) -> Iterator[dict[str, Any]]:
    import pyarrow.parquet as pq

    with _open_binary(path) as raw:
        try:
            table = pq.ParquetFile(raw)
        except Exception as err:
            raise InputError(f"{path}: not a readable Parquet file: {err}") from err
        if "text" not in table.schema_arrow.names:
            raise InputError(f"{path}: Parquet file has no 'text' column")
        row = 0
        for batch in table.iter_batches(batch_size=4096):
            for rec in batch.to_pylist():
                row += 1
                if not isinstance(rec.get("text"), str):
                    raise InputError(f"{path}: row {row}: 'text' is not a string")
                rec["url"] = rec.get("url") or ""
                yield rec


def clean_stats_path(directory: str) -> str:
    return _join(directory, STATS_NAME)


def clean_stats(directory: str) -> dict | None:
    """The clean job's stats.json (format-checked), or None for folders without one (AllenAI C4)."""
    path = clean_stats_path(directory)
    obj = storage.read_json_if_exists(path)
    if obj is None:
        return None
    check_format(obj, path, CLEAN_STATS_FORMAT)
    return obj


def split_characters(stats: dict | None, split: str) -> int | None:
    """`outputs[split].characters` from a stats.json, when present."""
    try:
        return int(stats["outputs"][split]["characters"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None


def file_documents(stats: dict | None) -> dict[str, int]:
    """Documents per clean file name, from a stats.json's ``outputs`` ({} without one)."""
    out: dict[str, int] = {}
    for split in (stats or {}).get("outputs", {}).values():
        for f in split.get("files", []):
            if isinstance(f.get("documents"), int):
                out[f["file"]] = f["documents"]
    return out


def split_documents(stats: dict | None, split: str) -> int | None:
    try:
        return int(stats["outputs"][split]["documents"])  # type: ignore[index]
    except (TypeError, KeyError, ValueError):
        return None
