"""Damaged crawl files: a bad gzip member is skipped to the next member, header lines and header
blocks are capped in linear time, and files that are not regular files are refused."""

from __future__ import annotations

import gzip
import io
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from c4forge.corpus.counting import CounterBag, Flow, listed_reasons
from c4forge.errors import InputError
from c4forge.io.inputs import resolve_inputs
from c4forge.readers import wet as wet_module
from c4forge.readers.gzip_stream import open_decoded
from c4forge.readers.warc_html import READ_FLOW, read_warc
from c4forge.readers.wet import read_wet

ROOT = Path(__file__).resolve().parents[1]
# Real WET, one gzip member per record (191 records): c4forge/data/sample/SOURCES.md.
DERIVED = ROOT / "c4forge" / "data" / "sample" / "real-warc-html-to-wet.resiliparse.warc.wet.gz"
WHIRLWIND = ROOT / "tests" / "data" / "wet" / "whirlwind.warc.wet.gz"
CRAWL_WARC = ROOT / "tests" / "data" / "warc" / "warcfile.warc.gz"


def read_all(data: bytes, reader=read_wet) -> tuple[list, CounterBag]:
    bag = CounterBag()
    return list(reader(io.BytesIO(data), "test.wet.gz", bag)), bag


def conserved(bag: CounterBag, pages: list) -> bool:
    outcomes = sum(bag.get("wet", r) for r in READ_FLOW.outcomes)
    return bag.get("wet", "records") == outcomes and bag.get("wet", "pages") == len(pages)


def member_starts(data: bytes) -> list[int]:
    """Compressed start offset of each gzip member, found with plain zlib."""
    starts, pos = [], 0
    while pos < len(data):
        starts.append(pos)
        d = zlib.decompressobj(31)
        d.decompress(data[pos:])
        pos = len(data) - len(d.unused_data)
    return starts


@pytest.fixture(scope="module")
def intact() -> tuple[bytes, list]:
    data = DERIVED.read_bytes()
    pages, _ = read_all(data)
    assert len(pages) == 191
    return data, pages


# --------------------------------------------------------------------------- damaged members


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.5, 0.72, 0.95])
@pytest.mark.parametrize("span", [1, 64])
def test_damaged_member_costs_at_most_its_record(intact, fraction, span):
    data, full = intact
    damaged = bytearray(data)
    at = int(len(data) * fraction)
    for i in range(at, at + span):
        damaged[i] ^= 0xA5
    pages, bag = read_all(bytes(damaged))
    assert conserved(bag, pages)
    assert bag.get("wet", "damaged_member") == 1
    assert bag.get("wet", "truncated_file") == bag.get("wet", "malformed_file") == 0
    # Only the damaged member's record is lost; every other record is kept, in order, intact.
    assert len(pages) == len(full) - 1
    lost = next(i for i, (a, b) in enumerate(zip(full, pages + [None])) if a != b)
    assert pages == full[:lost] + full[lost + 1 :]
    starts = member_starts(data)
    assert starts[lost] <= at < starts[lost + 1]  # the record whose member holds the damage


def test_damaged_member_header_record_never_seen(intact):
    # The damage hits a member's gzip magic: that record is never parsed (not a `record`),
    # the skip is counted, and every other record is kept.
    data, full = intact
    starts = member_starts(data)
    damaged = bytearray(data)
    damaged[starts[100]] ^= 0xFF
    pages, bag = read_all(bytes(damaged))
    assert conserved(bag, pages)
    assert bag.get("wet", "damaged_member") == 1 and bag.get("wet", "records") == 190
    assert pages == full[:100] + full[101:]


