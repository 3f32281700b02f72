"""Read Common Crawl WET files into pages (c4_rules.md §3), counting every record it skips.

warcio parses the WARC framing (D2); c4forge's own decoder handles gzip so truncation and
corruption are reported instead of silently shortening the file (C1, §3.2). Memory is bounded
by one record payload: a record is held only until warcio has moved past it (to see whether
it was followed by the record separator, §3.7), and its payload is never larger than
``max_record_bytes`` (C4).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

from warcio.archiveiterator import ArchiveIterator
from warcio.bufferedreaders import DecompressingBufferedReader
from warcio.exceptions import ArchiveLoadFailed
from warcio.recordloader import ArcWarcRecordLoader
from warcio.statusandheaders import StatusAndHeaders, StatusAndHeadersParserException

from c4forge.corpus.counting import Count
from c4forge.corpus.stages import READ_STAGE
from c4forge.corpus.urls import normalize_url
from c4forge.errors import InputError
from c4forge.readers.gzip_stream import DecodedStream, open_decoded

STAGE = READ_STAGE
# Counted per input file and per record (not a page): listed in stats.json, zeros included.
FILE_REASONS: tuple[str, ...] = (
    "files",
    "empty_file",
    "truncated_file",
    "malformed_file",
    "damaged_member",  # a damaged gzip member skipped, reading resumed at the next member
    "records",
)
# How a record ends (each record once): skipped or broken records, or a ``pages`` page.
RECORD_DROPS: tuple[str, ...] = (
    "non_conversion",
    "record_too_large",
    "header_too_large",
    "malformed_record",
    "incomplete_record",
    "invalid_utf8",
    "no_url",
    "no_content",
    "no_timestamp",
)
DEFAULT_MAX_RECORD_BYTES = 64 << 20
# Caps on a record's WARC header: one line, and the block up to its blank line. Real headers are
# a few KB (a long URL tens of KB); past the caps the bytes are skipped unread and the record
# counted ``header_too_large``. Without them warcio's readline is quadratic in a line's length
# (a 300 MB line: many minutes) and a header block could fill memory.
HEADER_LINE_MAX = 256 << 10
HEADER_BLOCK_MAX = 1 << 20
# Lines per header block: warcio joins continuation lines with repeated ``str +=``, quadratic in
# their number (1 MiB of folded lines: seconds; 4 MiB: minutes). Real blocks have tens.
HEADER_LINES_MAX = 1000
# Reasons only damaged input shows: listed in stats.json only when counted (``Flow.rare``).
RARE_REASONS: tuple[str, ...] = ("header_too_large", "damaged_member")
# Record types that mean "this is a crawl WARC, not a WET file" (§3.4 would count them all as
# non_conversion and produce zero pages without telling the user why).
HTTP_RECORD_TYPES = frozenset({"response", "request", "revisit"})
_PARSE_ERRORS = (ArchiveLoadFailed, StatusAndHeadersParserException, ValueError, UnicodeError)


@dataclass(frozen=True)
class Page:
    url: str
    timestamp: str
    text: str
    normalized_url: str
    content_type: str = ""
    content_length: str = ""

    @property
    def text_md5(self) -> str:
        """md5 hex of the text: URL dedup's tie-break (a keys-only ``UrlEntry`` carries it)."""
        import hashlib

        return hashlib.md5(self.text.encode("utf-8")).hexdigest()


class _RawUriLoader(ArcWarcRecordLoader):
    """warcio's loader, minus its URI rewriting: warcio percent-encodes spaces in
    WARC-Target-URI, the reference keeps the header value as written. Brackets (C5) are
    stripped by ``target_uri`` below."""

    def _ensure_target_uri_format(self, rec_headers):  # noqa: ANN001, ANN202 - warcio hook
        return rec_headers.get_header("WARC-Target-URI")


