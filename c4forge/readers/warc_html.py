"""Read crawl WARC files (HTTP responses) into pages: HTML → text with resiliparse, then §3.9.

Why: users with their own crawls (or Common Crawl WARCs instead of WETs) get the same rules.
Each ``response`` record with HTTP status 200 and ``text/html`` becomes a ``Page`` whose text is
``resiliparse.extract.html2text.extract_plain_text(html, main_content=False, alt_texts=False)``
put through the WET line building of c4_rules.md §3.9 (``wet.page_text``). ``alt_texts=False``:
with it, our text equals the derived WET shipped in ``c4forge/data/sample`` page for page (39 of
39 pages with uchardet decoding); with the 2.x default (``True``) only 19 of 39 agree, because
image alt texts ("Icon - Account", "prof_pic.jpg") become lines.

The gzip decoding, WARC framing checks and record size guard (``wet.iter_records``) and the
URL/date rules (``wet.make_page``) are the WET reader's, so both inputs count damage the same way.

Counters (stage ``wet``; ``REASONS`` below, c4forge extensions in the §13 table of
docs/c4_rules.md, part of the ``wet.records`` identity there):

- ``non_response``: a WARC record that is not a ``response`` (warcinfo, request, metadata,
  resource, revisit …);
- ``bad_http_header``: the HTTP status line or header block cannot be parsed;
- ``http_status``: HTTP status other than 200 (redirects, errors);
- ``non_html``: HTTP ``Content-Type`` missing or not ``text/html``, or a response record that
  is not HTTP at all (WARC ``Content-Type`` other than ``application/http``, e.g. ``text/dns``);
- ``undecodable``: the body cannot be decoded: its transfer/content encoding is broken, or no
  candidate charset (BOM, HTTP header, ``<meta charset>``, uchardet) decodes it strictly.
"""

from __future__ import annotations

import codecs
import io
import re
from collections.abc import Iterator
from typing import BinaryIO

from warcio.bufferedreaders import BufferedReader, ChunkedDataReader
from warcio.statusandheaders import StatusAndHeaders, StatusAndHeadersParser

from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.stages import READ_STAGE
from c4forge.errors import InputError
from c4forge.readers import wet
from c4forge.readers.wet import Page, page_text

STAGE = READ_STAGE
# Record outcomes of crawl WARC input (c4forge extensions of §13): listed in stats.json only
# when one was counted, so a run on WET files lists exactly §13's reasons.
REASONS: tuple[str, ...] = (
    "non_response",
    "bad_http_header",
    "http_status",
    "non_html",
    "undecodable",
)
# The read step of a clean plan (stage ``wet``, either format; ``read_path`` decides per file):
# every record ends once, as a page or a drop; files and records are counted beside them.
READ_FLOW = Flow(
    (wet.RECORD_DROPS[0], *REASONS, *wet.RECORD_DROPS[1:]),
    ("pages",),
    wet.FILE_REASONS,
    title="records → pages",  # the summary names the input formats read (``wet_title``)
    received="records",
    when_counted=REASONS,
    rare=wet.RARE_REASONS,
)
_HTTP_STATUS = StatusAndHeadersParser(["HTTP/1.0", "HTTP/1.1", "HTTP/2", "HTTP/2.0", "HTTP/0.9"])
_CHARSET = re.compile(r"""charset\s*=\s*["']?\s*([^"';\s]+)""", re.IGNORECASE)
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def header_charset(content_type: str | None) -> str | None:
    """The ``charset=`` parameter of a Content-Type value, as written (``None`` if absent)."""
    m = _CHARSET.search(content_type or "")
    return m.group(1) if m else None