def test_several_damaged_members(intact):
    data, full = intact
    starts = member_starts(data)
    damaged = bytearray(data)
    for k in (10, 11, 150):  # two neighbours and one far off
        damaged[(starts[k] + starts[k + 1]) // 2] ^= 0x5A
    pages, bag = read_all(bytes(damaged))
    assert conserved(bag, pages)
    # Two adjacent damaged members are one damaged stretch: one skip, both records lost.
    assert bag.get("wet", "damaged_member") == 2
    assert pages == full[:10] + full[12:150] + full[151:]


def test_damaged_last_member_is_a_truncated_file(intact):
    data, full = intact
    starts = member_starts(data)
    damaged = bytearray(data)
    damaged[(starts[-1] + len(data)) // 2] ^= 0xFF
    pages, bag = read_all(bytes(damaged))
    assert conserved(bag, pages)
    assert bag.get("wet", "truncated_file") == 1 and bag.get("wet", "damaged_member") == 0
    assert pages == full[:-1]


def test_crawl_warc_damaged_member_resyncs():
    data = CRAWL_WARC.read_bytes()
    full, _ = read_all(data, read_warc)
    starts = member_starts(data)
    damaged = bytearray(data)
    damaged[(starts[3] + starts[4]) // 2] ^= 0xFF  # a request/response near the start
    pages, bag = read_all(bytes(damaged), read_warc)
    assert conserved(bag, pages)
    assert bag.get("wet", "damaged_member") == 1
    assert len(full) - 1 <= len(pages) <= len(full)
    assert all(p in full for p in pages)


def test_decoder_segments_resume_at_next_member(intact):
    data, _ = intact
    full = gzip.decompress(data)
    starts = member_starts(data)
    damaged = bytearray(data)
    damaged[starts[50] + 40] ^= 0xFF
    s = open_decoded(io.BytesIO(bytes(damaged)), resync=True)
    first = s.read()
    assert s.truncated and s.corrupt
    assert s.next_segment() and not s.truncated
    rest = s.read()
    assert not s.truncated and s.damaged_members == 1 and not s.next_segment()
    decoded_before_51 = len(gzip.decompress(data[: starts[51]]))
    assert full.startswith(first[: s.verified_bytes])
    assert rest == full[decoded_before_51:]
    # Without resync (other readers of gzip), the stream still ends at the fault.
    s = open_decoded(io.BytesIO(bytes(damaged)))
    assert s.read() == first and s.truncated and not s.next_segment()


def test_decoder_garbage_with_no_member_after_it():
    data = WHIRLWIND.read_bytes()
    s = open_decoded(io.BytesIO(data + b"not gzip" * 1000), resync=True)
    assert s.read() == gzip.decompress(data)
    assert s.truncated and not s.next_segment() and s.damaged_members == 0


def test_rare_reasons_listed_only_when_counted():
    flow = Flow(
        ("a", "header_too_large"),
        ("kept",),
        ("damaged_member",),
        rare=("header_too_large", "damaged_member"),
    )
    accounts = [("wet", flow)]
    assert listed_reasons(accounts, {"wet": {"a": 3}}) == {"wet": ("a", "kept")}
    assert listed_reasons(accounts, {"wet": {"damaged_member": 1}}) == {
        "wet": ("damaged_member", "a", "kept")
    }
    assert set(wet_module.RARE_REASONS) <= set(READ_FLOW.listed)


# --------------------------------------------------------------------------- header caps


def with_header(record: bytes, header: bytes, *, last: bool = False) -> bytes:
    """``record`` (one whole WARC record) with ``header`` lines added to its header block."""
    head, sep, rest = record.partition(b"\r\n\r\n")
    if last:
        return head + b"\r\n" + header + sep + rest
    status, _, fields = head.partition(b"\r\n")
    return status + b"\r\n" + header + fields + sep + rest


def members(data: bytes) -> list[bytes]:
    starts = member_starts(data) + [len(data)]
    return [gzip.decompress(data[a:b]) for a, b in zip(starts, starts[1:])]


@pytest.mark.parametrize("gz", [True, False])
def test_oversized_header_line_is_a_counted_skip(intact, gz):
    # A 3 MiB header line (over HEADER_LINE_MAX) in a real record: before, warcio read it in
    # quadratic time and the record became a page with a 3 MiB URL or header.
    data, full = intact
    records = members(data)
    records[5] = with_header(records[5], b"X-Long: " + b"a" * (3 << 20) + b"\r\n")
    pages, bag = read_all(b"".join(gzip.compress(r) if gz else r for r in records))
    assert conserved(bag, pages)
    assert bag.get("wet", "header_too_large") == 1
    assert pages == full[:5] + full[6:]


@pytest.mark.parametrize("content_length_first", [True, False])
def test_oversized_header_block_keeps_the_records_after_it(intact, content_length_first):
    # 3 MiB of short header lines: over HEADER_BLOCK_MAX; the record's Content-Length comes
    # before the padding or after it (then it is found while the rest of the block is skipped).
    data, full = intact
    records = members(data)
    pad = b"X-Pad: " + b"b" * 40 + b"\r\n"
    records[7] = with_header(records[7], pad * ((3 << 20) // len(pad)), last=content_length_first)
    for gz in (True, False):
        damaged = b"".join(gzip.compress(r) if gz else r for r in records)
        pages, bag = read_all(damaged)
        assert conserved(bag, pages)
        assert bag.get("wet", "header_too_large") == 1
        assert pages == full[:7] + full[8:]


def test_oversized_header_block_without_length_ends_the_file_counted(intact):
    data, full = intact
    records = members(data)
    head, sep, rest = records[7].partition(b"\r\n\r\n")
    no_length = b"\r\n".join(h for h in head.split(b"\r\n") if not h.startswith(b"Content-Length"))
    pad = b"X-Pad: " + b"b" * 40 + b"\r\n"
    records[7] = with_header(no_length + sep + rest, pad * ((2 << 20) // len(pad)))
    pages, bag = read_all(b"".join(records))  # uncompressed: no member to resume at
    assert conserved(bag, pages)
    assert bag.get("wet", "header_too_large") == 1 and bag.get("wet", "malformed_file") == 1
    assert pages == full[:7]


def test_header_line_just_under_the_cap_is_read():
    data = WHIRLWIND.read_bytes()
    records = members(data)
    line = b"X-Long: " + b"a" * (wet_module.HEADER_LINE_MAX - 100) + b"\r\n"
    records[-1] = with_header(records[-1], line)
    pages, bag = read_all(b"".join(gzip.compress(r) for r in records))
    assert bag.get("wet", "header_too_large") == 0 and len(pages) == 1


# --------------------------------------------------------------------------- not a regular file


def test_fifo_input_is_refused(tmp_path):
    fifo = tmp_path / "crawl.warc.wet"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        resolve_inputs([str(fifo)])
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "whirlwind.warc.wet.gz").write_bytes(WHIRLWIND.read_bytes())
    os.mkfifo(folder / "more.wet")
    for spec in (str(folder), str(folder / "*.wet*")):
        with pytest.raises(InputError, match="more.wet.*not a regular file"):
            resolve_inputs([spec])


def test_dangling_link_in_a_folder_is_an_error(tmp_path):
    (tmp_path / "whirlwind.warc.wet.gz").write_bytes(WHIRLWIND.read_bytes())
    os.symlink(tmp_path / "gone.wet.gz", tmp_path / "link.wet.gz")
    with pytest.raises(InputError, match="link.wet.gz"):
        resolve_inputs([str(tmp_path)])


def test_fifo_input_from_the_cli_is_one_line(tmp_path):
    fifo = tmp_path / "crawl.warc.wet"
    os.mkfifo(fifo)
    proc = subprocess.run(
        [sys.executable, "-m", "c4forge", "clean", str(fifo), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"c4forge clean: error: input {str(fifo)!r} is not a regular file (a FIFO, socket or "
        "device)"
    ]
    assert not (tmp_path / "out").exists()


def test_many_folded_header_lines_are_capped(intact):
    # warcio joins continuation lines with repeated `str +=`: 1 MiB of them took seconds,
    # 4 MiB minutes. Over HEADER_LINES_MAX lines the rest of the block is skipped.
    data, full = intact
    records = members(data)
    folded = b"X-Folded: start\r\n" + b" a\r\n" * (wet_module.HEADER_LINES_MAX + 10)
    records[3] = with_header(records[3], folded)
    pages, bag = read_all(b"".join(gzip.compress(r) for r in records))
    assert conserved(bag, pages)
    assert bag.get("wet", "header_too_large") == 1
    assert pages == full[:3] + full[4:]


def with_http_header(record: bytes, header: bytes) -> bytes:
    """A WARC response record with ``header`` added to its HTTP header block (Content-Length
    of the WARC record updated)."""
    warc_head, _, rest = record.partition(b"\r\n\r\n")
    payload = rest[: -len(b"\r\n\r\n")]
    status, _, fields = payload.partition(b"\r\n")
    payload = status + b"\r\n" + header + fields
    lines = [
        f"Content-Length: {len(payload)}".encode()
        if h.lower().startswith(b"content-length:")
        else h
        for h in warc_head.split(b"\r\n")
    ]
    return b"\r\n".join(lines) + b"\r\n\r\n" + payload + b"\r\n\r\n"


@pytest.mark.parametrize(
    "header",
    [
        b"X-Folded: start\r\n" + b" a\r\n" * (wet_module.HEADER_LINES_MAX + 10),
        b"X-Long: " + b"a" * (wet_module.HEADER_LINE_MAX + 10) + b"\r\n",
    ],
)
def test_crawl_warc_http_header_over_the_caps_is_a_counted_skip(header):
    data = CRAWL_WARC.read_bytes()
    full, _ = read_all(data, read_warc)
    records = members(data)
    target = next(
        i
        for i, r in enumerate(records)
        if b"WARC-Type: response" in r and full[0].url.encode() in r.split(b"\r\n\r\n", 1)[0]
    )
    records[target] = with_http_header(records[target], header)
    pages, bag = read_all(b"".join(gzip.compress(r) for r in records), read_warc)
    assert conserved(bag, pages)
    assert bag.get("wet", "header_too_large") == 1
    assert pages == full[1:]


def test_clean_cli_on_a_damaged_wet_keeps_every_intact_record(tmp_path, intact):
    """The real CLI on a real WET with a damaged member mid-file and a huge header: exit 0,
    stats.json conserved (the driver checks it) with both skips counted and listed, the
    summary naming the damage; a healthy run's stats.json lists neither reason."""
    import json

    data, _ = intact
    records = members(data)
    records[20] = with_header(records[20], b"X-Long: " + b"a" * (1 << 20) + b"\r\n")
    damaged = bytearray(b"".join(gzip.compress(r) for r in records))
    starts = member_starts(bytes(damaged))
    damaged[(starts[100] + starts[101]) // 2] ^= 0xFF
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "damaged.warc.wet.gz").write_bytes(bytes(damaged))
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "healthy.warc.wet.gz").write_bytes(data)
    runs = {}
    for name in ("in", "ok"):
        out = tmp_path / f"out-{name}"
        proc = subprocess.run(
            [sys.executable, "-m", "c4forge", "clean", str(tmp_path / name), "-o", str(out)],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = (proc, json.loads((out / "stats.json").read_text())["counters"]["wet"])
    proc, wet = runs["in"]
    assert wet["damaged_member"] == 1 and wet["header_too_large"] == 1
    assert wet["records"] == 191 and wet["pages"] == 189
    assert "1 damaged gzip member(s) skipped" in proc.stdout + proc.stderr
    _, healthy = runs["ok"]
    assert "damaged_member" not in healthy and "header_too_large" not in healthy
    assert healthy["pages"] == 191


@pytest.mark.parametrize("at", [0, 1])
def test_damaged_gzip_magic_of_the_first_member(intact, at):
    data, full = intact
    damaged = bytearray(data)
    damaged[at] ^= 0xFF
    pages, bag = read_all(bytes(damaged))
    assert conserved(bag, pages)
    assert bag.get("wet", "damaged_member") == 1 and bag.get("wet", "malformed_file") == 0
    assert pages == full[1:]
    # Plain (uncompressed) input is still passed through unchanged.
    plain = gzip.decompress(data)
    assert open_decoded(io.BytesIO(plain), resync=True).read() == plain