class _BoundedReader(DecompressingBufferedReader):
    """warcio's reader with header lines read in linear time and capped.

    warcio reads every header line with ``readline()``, which grows the line by repeated
    ``bytes +=`` per 16 KiB block: quadratic in the line's length. Here a line is joined once;
    past ``HEADER_LINE_MAX`` the rest of the line is read and dropped; past
    ``HEADER_BLOCK_MAX`` bytes or ``HEADER_LINES_MAX`` lines of one header block (non-blank
    lines since the last blank one) the rest of the block is, keeping only its
    ``Content-Length`` so the payload can still be skipped and the next record found. Either
    way ``oversized`` is set for the caller to count.
    """

    def __init__(self, stream: BinaryIO) -> None:
        super().__init__(stream)
        self.oversized = False
        self._block = 0  # bytes of non-blank lines since the last blank line
        self._lines = 0  # and their number
        self._queued: list[bytes] = []  # lines standing in for a skipped block's end

    def readline(self, length: int | None = None) -> bytes:
        if length is not None:  # bounded by the caller already (chunk-size lines)
            return super().readline(length)
        if self._queued:
            return self._queued.pop(0)
        if self._block > HEADER_BLOCK_MAX or self._lines >= HEADER_LINES_MAX:
            self.oversized = True
            self._block = self._lines = 0
            self._queued = self._skip_block()
            return self._queued.pop(0)
        line = self._line(HEADER_LINE_MAX)
        if line.strip():
            self._block += len(line)
            self._lines += 1
        else:
            self._block = self._lines = 0
        return line

    def _line(self, cap: int) -> bytes:
        parts: list[bytes] = []
        kept = 0
        while True:
            self._fillbuff()
            if self.empty():
                break
            if kept < cap:
                piece = self.buff.readline(cap - kept)
                parts.append(piece)
                kept += len(piece)
            else:
                piece = self.buff.readline()  # past the cap: read and dropped
            if piece.endswith(b"\n"):
                break
        line = parts[0] if len(parts) == 1 else b"".join(parts)
        if kept >= cap and not line.endswith(b"\n"):
            self.oversized = True
            line += b"\r\n"
        return line

    def _skip_block(self) -> list[bytes]:
        """Read and drop the rest of a header block (at a line start) in buffer-sized steps;
        the lines that end it in its place: its last ``Content-Length`` line, if any, and a
        blank line (also at the end of input, where warcio then finds no payload)."""
        carry = b"\n"
        length: bytes | None = None
        while True:
            self._fillbuff()
            if self.empty():
                break
            window = carry + self.buff.read()
            end = _BLOCK_END.search(window)
            for m in _CONTENT_LENGTH.finditer(window, 0, end.end() if end else len(window)):
                length = m.group(1)
            if end:
                self.buff.seek(self.buff.tell() - (len(window) - end.end()))  # not ours
                break
            carry = window[-64:]
        lines = [b"Content-Length: " + length + b"\r\n"] if length is not None else []
        return [*lines, b"\r\n"]


_BLOCK_END = re.compile(rb"\n\r?\n")
_CONTENT_LENGTH = re.compile(rb"\ncontent-length:[ \t]*(\d{1,20})[ \t]*\r?(?=\n)", re.IGNORECASE)


def _archive_iterator(stream: DecodedStream) -> ArchiveIterator:
    # no_record_parse: WET payloads are plain text; HTTP header parsing would only misread
    # them (and crashes on a response record without a target URI).
    it = ArchiveIterator(stream, no_record_parse=True, check_digests=False)
    it.loader = _RawUriLoader(verify_http=False, arc2warc=False)
    it.reader = _BoundedReader(it.fh)  # before the first record is read
    return it


def target_uri(value: str | None) -> str:
    """The ``WARC-Target-URI`` value as the reference keeps it: stripped, ``<…>`` removed."""
    url = (value or "").strip()
    if len(url) >= 2 and url.startswith("<") and url.endswith(">"):
        url = url[1:-1].strip()  # C5: WARC 1.1 draft `<…>` syntax (wget)
    return url


def page_text(payload: str) -> str:
    """§3.9: universal newlines only (``\\r\\n``, ``\\r``, ``\\n``), strip, drop empty, join.

    Not ``str.splitlines``: ``\\v``, ``\\f``, ``\\x1c``–``\\x1e``, ``\\x85``, U+2028/9 stay
    inside lines, as in the reference's text-mode file reading."""
    lines = payload.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(s for s in (line.strip() for line in lines) if s)


