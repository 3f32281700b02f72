"""The write-behind thread of the clean shard writer: order, errors, the same gzip bytes."""

from __future__ import annotations

import gzip
import io

import pytest

from c4forge.io.behind import WriteBehind


def _gzip(writes: list[bytes]) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", compresslevel=6, fileobj=out, mtime=0) as gz:
        for b in writes:
            gz.write(b)
    return out.getvalue()


def test_blocks_arrive_in_order_and_gzip_bytes_do_not_change():
    lines = [f'{{"text": "line {i} {"x" * (i % 97)}"}}\n'.encode() for i in range(20_000)]
    got: list[bytes] = []
    with WriteBehind(got.append, block=4096) as w:
        for line in lines:
            w.write(line)
    assert b"".join(got) == b"".join(lines)
    assert all(len(b) >= 4096 for b in got[:-1]) and len(got) > 10
    # gzip's output depends on the bytes, not on how they were split into writes
    assert _gzip(got) == _gzip(lines)


def test_a_consumer_error_reaches_the_writer_and_nothing_hangs():
    def consume(block: bytes) -> None:
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        with WriteBehind(consume, block=10) as w:
            for _ in range(1000):  # more blocks than the queue holds: the writer must not block
                w.write(b"0123456789")
    assert not w._thread.is_alive()


def test_an_error_in_the_writer_stops_the_thread():
    got: list[bytes] = []
    with pytest.raises(ValueError):
        with WriteBehind(got.append, block=10) as w:
            w.write(b"0123456789ab")
            raise ValueError("merge failed")
    assert not w._thread.is_alive()
