"""WARC (HTTP response) input: real crawl WARCs → pages, checked against the derived WET."""

from __future__ import annotations

import gzip
import io
from pathlib import Path

import pytest
from resiliparse.parse.encoding import bytes_to_str, detect_encoding
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from c4forge.corpus.counting import CounterBag
from c4forge.errors import InputError
from c4forge.readers.warc_html import (
    REASONS,
    detect_input_format,
    html_to_text,
    read_path,
    read_warc,
)
from c4forge.readers.wet import page_text, read_wet

DATA = Path(__file__).parent / "data"
WARCS = sorted((DATA / "warc").glob("*.warc.gz"))
DERIVED = (
    Path(__file__).parent.parent
    / "c4forge/data/sample/real-warc-html-to-wet.resiliparse.warc.wet.gz"
)
WET_FILES = sorted((DATA / "wet").glob("*.wet*"))

RECORD_REASONS = (
    "non_conversion",
    "record_too_large",
    "malformed_record",
    "incomplete_record",
    "invalid_utf8",
    "no_url",
    "no_content",
    "no_timestamp",
    "pages",
    *REASONS,
)


def _records_add_up(bag: CounterBag) -> None:
    wet = bag.counts["wet"]
    assert wet["records"] == sum(wet.get(r, 0) for r in RECORD_REASONS), wet


@pytest.mark.parametrize("path", WARCS, ids=lambda p: p.name)
def test_real_warc_pages_and_counters(path: Path) -> None:
    bag = CounterBag()
    pages = list(read_path(str(path), bag))
    _records_add_up(bag)
    assert pages, "every real WARC here holds at least one 200 text/html response"
    assert bag.get("wet", "pages") == len(pages)
    for p in pages:
        assert p.url and not p.url.startswith("<"), p.url  # dolma's `<https://…>` is unwrapped
        assert p.timestamp[:2] in ("19", "20")
        assert p.text and p.text == page_text(p.text)  # §3.9 line building already applied
        assert p.content_type.lower().startswith("text/html")


def test_agrees_with_derived_wet() -> None:
    """The derived WET was made from these responses with resiliparse; our text must match it.

    The only accepted difference is the charset: the derived file decoded every page with
    uchardet alone, we honour the HTTP ``charset`` first. For each differing page we re-derive
    the text with uchardet decoding and require equality, so the cause is proven, not assumed.
    """
    derived = {p.url: p for p in read_wet(DERIVED.open("rb"), DERIVED.name, CounterBag())}
    same = differ = 0
    for path in WARCS:
        raw = _responses(path)
        for page in read_path(str(path), CounterBag()):
            if page.url not in derived:
                continue
            ref = derived[page.url]
            assert page.timestamp == ref.timestamp
            if page.text == ref.text:
                same += 1
                continue
            differ += 1
            body = raw[page.url]
            redo = page_text(html_to_text(bytes_to_str(body, detect_encoding(body))))
            assert redo == ref.text, page.url
    assert same >= 37 and differ <= 2, (same, differ)


def _responses(path: Path) -> dict[str, bytes]:
    """HTML bodies by URL via warcio's own HTTP handling (independent of our parser)."""
    from warcio.archiveiterator import ArchiveIterator

    out: dict[str, bytes] = {}
    with path.open("rb") as f:
        for rec in ArchiveIterator(f):
            if rec.rec_type == "response":
                url = rec.rec_headers.get_header("WARC-Target-URI").strip("<>")
                out[url] = rec.content_stream().read()
    return out


def test_detect_input_format() -> None:
    for path in WARCS:
        assert detect_input_format(str(path)) == "warc"
    for path in WET_FILES:
        assert detect_input_format(str(path)) == "wet"
    assert detect_input_format(str(DERIVED)) == "wet"


def test_wet_given_as_warc_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="looks like a WET file"):
        list(read_warc(DERIVED.open("rb"), DERIVED.name, CounterBag()))


# ---- constructed records: every skip reason -------------------------------------------------

HTML = b"<html><head><title>T</title></head><body><p>Hello there, this is a page.</p></body></html>"


def _warc(records: list[tuple[str, tuple[StatusAndHeaders, bytes]]], *, gz: bool = True) -> bytes:
    """A WARC of `response` records from (HTTP header block, body) pairs, written verbatim."""
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=gz)
    writer.write_record(writer.create_warcinfo_record("x.warc", {"software": "test"}))
    for i, (url, (http, body)) in enumerate(records):
        rec = writer.create_warc_record(
            url,
            "response",
            payload=io.BytesIO(body),
            length=len(body),
            http_headers=http,
            warc_headers_dict={"WARC-Date": f"2024-01-0{i % 9 + 1}T00:00:00Z"},
            warc_content_type="application/http; msgtype=response",
        )
        writer.write_record(rec)
    return buf.getvalue()


def _http(
    status: str, headers: list[tuple[str, str]], body: bytes, protocol: str = "HTTP/1.1"
) -> tuple[StatusAndHeaders, bytes]:
    h = StatusAndHeaders(status, headers + [("Content-Length", str(len(body)))], protocol=protocol)
    return h, body