def _skip_blank_lines(decoded: DecodedStream) -> int:
    n = 0
    while True:
        head = decoded.peek(1 << 16)
        blank = len(head) - len(head.lstrip(b"\r\n"))
        if blank == 0:
            return n
        decoded.read(blank)
        n += blank


def _looks_like_warc(head: bytes) -> bool:
    """Cheap guard before warcio: a (decoded) WARC starts with ``WARC/`` (blank lines skipped).
    Anything else (an ARC, JSON, HTML, random bytes) would make warcio read header "lines"
    of unbounded length."""
    # A head shorter than "WARC/" (blank or cut file) is left to warcio and the counters.
    return head.startswith(b"WARC/") or b"WARC/".startswith(head)


@dataclass
class _Held:
    """A record whose payload was read but whose trailing separator is not yet verified."""

    headers: StatusAndHeaders
    payload: bytes
    err_count: int
    end_offset: int  # decoded-stream offset just after the payload


class Record(NamedTuple):
    """One whole, verified WARC record: its WARC headers and its raw payload bytes."""

    headers: StatusAndHeaders
    payload: bytes


@dataclass(frozen=True)
class RecordKind:
    """Which records a reader wants (``iter_records``), and what the other record types mean.

    Records whose ``WARC-Type`` is not ``wanted`` are counted under ``skip_reason``; a type in
    ``foreign`` met before the first ``wanted`` record means the file is the other input
    format, and ``refusal`` (formatted with ``name`` and ``type``) becomes an ``InputError``.
    ``accept`` may skip a wanted record from its headers alone, before its payload is read,
    by returning the reason to count (``None`` reads it).
    """

    wanted: str
    skip_reason: str
    foreign: frozenset[str]
    refusal: str
    accept: Callable[[StatusAndHeaders], str | None] | None = None


WET_RECORDS = RecordKind(
    wanted="conversion",
    skip_reason="non_conversion",
    foreign=HTTP_RECORD_TYPES,
    refusal=(
        "{name}: found a WARC '{type}' record where WET 'conversion' records were expected; "
        "this looks like a crawl WARC, not a WET file (use --input-format warc or auto)"
    ),
)


def iter_records(
    stream: BinaryIO,
    name: str,
    count: Count,
    *,
    kind: RecordKind,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Record]:
    """Yield the whole, well-framed records of ``kind`` in one (gzip or plain) WARC file.

    The framing rules of c4_rules.md §3.1–3.7 in one place, for every reader (WET here, crawl
    WARC in ``warc_html``). Counts ``wet.files``, ``records``, ``kind.skip_reason``, what
    ``kind.accept`` returns, ``record_too_large``, ``header_too_large``, ``malformed_record``,
    ``incomplete_record`` and the file-level counters (``damaged_member`` included); the caller
    counts exactly one outcome per yielded record, so ``records`` = the sum of the record
    reasons. A record is yielded only once warcio has moved past it (§3.7), so memory holds one
    payload at a time. A damaged gzip member ends a segment of the file, not the file: reading
    resumes at the next member (``DecodedStream.next_segment``), each segment parsed afresh.
    """
    count(STAGE, "files")
    decoded = open_decoded(stream, resync=True)
    state = _FileState()
    while True:
        state.incomplete = False  # a cut record before a resync is the damaged member's
        yield from _segment_records(decoded, name, count, kind, max_record_bytes, state)
        if state.stop or not decoded.next_segment():
            break
    _finish(
        count,
        records=state.records,
        malformed=state.malformed_file,
        truncated=decoded.truncated or state.incomplete,
        damaged=decoded.damaged_members,
    )


@dataclass
class _FileState:
    """What ``iter_records`` carries from one segment of a file to the next."""

    records: int = 0
    malformed_file: bool = False
    incomplete: bool = False
    seen_wanted: bool = False
    stop: bool = False  # framing lost: no later segment is read


