"""WET reading (c4_rules.md §3): gzip decoding, warcio framing, every wet.* counter."""

from __future__ import annotations

import gzip
import hashlib
import io
import zlib
from pathlib import Path

import pytest
from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from c4forge.corpus.counting import CounterBag
from c4forge.errors import InputError
from c4forge.readers.gzip_stream import open_decoded
from c4forge.readers.wet import (
    Page,
    RecordKind,
    is_crawl_warc,
    iter_records,
    open_binary,
    page_text,
    read_wet,
    sniff_record_types,
)
from c4forge.rules.lines import length_filter

ROOT = Path(__file__).resolve().parents[1]
WET_DIR = ROOT / "tests" / "data" / "wet"
CC_2014 = WET_DIR / "CC-MAIN-20140820021334-00006-ip-10-180-136-8.ec2.internal.warc.wet"
WHIRLWIND = WET_DIR / "whirlwind.warc.wet.gz"
DERIVED = ROOT / "c4forge" / "data" / "sample" / "real-warc-html-to-wet.resiliparse.warc.wet.gz"
SYNTHETIC = ROOT / "tests" / "data" / "synthetic"
WARC_DIR = ROOT / "tests" / "data" / "warc"

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
)


def read_all(data: bytes, **kw) -> tuple[list[Page], CounterBag]:
    bag = CounterBag()
    pages = list(read_wet(io.BytesIO(data), "test.wet", bag, **kw))
    return pages, bag


def assert_conserved(bag: CounterBag, pages: list[Page]) -> None:
    """§13: every record read is accounted for by exactly one reason."""
    assert bag.get("wet", "records") == sum(bag.get("wet", r) for r in RECORD_REASONS)
    assert bag.get("wet", "pages") == len(pages)
    assert bag.get("wet", "files") == 1


def conversion(
    url: str | None,
    payload: bytes,
    date: str | None = "2019-04-18T10:38:25Z",
    extra: list[tuple[str, str]] | None = None,
) -> tuple[list[tuple[str, str]], bytes]:
    headers = [("WARC-Type", "conversion")]
    if url is not None:
        headers.append(("WARC-Target-URI", url))
    if date is not None:
        headers.append(("WARC-Date", date))
    headers += extra or []
    headers.append(("Content-Type", "text/plain"))
    return headers, payload


def write_wet(records: list[tuple[list[tuple[str, str]], bytes]], *, gz: bool = True) -> bytes:
    """A WET file written by warcio's own writer (one gzip member per record when gz)."""
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=gz)
    info = writer.create_warcinfo_record("test.warc.wet", {"isPartOf": "TEST"})
    writer.write_record(info)
    for headers, payload in records:
        sh = StatusAndHeaders("", headers, protocol="WARC/1.0")
        url = dict(headers).get("WARC-Target-URI", "")
        rec = writer.create_warc_record(
            url, "conversion", payload=io.BytesIO(payload), warc_headers=sh, length=len(payload)
        )
        writer.write_record(rec)
    return buf.getvalue()


def raw_record(headers: list[tuple[str, str]], payload: bytes, length: int | None = None) -> bytes:
    """A hand-framed uncompressed record (for deliberately wrong Content-Length values)."""
    n = len(payload) if length is None else length
    head = "WARC/1.0\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers)
    return head.encode() + f"Content-Length: {n}\r\n\r\n".encode() + payload + b"\r\n\r\n"


def member_ends(data: bytes) -> list[int]:
    """Compressed end offset of each gzip member, found with plain zlib."""
    ends, pos = [], 0
    while pos < len(data):
        d = zlib.decompressobj(31)
        d.decompress(data[pos:])
        pos = len(data) - len(d.unused_data)
        ends.append(pos)
    return ends


# --------------------------------------------------------------------------- gzip stream


def test_decoder_multi_member_equals_gzip_module():
    data = DERIVED.read_bytes()
    s = open_decoded(io.BytesIO(data))
    out = s.read()
    assert out == gzip.decompress(data)
    assert s.compressed and not s.truncated and s.fault is None
    assert s.members == 191  # Common Crawl layout: one member per record
    assert s.verified_bytes == len(out)


def test_decoder_single_member_and_passthrough():
    plain = CC_2014.read_bytes()
    s = open_decoded(io.BytesIO(gzip.compress(plain)))
    assert s.read() == plain and s.members == 1 and not s.truncated
    s = open_decoded(io.BytesIO(plain))  # no 1f 8b: passed through, whatever the name
    assert s.read() == plain and not s.compressed and not s.truncated


