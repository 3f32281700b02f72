"""A WET file whose second record has one huge header line (or a huge header block), read by
``read_wet``, against ``gzip -dc`` of the same file: the reader must skip the record (counted
``header_too_large``) in time linear in the bytes. Real records before and after it (the first
and last records of the bundled derived WET) must come out as pages.

Usage: ``python benchmarks/header_line.py [MiB …] [--block]`` (default 16 48 300). Prints one
JSON line per size: decoded MiB, seconds for ``gzip -dc`` and ``read_wet``, their ratio, counters.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

from c4forge.corpus.counting import CounterBag
from c4forge.readers.wet import read_wet

SAMPLE = (
    Path(__file__).resolve().parents[1]
    / "c4forge/data/sample/real-warc-html-to-wet.resiliparse.warc.wet.gz"
)


def real_records(n: int = 2) -> list[bytes]:
    """The first ``n`` records (one gzip member each) of the derived WET, decompressed."""
    data, out, pos = SAMPLE.read_bytes(), [], 0
    while len(out) < n:
        d = zlib.decompressobj(31)
        out.append(d.decompress(data[pos:]))
        pos = len(data) - len(d.unused_data)
    return out


def huge(mib: int, block: bool) -> bytes:
    """A conversion record with a ``mib`` MiB header line (or block of 35-byte lines)."""
    head = b"WARC/1.0\r\nWARC-Type: conversion\r\nWARC-Target-URI: http://a.example/big\r\n"
    if block:
        head += b"X-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaa\r\n" * ((mib << 20) // 35)
    else:
        head += b"X-Long: " + b"a" * (mib << 20) + b"\r\n"
    body = b"Big page."
    head += b"WARC-Date: 2019-04-18T10:38:25Z\r\nContent-Type: text/plain\r\n"
    return head + f"Content-Length: {len(body)}\r\n\r\n".encode() + body + b"\r\n\r\n"


def main(sizes: list[int], block: bool) -> None:
    first, last = real_records()
    for mib in sizes:
        with tempfile.NamedTemporaryFile(suffix=".wet.gz", delete=False) as f:
            for rec in (first, huge(mib, block), last):
                f.write(gzip.compress(rec, 6))
            path = f.name
        try:
            t = time.perf_counter()
            subprocess.run(f"gzip -dc {path} > /dev/null", shell=True, check=True)
            gunzip = time.perf_counter() - t
            bag = CounterBag()
            t = time.perf_counter()
            with open(path, "rb") as raw:
                pages = sum(1 for _ in read_wet(raw, path, bag))
            read = time.perf_counter() - t
            row = {
                "header": "block" if block else "line",
                "MiB": mib,
                "compressed_bytes": os.path.getsize(path),
                "gzip_dc_s": round(gunzip, 2),
                "read_wet_s": round(read, 2),
                "ratio": round(read / gunzip, 2),
                "pages": pages,
                "wet": bag.counts["wet"],
            }
            print(json.dumps(row), flush=True)
        finally:
            os.unlink(path)


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--block"]
    main([int(a) for a in args] or [16, 48, 300], "--block" in sys.argv)