def _segment_records(
    decoded: DecodedStream,
    name: str,
    count: Count,
    kind: RecordKind,
    max_record_bytes: int,
    state: _FileState,
) -> Iterator[Record]:
    """The records of one segment of ``decoded`` (the whole file unless a member was damaged)."""
    base = decoded.decoded_bytes
    # warcio would read leading blank lines as a header-less record that swallows the file.
    skipped = _skip_blank_lines(decoded)
    if not _looks_like_warc(decoded.peek(64)):
        if base == 0 or decoded.peek(1):
            state.malformed_file = True
            state.stop = True
        return
    it = _archive_iterator(decoded)
    reader: _BoundedReader = it.reader
    records_iter = iter(it)
    held: _Held | None = None
    while True:
        reader.oversized = False
        try:
            rec = next(records_iter)
        except StopIteration:
            rec = None
        except _PARSE_ERRORS:
            rec = None
            # A parse error in the tail of a truncated stream, or inside a damaged gzip member,
            # is the damage's doing.
            ended = decoded.truncated and decoded.peek(1) == b""
            if not (ended or _damage_explains(decoded, _position(it, base, skipped))):
                state.malformed_file = True
                state.stop = True
        if held is not None:
            record = _settle(held, it, decoded, count)
            held = None
            if record is not None:
                yield record
        if rec is None:
            break

        state.records += 1
        count(STAGE, "records")
        rec_type = rec.rec_headers.get_header("WARC-Type") or rec.rec_type or ""
        length_header = rec.rec_headers.get_header("Content-Length")
        try:
            length = int(length_header) if length_header is not None else -1
        except ValueError:
            length = -1
        if reader.oversized:
            # A header line or block over the cap: its bytes were skipped unread (linear time).
            count(STAGE, "header_too_large")
            if length < 0:  # the payload's end is unknown: no later record can be found
                state.malformed_file = True
                state.stop = True
                break
            continue
        if rec_type != kind.wanted:
            if rec_type in kind.foreign and not state.seen_wanted:
                raise InputError(kind.refusal.format(name=name, type=rec_type))
            count(STAGE, kind.skip_reason)
            continue
        state.seen_wanted = True
        reason = kind.accept(rec.rec_headers) if kind.accept is not None else None
        if reason is not None:
            count(STAGE, reason)
            continue

        if length < 0:
            ended = it.reader.rem_length() == 0 and decoded.peek(1) == b""
            if ended or _damage_explains(decoded, _position(it, base, skipped)):
                # The input ended inside this record's header block, or the header block lies
                # in a damaged gzip member (its bytes are wrong).
                count(STAGE, "incomplete_record")
                state.incomplete = True
            else:
                # No usable Content-Length: the next record cannot be found (C2, no resync).
                count(STAGE, "malformed_record")
                state.malformed_file = True
                state.stop = True
            break
        if length > max_record_bytes:
            count(STAGE, "record_too_large")  # warcio skips the payload in chunks on advance
            continue

        payload = rec.raw_stream.read()
        if len(payload) < length:
            count(STAGE, "incomplete_record")  # the stream ended inside this record
            state.incomplete = True
            continue
        held = _Held(rec.rec_headers, payload, it.err_count, _position(it, base, skipped))


def _position(it: ArchiveIterator, base: int, skipped: int) -> int:
    """Offset in the decoded stream of what ``it`` reads next (``base``: where its segment
    starts; ``skipped``: blank lines skipped before the iterator took over)."""
    return base + skipped + it.fh.tell() - it.reader.rem_length()


def _damage_explains(decoded: DecodedStream, position: int) -> bool:
    """Was framing lost at ``position`` because that part of the segment lies in a gzip member
    that turned out damaged or cut? Reads the rest of the segment (dropped, linear time) to see
    whether it ends on a fault after the last member that decoded cleanly before ``position``.
    Framing lost inside a good member stays ``malformed``; plain input has no members."""
    if not decoded.compressed:
        return False
    while decoded.read(1 << 20):
        pass
    return decoded.truncated and position > decoded.verified_bytes


def _finish(
    count: Count, *, records: int, malformed: bool, truncated: bool, damaged: int = 0
) -> None:
    # File-level counters are information, not part of the record identity (§13): a file with
    # zero records is `empty_file` whatever the reason; malformed and truncated add to that.
    if records == 0:
        count(STAGE, "empty_file")
    if malformed:
        count(STAGE, "malformed_file")
    if truncated:
        count(STAGE, "truncated_file")
    if damaged:
        count(STAGE, "damaged_member", damaged)