def test_each_skip_reason_is_counted() -> None:
    gz_body = gzip.compress(HTML, mtime=0)
    records = [
        (
            "http://a.example/ok",
            _http("200 OK", [("Content-Type", "text/html; charset=utf-8")], HTML),
        ),
        (
            "http://a.example/gz",
            _http("200 OK", [("Content-Type", "text/html"), ("Content-Encoding", "gzip")], gz_body),
        ),
        ("http://a.example/404", _http("404 Not Found", [("Content-Type", "text/html")], HTML)),
        ("http://a.example/img", _http("200 OK", [("Content-Type", "image/png")], b"\x89PNG")),
        ("http://a.example/none", _http("200 OK", [], HTML)),
        (
            "http://a.example/bad",
            _http("two hundred", [("Content-Type", "text/html")], HTML, protocol="HTXP/1.1"),
        ),
        (
            "http://a.example/enc",
            _http(
                "200 OK", [("Content-Type", "text/html"), ("Content-Encoding", "compress")], HTML
            ),
        ),
        (
            "http://a.example/empty",
            _http("200 OK", [("Content-Type", "text/html")], b"<html></html>"),
        ),
    ]
    bag = CounterBag()
    pages = list(read_warc(io.BytesIO(_warc(records)), "t.warc.gz", bag))
    assert [p.url for p in pages] == ["http://a.example/ok", "http://a.example/gz"]
    assert pages[0].text == pages[1].text == "Hello there, this is a page."  # no <title>
    wet = bag.counts["wet"]
    assert wet["non_response"] == 1  # warcinfo
    assert wet["http_status"] == 1
    assert wet["non_html"] == 2
    assert wet["bad_http_header"] == 1
    assert wet["undecodable"] == 1
    assert wet["no_content"] == 1
    _records_add_up(bag)


def test_wrong_charset_label_falls_back_to_detection() -> None:
    text = "Grüße aus Köln, schöne Straße. " * 20
    body = f"<html><body><p>{text}</p></body></html>".encode("cp1252")
    records = [
        ("http://b.example/", _http("200 OK", [("Content-Type", "text/html; charset=utf-8")], body))
    ]
    pages = list(read_warc(io.BytesIO(_warc(records)), "t", CounterBag()))
    assert len(pages) == 1 and "Grüße aus Köln" in pages[0].text


def test_undecodable_body_is_skipped_and_counted() -> None:
    # A UTF-16 BOM followed by an unpaired surrogate: no candidate may decode it.
    body = b"\xff\xfe" + b"\x00\xd8" + b"<\x00p\x00>\x00"
    records = [("http://c.example/", _http("200 OK", [("Content-Type", "text/html")], body))]
    bag = CounterBag()
    assert list(read_warc(io.BytesIO(_warc(records)), "t", bag)) == []
    assert bag.get("wet", "undecodable") == 1


def test_truncated_warc_keeps_earlier_pages() -> None:
    records = [
        (f"http://d.example/{i}", _http("200 OK", [("Content-Type", "text/html")], HTML))
        for i in range(5)
    ]
    data = _warc(records)
    bag = CounterBag()
    pages = list(read_warc(io.BytesIO(data[: len(data) - 40]), "cut.warc.gz", bag))
    assert 1 <= len(pages) < 5
    assert bag.get("wet", "truncated_file") == 1
    _records_add_up(bag)


def test_uncompressed_warc_reads_the_same() -> None:
    records = [("http://e.example/", _http("200 OK", [("Content-Type", "text/html")], HTML))]
    a = list(read_warc(io.BytesIO(_warc(records, gz=True)), "a", CounterBag()))
    b = list(read_warc(io.BytesIO(_warc(records, gz=False)), "b", CounterBag()))
    assert a == b and len(a) == 1


def test_leading_blank_lines_are_skipped_as_in_wet() -> None:
    """Both readers share ``wet.iter_records``: blank lines before the first record are
    skipped for a WARC just as for a WET file (the WARC reader used to call such a file
    malformed and read nothing)."""
    records = [("http://f.example/", _http("200 OK", [("Content-Type", "text/html")], HTML))]
    plain = _warc(records, gz=False)
    a_bag, b_bag = CounterBag(), CounterBag()
    a = list(read_warc(io.BytesIO(plain), "a", a_bag))
    b = list(read_warc(io.BytesIO(b"\r\n\r\n" + plain), "b", b_bag))
    assert a == b and len(a) == 1
    assert a_bag.counts == b_bag.counts and b_bag.get("wet", "malformed_file") == 0


# ---- cloud-style paths without a cloud -------------------------------------------------------


def test_beam_filesystem_and_fsspec_memory_paths_read_the_same() -> None:
    """Beam's FileSystems (local backend, the code path gs:// and s3:// take) and an fsspec
    memory:// URL give exactly the pages of a plain local read."""
    import fsspec
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.filesystems import FileSystems

    from c4forge.readers.warc_html import open_input

    path = WARCS[0]
    local = list(read_path(str(path), CounterBag()))
    with FileSystems.open(str(path), compression_type=CompressionTypes.UNCOMPRESSED) as f:
        via_beam = list(read_warc(f, path.name, CounterBag()))
    url = f"memory://c4forge-test/{path.name}"
    with fsspec.open(url, "wb") as f:
        f.write(path.read_bytes())
    try:
        assert detect_input_format(url) == "warc"
        via_memory = list(read_path(url, CounterBag()))
        with open_input(url) as f:
            assert f.read(2) == b"\x1f\x8b"
    finally:
        fsspec.filesystem("memory").rm(url)
    assert local and via_beam == local and via_memory == local
    with pytest.raises(InputError, match="memory://c4forge-test/missing"):
        open_input("memory://c4forge-test/missing.warc.gz")