def _python_codec(label: str | None) -> str | None:
    """WHATWG label → Python codec (``iso-8859-1`` → ``cp1252`` as browsers do); unknown → None."""
    from resiliparse.parse.encoding import map_encoding_to_html5

    if not label:
        return None
    name = map_encoding_to_html5(label, fallback_utf8=False)
    if name is None:
        return None
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def decode_html(body: bytes, content_type: str | None) -> str | None:
    """The body as text, or ``None`` when no candidate charset decodes it strictly.

    Candidates in order (choice: the HTML5 precedence, then detection): a byte-order mark; the
    HTTP ``charset``; resiliparse's ``detect_encoding(from_html_meta=True)`` (the ``<meta>``
    charset, itself falling back to uchardet); plain uchardet. The first one that decodes
    without error wins, so a wrong label does not turn a page into mojibake when detection
    gets it right, and no page is decoded with replacement characters.
    """
    from resiliparse.parse.encoding import detect_encoding

    for bom, codec in _BOMS:
        if body.startswith(bom):
            try:
                return body[len(bom) :].decode(codec)
            except UnicodeDecodeError:
                return None
    tried: set[str] = set()
    candidates = (
        lambda: _python_codec(header_charset(content_type)),
        lambda: _python_codec(detect_encoding(body, from_html_meta=True)),
        lambda: _python_codec(detect_encoding(body)),
    )
    for candidate in candidates:
        codec = candidate()
        if codec is None or codec in tried:
            continue
        tried.add(codec)
        try:
            return body.decode(codec)
        except (UnicodeDecodeError, LookupError):
            continue
    return None


def html_to_text(html: str) -> str:
    """resiliparse plain text (whole page, no alt texts: see the module docstring)."""
    from resiliparse.extract.html2text import extract_plain_text

    return extract_plain_text(html, main_content=False, alt_texts=False)


def _http_body(http: StatusAndHeaders, stream: BinaryIO) -> bytes:
    """The entity body with chunked transfer and gzip/deflate/br content encoding undone
    (warcio's own ``content_stream`` logic; raises on broken encodings)."""
    encoding: str | None = (http.get_header("Content-Encoding") or "").strip().lower()
    if encoding in ("", "identity"):
        encoding = None
    elif encoding not in BufferedReader.get_supported_decompressors():
        raise ValueError(f"unsupported Content-Encoding {encoding!r}")
    if (http.get_header("Transfer-Encoding") or "").strip().lower() == "chunked":
        reader: BinaryIO = ChunkedDataReader(stream, decomp_type=encoding)
    elif encoding:
        reader = BufferedReader(stream, decomp_type=encoding)
    else:
        return stream.read()
    return reader.read()


_HTTP_HEAD_END = re.compile(rb"\r?\n\r?\n")


def http_head_too_large(payload: bytes) -> bool:
    """Is the HTTP header block at the start of ``payload`` over the WARC header caps (bytes,
    lines, one line)? warcio parses it with the same quadratic continuation-line joining as a
    WARC header (a 4 MiB block of folded lines took minutes), so it is measured first, in
    linear time over at most the cap's bytes."""
    end = _HTTP_HEAD_END.search(payload, 0, wet.HEADER_BLOCK_MAX + 4)
    head = payload[: end.start()] if end else payload[: wet.HEADER_BLOCK_MAX + 1]
    if len(head) > wet.HEADER_BLOCK_MAX or head.count(b"\n") >= wet.HEADER_LINES_MAX:
        return True
    if len(head) <= wet.HEADER_LINE_MAX:
        return False
    return max(map(len, head.split(b"\n"))) > wet.HEADER_LINE_MAX