@pytest.mark.parametrize("fraction", [0.001, 0.33, 0.5, 0.9, 0.9999])
def test_decoder_reports_truncation_and_keeps_prefix(fraction):
    data = DERIVED.read_bytes()
    full = gzip.decompress(data)
    cut = data[: int(len(data) * fraction)]
    s = open_decoded(io.BytesIO(cut))
    out = s.read()
    assert s.truncated and "ended inside" in s.fault
    assert full.startswith(out)
    # Everything Python's gzip module can decode from the cut bytes is delivered too.
    d = zlib.decompressobj(31)
    salvage = b""
    rest = cut
    while rest:
        salvage += d.decompress(rest)
        rest = d.unused_data
        if d.eof and rest:
            d = zlib.decompressobj(31)
    assert len(out) == len(salvage)


def test_decoder_reports_corruption():
    data = bytearray(DERIVED.read_bytes())
    data[len(data) // 2] ^= 0xFF
    s = open_decoded(io.BytesIO(bytes(data)))
    out = s.read()
    full = gzip.decompress(DERIVED.read_bytes())
    assert s.truncated and s.corrupt and "corrupt" in s.fault
    assert 0 < s.verified_bytes <= len(out)
    assert out[: s.verified_bytes] == full[: s.verified_bytes]


def test_decoder_trailing_garbage_and_padding():
    data = WHIRLWIND.read_bytes()
    full = gzip.decompress(data)
    s = open_decoded(io.BytesIO(data + b"\x00" * 100))  # NUL padding: fine, like gzip
    assert s.read() == full and not s.truncated
    s = open_decoded(io.BytesIO(data + b"not gzip"))
    assert s.read() == full and s.truncated and "not a gzip member" in s.fault


def test_decoder_bounds_output_per_read():
    bomb = gzip.compress(b"a" * (64 << 20))  # 64 MiB from ~65 KB
    s = open_decoded(io.BytesIO(bomb))
    total = 0
    while chunk := s.read(1 << 16):
        assert len(chunk) <= 1 << 16
        assert len(s._pending) <= 2 << 20  # never more than ~one step of decoded bytes held
        total += len(chunk)
    assert total == 64 << 20 and not s.truncated


# --------------------------------------------------------------------------- genuine WET files


def test_genuine_cc_2014_wet_uncompressed():
    pages, bag = read_all(CC_2014.read_bytes())
    assert_conserved(bag, pages)
    assert bag.counts["wet"] == {"files": 1, "records": 4, "non_conversion": 1, "pages": 3}
    p = pages[0]
    assert p.url == "http://0pointer.de/photos/?gallery=Australia&photo=496"
    assert p.normalized_url == "0pointer.de/photos/?gallery=Australia&photo=496"
    assert p.timestamp == "2014-08-21T05:52:58Z"
    assert p.content_type == "text/plain" and p.content_length == "629"
    assert p.text.startswith("Photos\n[ style: dark classic gorilla ]\nPhoto Gallery\n")


def test_genuine_cc_2024_wet_gzip_matches_payload():
    data = WHIRLWIND.read_bytes()
    pages, bag = read_all(data)
    assert_conserved(bag, pages)
    assert bag.counts["wet"] == {"files": 1, "records": 2, "non_conversion": 1, "pages": 1}
    (p,) = pages
    assert p.url == "https://an.wikipedia.org/wiki/Escopete"
    # The text is the record payload after §3.9 (checked against an independent split).
    raw = gzip.decompress(data).split(b"Content-Length: 4456\r\n", 1)[1]
    body = raw.split(b"\r\n\r\n", 1)[1][:4456].decode("utf-8")
    expected = "\n".join(x.strip() for x in body.splitlines(keepends=False) if x.strip())
    assert p.text == expected


def test_derived_wet_191_records():
    pages, bag = read_all(DERIVED.read_bytes())
    assert_conserved(bag, pages)
    assert bag.get("wet", "records") == 191 and len(pages) == 191
    assert all(p.text and p.url and p.timestamp for p in pages)
    assert all("\r" not in p.text and "\n\n" not in p.text for p in pages)


def test_open_binary_local_and_errors(tmp_path):
    with open_binary(str(WHIRLWIND)) as f:
        assert f.read(2) == b"\x1f\x8b"  # raw bytes: never decompressed by the opener
    with open_binary(WHIRLWIND.as_uri()) as f:
        assert f.read(2) == b"\x1f\x8b"
    with pytest.raises(InputError, match="cannot open"):
        open_binary(str(tmp_path / "missing.wet.gz"))


def test_open_binary_beam_filesystem(tmp_path):
    """A path with a scheme goes through Beam's FileSystems, asking for raw bytes (a .gz name
    must not make Beam decompress it). Beam ships no scheme that works offline besides local
    files, so register a LocalFileSystem under a test scheme."""
    from apache_beam.io.filesystem import CompressionTypes
    from apache_beam.io.localfilesystem import LocalFileSystem

    calls = []

    class SchemeLocal(LocalFileSystem):
        @classmethod
        def scheme(cls):
            return "c4forgetest"

        def open(
            self, path, mime_type="application/octet-stream", compression_type=CompressionTypes.AUTO
        ):
            calls.append(compression_type)
            return super().open(path[len("c4forgetest://") :], mime_type, compression_type)

    target = tmp_path / "copy.warc.wet.gz"
    target.write_bytes(WHIRLWIND.read_bytes())
    path = f"c4forgetest://{target}"
    with open_binary(path) as f:
        pages = list(read_wet(f, path, CounterBag()))
    assert [p.url for p in pages] == ["https://an.wikipedia.org/wiki/Escopete"]
    assert calls == [CompressionTypes.UNCOMPRESSED]
    with pytest.raises(InputError, match="cannot open"):
        open_binary("c4forgetest:///nonexistent/dir/x.wet.gz")


# --------------------------------------------------------------------------- damaged input


@pytest.mark.parametrize("fraction", [0.0005, 0.25, 0.5, 0.75, 0.999])
def test_truncated_gzip_keeps_earlier_records(fraction):
    data = DERIVED.read_bytes()
    full, _ = read_all(data)
    pages, bag = read_all(data[: int(len(data) * fraction)])
    assert_conserved(bag, pages)
    assert bag.get("wet", "truncated_file") == 1
    assert bag.get("wet", "malformed_file") == 0  # the cut explains any parse failure
    assert pages == full[: len(pages)]
    # Independent expectation: the derived file has one gzip member per record, so every
    # member that ends before the cut gives its page (the cut member's too if only its
    # trailer was cut).
    complete = sum(1 for end in member_ends(data) if end <= int(len(data) * fraction))
    assert complete <= len(pages) <= complete + 1


def test_truncated_inside_payload_is_incomplete_record():
    # Hex digests compress poorly, so the last 1000 bytes lie inside this payload.
    payload = " ".join(hashlib.sha256(str(i).encode()).hexdigest() for i in range(3000)).encode()
    data = write_wet(
        [
            conversion("http://a.example/1", b"First page."),
            conversion("http://a.example/2", payload),
        ]
    )
    # Cut inside the second record's member, well inside its payload.
    pages, bag = read_all(data[: len(data) - 1000])
    assert_conserved(bag, pages)
    assert [p.url for p in pages] == ["http://a.example/1"]
    assert bag.get("wet", "incomplete_record") == 1
    assert bag.get("wet", "truncated_file") == 1


def test_uncompressed_file_cut_inside_payload():
    data = CC_2014.read_bytes()
    pages, bag = read_all(data[: len(data) - 200])
    assert_conserved(bag, pages)
    assert bag.get("wet", "incomplete_record") == 1 and bag.get("wet", "truncated_file") == 1
    assert len(pages) == 2


def test_corrupt_gzip_member_is_skipped_and_reading_resumes():
    # Real WET (one gzip member per record) with one byte flipped mid-file: only the damaged
    # member's record is lost; every intact record after it is kept (before: ~100 lost).
    data = bytearray(DERIVED.read_bytes())
    full, _ = read_all(bytes(data))
    data[len(data) // 2] ^= 0xFF
    pages, bag = read_all(bytes(data))
    assert_conserved(bag, pages)
    assert bag.get("wet", "damaged_member") == 1
    assert bag.get("wet", "truncated_file") == 0 and bag.get("wet", "malformed_file") == 0
    assert bag.get("wet", "incomplete_record") + bag.get("wet", "malformed_record") == 1
    assert len(pages) == len(full) - 1
    lost = [i for i, p in enumerate(full) if p not in pages]
    assert pages == full[: lost[0]] + full[lost[0] + 1 :]


def test_empty_file_and_empty_gzip():
    for data in (b"", gzip.compress(b""), b"\r\n\r\n"):
        pages, bag = read_all(data)
        assert pages == []
        assert bag.counts["wet"] == {"files": 1, "empty_file": 1}


def test_not_a_warc_is_malformed_file():
    pages, bag = read_all(gzip.compress(b'{"text": "a json line"}\n' * 10))
    assert pages == []
    assert bag.get("wet", "malformed_file") == 1 and bag.get("wet", "empty_file") == 1


@pytest.mark.parametrize("name", ["cc_0.warc.wet", "cc_1.warc.wet", "sample.warc.wet"])
def test_synthetic_fakes_with_wrong_lengths_are_malformed(name):
    """C2: TFDS's fake WETs and the cc_net sample fail right after their warcinfo record."""
    pages, bag = read_all((SYNTHETIC / name).read_bytes())
    assert_conserved(bag, pages)
    assert pages == []
    assert bag.counts["wet"] == {"files": 1, "records": 1, "non_conversion": 1, "malformed_file": 1}


def test_record_not_followed_by_separator_is_malformed_record():
    good = raw_record(
        [
            ("WARC-Type", "conversion"),
            ("WARC-Target-URI", "http://b.example/"),
            ("WARC-Date", "2019-04-18T10:38:25Z"),
        ],
        b"Second page text.",
    )
    bad_payload = b"First page text.\nlast line"
    bad = raw_record(
        [
            ("WARC-Type", "conversion"),
            ("WARC-Target-URI", "http://a.example/"),
            ("WARC-Date", "2019-04-18T10:38:25Z"),
        ],
        bad_payload,
        length=len(bad_payload) - 4,
    )
    pages, bag = read_all(bad + good)
    assert_conserved(bag, pages)
    assert [p.url for p in pages] == ["http://b.example/"]
    assert bag.get("wet", "malformed_record") == 1
    assert bag.get("wet", "malformed_file") == 0


def test_missing_content_length_ends_file():
    rec = (
        b"WARC/1.0\r\nWARC-Type: conversion\r\nWARC-Target-URI: http://a.example/\r\n"
        b"WARC-Date: 2019-04-18T10:38:25Z\r\n\r\nSome text.\r\n\r\n"
    )
    pages, bag = read_all(rec)
    assert_conserved(bag, pages)
    assert pages == [] and bag.get("wet", "malformed_record") == 1
    assert bag.get("wet", "malformed_file") == 1


def test_record_too_large_with_small_limit():
    pages, bag = read_all(WHIRLWIND.read_bytes(), max_record_bytes=4455)
    assert_conserved(bag, pages)
    assert pages == [] and bag.get("wet", "record_too_large") == 1
    pages, bag = read_all(WHIRLWIND.read_bytes(), max_record_bytes=4456)  # equal is fine
    assert len(pages) == 1


def test_invalid_utf8_skips_only_that_record():
    data = write_wet(
        [
            conversion("http://a.example/1", b"caf\xe9 latin-1 text"),
            conversion("http://a.example/2", "café in UTF-8".encode()),
        ]
    )
    pages, bag = read_all(data)
    assert_conserved(bag, pages)
    assert [p.text for p in pages] == ["café in UTF-8"]
    assert bag.get("wet", "invalid_utf8") == 1


def test_validation_order_no_url_no_content_no_timestamp():
    data = write_wet(
        [
            conversion(None, b"text without url"),
            conversion("", b""),  # empty url and empty text: no_url wins (reference order)
            conversion("http://a.example/empty", b"  \r\n\t\n"),  # only blank lines
            conversion("http://a.example/nodate", b"text", date=None),
            conversion("http://a.example/ok", b"text"),
        ]
    )
    pages, bag = read_all(data)
    assert_conserved(bag, pages)
    assert [p.url for p in pages] == ["http://a.example/ok"]
    assert bag.get("wet", "no_url") == 2
    assert bag.get("wet", "no_content") == 1
    assert bag.get("wet", "no_timestamp") == 1


def test_target_uri_brackets_are_stripped_c5():
    data = write_wet([conversion("<https://www.semanticscholar.org/about/>", b"text")])
    (p,), _ = read_all(data)
    assert p.url == "https://www.semanticscholar.org/about/"
    assert p.normalized_url == "semanticscholar.org/about"


def test_target_uri_kept_verbatim_otherwise():
    # warcio would percent-encode the space; the reference keeps the header as written.
    data = write_wet([conversion("http://a.example/x y", b"text")])
    (p,), _ = read_all(data)
    assert p.url == "http://a.example/x y"


def test_page_text_universal_newlines_only():
    payload = "  a\r\nb\rc\n\n d \x0b e\x0c\x1c\x1d\x1e\x85\u2028\u2029f \r\n\r\n"
    assert page_text(payload) == "a\nb\nc\nd \x0b e\x0c\x1c\x1d\x1e\x85\u2028\u2029f"
    assert page_text("a\r\r\nb") == "a\nb"
    data = write_wet([conversion("http://a.example/", payload.encode())])
    (p,), _ = read_all(data)
    assert p.text == page_text(payload)


def test_warc_and_content_lines_are_kept_d2():
    body = b"WARC/1.0 is a format.\nContent-Length: 12 is a header.\nNormal line."
    (p,), _ = read_all(write_wet([conversion("http://a.example/", body)]))
    assert p.text.split("\n") == [
        "WARC/1.0 is a format.",
        "Content-Length: 12 is a header.",
        "Normal line.",
    ]


def test_50mb_line_is_one_long_page_dropped_by_length():
    big = b"word " * (10 << 20)  # a single 50 MiB line
    data = write_wet(
        [
            conversion("http://a.example/1", b"Small page."),
            conversion("http://a.example/big", big),
            conversion("http://a.example/2", b"After the big one."),
        ]
    )
    bag = CounterBag()
    kept = [
        p.url for p in read_wet(io.BytesIO(data), "big.wet.gz", bag) if length_filter(p.text, bag)
    ]
    assert kept == ["http://a.example/1", "http://a.example/2"]
    assert bag.get("wet", "pages") == 3
    assert bag.get("length", "too_long_page") == 1 and bag.get("length", "passed") == 2


# --------------------------------------------------------------------------- WARC given as WET


@pytest.mark.parametrize(
    "name", ["whirlwind.warc.gz", "mini.warc.gz", "sample-0000.warc.gz", "warcfile.warc.gz"]
)
def test_crawl_warc_raises_input_error(name):
    path = WARC_DIR / name
    with open_binary(str(path)) as f:
        types = sniff_record_types(f)
    assert types[0] == "warcinfo" and is_crawl_warc(types)
    with open_binary(str(path)) as f, pytest.raises(InputError) as e:
        list(read_wet(f, str(path), CounterBag()))
    assert str(path) in str(e.value) and "conversion" in str(e.value)


def test_sniff_wet_files():
    with open_binary(str(WHIRLWIND)) as f:
        assert sniff_record_types(f) == ["warcinfo", "conversion"]
    with open_binary(str(DERIVED)) as f:
        types = sniff_record_types(f, limit=5)
    assert types == ["conversion"] * 5 and not is_crawl_warc(types)
    assert sniff_record_types(io.BytesIO(b"")) == []


def test_iter_records_yields_exact_payloads_and_counts_framing():
    """The shared record API (also under ``warc_html.read_warc``): wanted records come out as
    (WARC headers, payload bytes) unchanged, whatever their text; ``accept`` skips by header;
    the caller's one outcome per record completes the identity."""
    payloads = [b"caf\xc3\xa9 one", b"\xff\xfe not utf-8", b"   ", b"skip me"]
    records = [conversion(f"http://g.example/{i}", p) for i, p in enumerate(payloads)]
    kind = RecordKind(
        wanted="conversion",
        skip_reason="non_conversion",
        foreign=frozenset(),
        refusal="{name}: {type}",
        accept=lambda h: "no_url" if h.get_header("WARC-Target-URI").endswith("/3") else None,
    )
    bag = CounterBag()
    got = list(iter_records(io.BytesIO(write_wet(records)), "t.wet", bag, kind=kind))
    assert [payload for _, payload in got] == payloads[:3]
    assert [h.get_header("WARC-Target-URI") for h, _ in got] == [
        f"http://g.example/{i}" for i in range(3)
    ]
    assert bag.counts["wet"] == {"files": 1, "records": 5, "non_conversion": 1, "no_url": 1}
