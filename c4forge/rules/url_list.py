"""The WebText-like URL list (``--variant webtextlike --url-list FILE|GLOB``).

TFDS builds ``c4/webtextlike`` by reading OpenWebText's URL files (plain text, one URL per
line; the real list has ~23 M URLs), normalising each URL exactly as pages are normalised for
URL dedup, and co-grouping them with the pages by normalized URL after URL dedup
(``filter_by_webtextlike``): a page whose key has no list entry is dropped, a list entry whose
key has no page is only counted. The list is therefore an input of the job, read *inside* it
and joined as a shuffle; nothing here builds an in-memory set of it.

This module holds the engine-free parts: resolving ``FILE|GLOB``, streaming normalized URLs
out of one file (local or remote; gzip detected from the magic bytes, a damaged gzip is an error, never a
silently shorter list), the driver's one streamed validation pass (sha256 for ``stats.json``,
URL count, "not empty"), and the join decision for one key.
"""

from __future__ import annotations

import glob
import hashlib
import io
import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.documents import Doc
from c4forge.corpus.stages import StageJob
from c4forge.corpus.urls import normalize_url
from c4forge.errors import InputError
from c4forge.readers.gzip_stream import DecodedStream

STAGE = "webtext"
# Page outcomes (each page after URL dedup counted once) and list-side information.
PAGE_REASONS: tuple[str, ...] = ("not_in_list", "passed")
INFO_REASONS: tuple[str, ...] = ("list_urls", "blank_lines", "missing_page")
REASONS: tuple[str, ...] = (*PAGE_REASONS, *INFO_REASONS)
FLOW = Flow(
    PAGE_REASONS[:1], PAGE_REASONS[1:], INFO_REASONS, title="URL list (WebText-like)", detail="list"
)
GLOB_CHARS = "*?["

P = TypeVar("P")


def resolve_url_list(spec: str) -> list[str]:
    """The files of ``--url-list`` (a file, or a glob of files, local or remote), sorted; a
    one-line error when nothing is there."""
    from c4forge.io import storage

    if not spec:
        raise InputError("--variant webtextlike needs --url-list FILE|GLOB (OpenWebText URL files)")
    if storage.is_remote(spec):
        if any(c in spec for c in GLOB_CHARS):
            files = sorted(p for p, _ in storage.match(spec))
            if not files:
                raise InputError(f"--url-list glob {spec!r} matches no file")
            return files
        if not storage.exists(spec):
            raise InputError(f"--url-list {spec} does not exist")
        return [spec]
    path = storage.normalize(spec)
    if any(c in path for c in GLOB_CHARS):
        files = sorted(os.path.abspath(p) for p in glob.glob(path) if os.path.isfile(p))
        if not files:
            raise InputError(f"--url-list glob {spec!r} matches no file")
        return files
    if os.path.isdir(path):
        raise InputError(
            f"--url-list {spec} is a folder; give a file or a glob such as '{path}/*.txt'"
        )
    if not os.path.isfile(path):
        raise InputError(f"--url-list {spec} does not exist")
    return [os.path.abspath(path)]


def _open(path: str) -> io.BufferedIOBase:
    from c4forge.io import storage

    return storage.open_read(path)  # type: ignore[return-value]


def iter_list_urls(path: str, count: Count | None = None) -> Iterator[str]:
    """Normalized URLs of one list file, streamed line by line.

    Lines are stripped (a stray ``\\r`` or space would otherwise never match a page; the
    reference feeds the raw line); blank lines are skipped (``blank_lines``). Each URL goes
    through the same ``normalize_url`` as the pages' URLs. A damaged gzip or a line that is not
    UTF-8 is an ``InputError`` naming the file: a shorter list would silently change the corpus.
    """
    with _open(path) as raw:
        stream = DecodedStream(raw)
        reader = io.BufferedReader(stream, buffer_size=1 << 20)
        for lineno, line in enumerate(reader, 1):
            try:
                url = line.decode("utf-8").strip()
            except UnicodeDecodeError:
                raise InputError(f"--url-list {path}: line {lineno} is not UTF-8") from None
            if not url:
                if count is not None:
                    count(STAGE, "blank_lines")
                continue
            if count is not None:
                count(STAGE, "list_urls")
            yield normalize_url(url)
        if stream.truncated:
            raise InputError(f"--url-list {path} is a damaged gzip file ({stream.fault})")