def _settle(
    held: _Held, it: ArchiveIterator, decoded: DecodedStream, count: Count
) -> Record | None:
    """Release a held record once warcio has moved past it, or count why not."""
    if it.err_count > held.err_count:
        # Not followed by the blank-line separator: its Content-Length is suspect (§3.7).
        count(STAGE, "malformed_record")
        return None
    if decoded.corrupt and held.end_offset > decoded.verified_bytes:
        # zlib reported bad data in the member this payload came from: its bytes may be wrong,
        # not merely missing, so treat it like a cut record (choice; §3.6 only names the cut).
        count(STAGE, "incomplete_record")
        return None
    return Record(held.headers, held.payload)


def make_page(
    headers: StatusAndHeaders,
    text: str,
    count: Count,
    *,
    content_type: str,
    content_length: str,
) -> Page | None:
    """§3.10–3.11 for any reader: URL and date from the WARC headers, page text already built
    (§3.9); counts ``no_url`` / ``no_content`` / ``no_timestamp`` in that order, or ``pages``."""
    url = target_uri(headers.get_header("WARC-Target-URI"))  # get_header: first match
    timestamp = headers.get_header("WARC-Date") or ""
    if not url:
        count(STAGE, "no_url")
        return None
    if not text:
        count(STAGE, "no_content")
        return None
    if not timestamp:
        count(STAGE, "no_timestamp")
        return None
    count(STAGE, "pages")
    return Page(
        url=url,
        timestamp=timestamp,
        text=text,
        normalized_url=normalize_url(url),
        content_type=content_type,
        content_length=content_length,
    )


def read_wet(
    stream: BinaryIO,
    name: str,
    count: Count,
    *,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Page]:
    """Yield the pages of one WET file, counting every ``wet.*`` reason (files included).

    Raises ``InputError`` naming the file if it holds HTTP request/response records before any
    conversion record (a crawl WARC given where WET was expected).
    """
    for headers, payload in iter_records(
        stream, name, count, kind=WET_RECORDS, max_record_bytes=max_record_bytes
    ):
        try:
            text = payload.decode("utf-8")  # strict (§3.8)
        except UnicodeDecodeError:
            count(STAGE, "invalid_utf8")
            continue
        page = make_page(
            headers,
            page_text(text),
            count,
            content_type=headers.get_header("Content-Type") or "",
            content_length=headers.get_header("Content-Length") or "",
        )
        if page is not None:
            yield page


def sniff_record_types(stream: BinaryIO, limit: int = 20) -> list[str]:
    """``WARC-Type`` of the first ``limit`` records (gzip or not), payloads skipped unread.

    For input-format detection (WET vs crawl WARC). Stops quietly at a parse error or at the
    end of a truncated file: detection must not fail on damage that ``read_wet`` will count.
    """
    decoded = open_decoded(stream)
    _skip_blank_lines(decoded)
    if not _looks_like_warc(decoded.peek(64)):
        return []
    types: list[str] = []
    it = _archive_iterator(decoded)
    try:
        for rec in it:
            types.append(rec.rec_headers.get_header("WARC-Type") or rec.rec_type or "")
            if len(types) >= limit:
                break
    except _PARSE_ERRORS:
        pass
    return types


def is_crawl_warc(types: list[str]) -> bool:
    """True when HTTP records come before any conversion record (what ``read_wet`` rejects)."""
    for t in types:
        if t == "conversion":
            return False
        if t in HTTP_RECORD_TYPES:
            return True
    return False


def open_binary(path: str) -> BinaryIO:
    """Open any path ``c4forge.io.storage`` reads (local, ``file://``, ``gs://``, ``s3://``,
    ``hdfs://``, fsspec schemes) as raw bytes; the rules and readers import no engine, the
    storage layer does the dispatch.

    Always uncompressed: ``read_wet`` detects gzip from the magic bytes (C1), so a ``.gz``
    name must not make a filesystem decompress it first. Unopenable paths are a user error (C3).
    """
    from c4forge.io.storage import open_read

    try:
        return open_read(path)
    except (OSError, ValueError) as e:
        raise InputError(f"cannot open {path}: {e}") from e