def response_page(headers: StatusAndHeaders, payload: bytes, count: Count) -> Page | None:
    """One response record → a page, or ``None`` after counting why not."""
    if http_head_too_large(payload):
        count(STAGE, "header_too_large")
        return None
    stream = io.BytesIO(payload)
    try:
        http = _HTTP_STATUS.parse(stream)
    except Exception:  # noqa: BLE001 - warcio raises several types on a broken header block
        count(STAGE, "bad_http_header")
        return None
    status = (http.get_statuscode() or "").strip()
    if not status.isdigit():
        count(STAGE, "bad_http_header")
        return None
    if status != "200":
        count(STAGE, "http_status")
        return None
    content_type = http.get_header("Content-Type") or ""
    if content_type.split(";", 1)[0].strip().lower() != "text/html":
        count(STAGE, "non_html")
        return None
    try:
        body = _http_body(http, stream)
    except Exception:  # noqa: BLE001 - zlib/brotli/chunk errors: the body is not recoverable
        count(STAGE, "undecodable")
        return None
    html = decode_html(body, content_type)
    if html is None:
        count(STAGE, "undecodable")
        return None
    text = page_text(html_to_text(html)) if html.strip() else ""
    return wet.make_page(
        headers, text, count, content_type=content_type, content_length=str(len(body))
    )


def _http_only(headers: StatusAndHeaders) -> str | None:
    """A response record that is not HTTP at all (e.g. Heritrix ``dns:`` responses, WARC
    ``Content-Type: text/dns``) is ``non_html``, decided before its payload is read."""
    warc_ct = (headers.get_header("Content-Type") or "").strip().lower()
    return "non_html" if warc_ct and not warc_ct.startswith("application/http") else None


WARC_RECORDS = wet.RecordKind(
    wanted="response",
    skip_reason="non_response",
    foreign=frozenset({"conversion"}),
    refusal=(
        "{name}: found a WET 'conversion' record where crawl WARC 'response' records were "
        "expected; this looks like a WET file (use --input-format wet or auto)"
    ),
    accept=_http_only,
)


def read_warc(
    stream: BinaryIO,
    name: str,
    count: Count,
    *,
    max_record_bytes: int = wet.DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Page]:
    """Yield the pages of one crawl WARC file, counting every record it skips (stage ``wet``).

    Raises ``InputError`` naming the file when it holds WET ``conversion`` records before any
    response (a WET file given where a WARC was expected).
    """
    for headers, payload in wet.iter_records(
        stream, name, count, kind=WARC_RECORDS, max_record_bytes=max_record_bytes
    ):
        page = response_page(headers, payload, count)
        if page is not None:
            yield page


def open_input(path: str) -> BinaryIO:
    """Open an input as raw bytes (``wet.open_binary``: ``c4forge.io.storage`` dispatches local
    paths, Beam filesystems such as ``gs://``/``s3://`` and, for schemes Beam does not know,
    fsspec's ``memory://``, ``http(s)://`` …); errors name the path."""
    return wet.open_binary(path)


def detect_input_format(path: str, limit: int = 20) -> str:
    """``"warc"`` when the file's first records are HTTP records before any ``conversion``
    record, else ``"wet"`` (also for empty or damaged files: the WET reader counts those)."""
    with open_input(path) as f:
        types = wet.sniff_record_types(f, limit)
    return "warc" if wet.is_crawl_warc(types) else "wet"


def read_pages(
    stream: BinaryIO,
    name: str,
    count: Count,
    *,
    input_format: str,
    max_record_bytes: int = wet.DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Page]:
    """Dispatch one opened file to the WET or WARC reader (``input_format`` resolved already)."""
    if input_format == "warc":
        return read_warc(stream, name, count, max_record_bytes=max_record_bytes)
    if input_format == "wet":
        return wet.read_wet(stream, name, count, max_record_bytes=max_record_bytes)
    raise InputError(f"{name}: unknown input format {input_format!r} (expected wet or warc)")


def read_path(
    path: str,
    count: Count,
    *,
    input_format: str = "auto",
    max_record_bytes: int = wet.DEFAULT_MAX_RECORD_BYTES,
) -> Iterator[Page]:
    """Open ``path`` (local or any Beam filesystem), resolve ``auto`` per file, yield pages."""
    fmt = detect_input_format(path) if input_format == "auto" else input_format
    with open_input(path) as f:
        yield from read_pages(f, path, count, input_format=fmt, max_record_bytes=max_record_bytes)