@dataclass(frozen=True)
class UrlListInfo:
    """What the driver learnt in its one streamed pass (recorded in ``stats.json``)."""

    files: tuple[dict, ...]  # {"path", "bytes", "sha256"} of the raw file bytes, sorted by path
    urls: int  # non-blank lines

    @property
    def sha256(self) -> str:
        """One hash for the whole list: sha256 over the files' sha256 in path order."""
        h = hashlib.sha256()
        for f in self.files:
            h.update(f["sha256"].encode("ascii") + b"\n")
        return h.hexdigest()

    def fingerprint(self) -> dict:
        return {"files": list(self.files), "urls": self.urls, "sha256": self.sha256}


class _HashingReader(io.RawIOBase):
    """Pass-through reader that hashes and counts the raw (compressed) bytes it delivers."""

    def __init__(self, raw: io.BufferedIOBase) -> None:
        super().__init__()
        self._raw = raw
        self.sha256 = hashlib.sha256()
        self.bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray) -> int:  # type: ignore[override]
        data = self._raw.read(len(b))
        n = len(data)
        b[:n] = data
        self.sha256.update(data)
        self.bytes += n
        return n


def inspect_url_list(paths: Sequence[str]) -> UrlListInfo:
    """Validate the whole list before any work starts, in one streamed pass per file: every
    file decodes (gzip intact, UTF-8), and at least one URL exists. Memory stays flat."""
    files = []
    urls = 0
    for path in paths:
        with _open(path) as raw:
            hashing = _HashingReader(raw)
            stream = DecodedStream(io.BufferedReader(hashing, buffer_size=1 << 20))
            reader = io.BufferedReader(stream, buffer_size=1 << 20)
            for lineno, line in enumerate(reader, 1):
                try:
                    text = line.decode("utf-8")
                except UnicodeDecodeError:
                    raise InputError(f"--url-list {path}: line {lineno} is not UTF-8") from None
                if text.strip():
                    urls += 1
            if stream.truncated:
                raise InputError(f"--url-list {path} is a damaged gzip file ({stream.fault})")
            while hashing.readinto(bytearray(1 << 16)):  # bytes after the last gzip member
                pass
        files.append({"path": path, "bytes": hashing.bytes, "sha256": hashing.sha256.hexdigest()})
    if urls == 0:
        raise InputError(f"--url-list {', '.join(paths)} holds no URL (every line is blank)")
    return UrlListInfo(tuple(files), urls)


def webtext_join(pages: Sequence[P], list_entries: int, count: Count) -> P | None:
    """One normalized-URL key after the co-group: the page if the list names it.

    ``pages`` holds at most one page (URL dedup ran before); ``list_entries`` is how many list
    lines normalised to this key (several files may repeat a URL). Page outcomes are
    ``passed`` / ``not_in_list``; a list key without a page counts ``missing_page`` (info).
    """
    if len(pages) > 1:
        raise ValueError(f"{len(pages)} pages share one normalized URL after URL dedup")
    if not pages:
        if list_entries:
            count(STAGE, "missing_page")
        return None
    if not list_entries:
        count(STAGE, "not_in_list")
        return None
    count(STAGE, "passed")
    return pages[0]


# --- the plan's stage: the list read on the workers, co-grouped with the documents ----------


def list_urls(path: str, count: Count) -> Iterator[tuple[str, int]]:
    """One URL-list file → ``(normalized URL, 1)`` per listed URL, streamed."""
    for url in iter_list_urls(path, count):
        yield url, 1


def normalized_url_of(doc: Doc) -> str:
    return doc.normalized_url


def join_listed(
    key: str, locs: Iterable[Any], listed: Iterable[int], count: Count
) -> Iterator[Any]:
    """One normalized URL: the location of its document (at most one) if the list names it."""
    kept = webtext_join(list(locs), sum(listed), count)
    if kept is not None:
        yield kept


def stage(job: StageJob) -> Any:
    """``--variant webtextlike``: the first document stage (the join decides on the normalized
    URL alone, as the reference does)."""
    from c4forge.corpus.stages import ListJoinStage

    if not job.spec.webtext:
        return None
    return ListJoinStage(
        STAGE,
        job.url_list_files,
        list_urls,
        normalized_url_of,
        join_listed,
        "normalized URL",
        flow=FLOW,
    )
