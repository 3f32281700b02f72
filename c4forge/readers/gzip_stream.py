"""A multi-member gzip decoder that reports truncation and corruption itself (c4_rules.md §3.2).

Why not ``gzip.GzipFile``: it raises ``EOFError`` on a cut member, and warcio treats that as a
clean end of file, so a whole decoded block is silently lost. Why not warcio's own
decompression: a truncated member just yields a short record with no error. This reader
decodes member by member with ``zlib.decompressobj``, delivers every byte decoded before a
fault, then ends the stream and sets ``.truncated`` (with a human-readable ``.fault``).

Compression is detected from the magic bytes ``1f 8b`` (C1), never from the file name; other
input is passed through unchanged.

With ``resync=True`` (the WARC/WET readers) a damaged member does not end the file: Common Crawl
writes one gzip member per record, so the stream ends a *segment* at the fault, and
``next_segment`` finds the next member (the magic ``1f 8b 08``, verified by decoding it) and goes
on from there. The caller parses each segment on its own; at most the damaged member's record is
lost, and ``damaged_members`` counts the skips.
"""

from __future__ import annotations

import io
import zlib
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b"
MEMBER_MAGIC = b"\x1f\x8b\x08"  # gzip magic + deflate: what a resync scans for
_CHUNK = 1 << 16  # compressed bytes read per step
_MIN_OUT = 1 << 20  # decompressed bytes produced per step at most (bounds memory on bombs)
# Compressed bytes of the current member kept for a resync (the scan restarts just after the
# damaged member's start, since zlib may have read past its true end before failing). A longer
# member keeps only its last bytes: members of Common Crawl files are one record, far smaller.
_RESYNC_WINDOW = 4 << 20
# A candidate member is accepted once this many compressed bytes decode without error (or it
# ends with a good CRC, or the input ends): a false 1f 8b 08 inside deflate data fails far sooner.
_VERIFY_BYTES = 1 << 20


def _read_exactly(raw: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes; fewer only at end of input (raw streams may return short reads)."""
    parts: list[bytes] = []
    got = 0
    while got < n:
        b = raw.read(n - got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


class DecodedStream(io.RawIOBase):
    """Readable binary stream of the decoded bytes of ``raw``.

    Attributes: ``compressed`` (input started with ``1f 8b``), ``members`` (gzip members
    started), ``truncated`` (the input ended inside a member, zlib reported corrupt data, or
    non-gzip bytes followed a member), ``corrupt`` (zlib reported bad data, e.g. a CRC
    mismatch: bytes of the faulty member may be wrong, not just missing), ``fault`` (why),
    ``decoded_bytes`` (delivered so far), ``verified_bytes`` (decoded bytes that belong to
    members whose CRC and length trailer checked out; all bytes for uncompressed input).
    ``truncated`` is only final once the stream has been read to its end.

    ``resync``: a fault on damaged data (not the input's end) ends the current segment only;
    ``next_segment()`` resumes at the next verified member, clearing ``truncated``/``corrupt``
    and counting ``damaged_members``.
    """

    def __init__(self, raw: BinaryIO, *, resync: bool = False) -> None:
        super().__init__()
        self._raw = raw
        head = _read_exactly(raw, 2)
        self.compressed = head == GZIP_MAGIC
        self.members = 0
        self.truncated = False
        self.corrupt = False
        self.fault: str | None = None
        self.decoded_bytes = 0
        self.verified_bytes = 0
        self._produced = 0
        self._input = head  # compressed bytes not yet given to zlib (or passthrough prefix)
        self._pending = memoryview(b"")  # decoded bytes not yet delivered
        self._d: zlib._Decompress | None = None  # current member's decompressor
        self._eof = False
        self._resync = resync
        self.damaged_members = 0
        self._member = bytearray()  # compressed bytes of the current member (resync only)
        self._member_cut = False  # its start fell out of the window
        self._scan: bytes | None = None  # where a resync scan starts, after a damaged member
        self._scan_from = 0
        if resync and not self.compressed and len(head) == 2:
            self._damaged_first_header()

    def _damaged_first_header(self) -> None:
        """A file whose first member's magic was hit: one of ``1f 8b`` intact and the method
        byte ``08`` after it. Read as gzip with that member damaged (resync at the next one),
        not as plain bytes that no longer look like anything."""
        third = _read_exactly(self._raw, 1)
        self._input += third
        head = self._input
        if third == b"\x08" and (head[0] == 0x1F) != (head[1] == 0x8B):
            self.compressed = True
            self.members = 1
            self._fault("gzip header of member 1 is damaged", scan=head, scan_from=1)

    def readable(self) -> bool:
        return True

    def readinto(self, b: bytearray | memoryview) -> int:  # type: ignore[override]
        n = len(b)
        if n == 0:
            return 0
        while not self._pending and not self._eof:
            self._fill(max(n, _MIN_OUT))
        k = min(n, len(self._pending))
        b[:k] = self._pending[:k]
        self._pending = self._pending[k:]
        self.decoded_bytes += k
        return k

    def peek(self, n: int) -> bytes:
        """The next ``n`` decoded bytes (fewer at the end) without consuming them."""
        while len(self._pending) < n and not self._eof:
            before = bytes(self._pending)
            self._pending = memoryview(b"")
            self._fill(_MIN_OUT)
            self._pending = memoryview(before + bytes(self._pending))
        return bytes(self._pending[:n])

    def _set_pending(self, data: bytes) -> None:
        self._pending = memoryview(data)
        self._produced += len(data)
        if not self.compressed:
            self.verified_bytes = self._produced

    def _fault(self, why: str, scan: bytes | None = None, scan_from: int = 0) -> None:
        """End the stream (or, with resync, the segment); ``scan[scan_from:]`` is where a
        resync looks for the next member (``None``: the input itself ended)."""
        self.truncated = True
        self.fault = why
        self._eof = True
        self._scan = scan if self._resync else None
        self._scan_from = scan_from

    def next_segment(self) -> bool:
        """After a segment ended on damaged data, go on at the next verified gzip member.

        Returns ``False`` (the stream stays ended, ``truncated`` set) when no member follows.
        Reads the skipped bytes once, in linear time and bounded memory."""
        if self._scan is None or not self._eof or self._pending:
            return False
        buf = bytearray(self._scan)
        self._scan = None
        pos = self._scan_from
        while True:
            i = buf.find(MEMBER_MAGIC, pos)
            if i < 0:
                more = self._raw.read(_CHUNK)
                if not more:
                    return False
                del buf[: max(0, len(buf) - (len(MEMBER_MAGIC) - 1))]
                buf += more
                pos = 0
                continue
            del buf[:i]
            if self._verify_member(buf):
                break
            pos = 1
        self._input = bytes(buf)
        self._d = None
        self._eof = False
        self.truncated = False
        self.corrupt = False
        self.fault = None
        self.damaged_members += 1
        return True

    def _verify_member(self, buf: bytearray) -> bool:
        """Does ``buf`` start a real gzip member? Decode it (output discarded) until its CRC
        checks out, ``_VERIFY_BYTES`` decode cleanly or the input ends; ``buf`` grows with the
        raw bytes read meanwhile, so nothing read here is lost to the real decode."""
        d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        fed = 0
        while True:
            if fed >= len(buf):
                more = self._raw.read(_CHUNK)
                if not more:
                    return True  # a cut last member: the reader counts the cut record
                buf += more
            chunk = bytes(buf[fed : fed + _CHUNK])
            fed += len(chunk)
            try:
                while chunk:
                    d.decompress(chunk, _MIN_OUT)
                    if d.eof:
                        return True
                    chunk = d.unconsumed_tail
            except zlib.error:
                return False
            if fed >= _VERIFY_BYTES:
                return True

    def _keep_member_bytes(self, data: bytes, consumed: int) -> None:
        """Remember the compressed bytes zlib consumed for this member (resync only)."""
        if not self._resync:
            return
        self._member += data[:consumed]
        over = len(self._member) - _RESYNC_WINDOW
        if over > 0:
            del self._member[:over]
            self._member_cut = True

    def _start_member(self) -> None:
        self._d = zlib.decompressobj(16 + zlib.MAX_WBITS)
        self.members += 1
        self._member = bytearray()
        self._member_cut = False

    def _fill(self, max_out: int) -> None:
        if not self.compressed:
            data = self._input or self._raw.read(_CHUNK)
            self._input = b""
            if data:
                self._set_pending(data)
            else:
                self._eof = True
            return

        if self._d is None:  # between members
            if len(self._input) < 2:
                self._input += _read_exactly(self._raw, _CHUNK)
            if not self._input:
                self._eof = True  # clean end exactly at a member boundary
                return
            if self.members and self._input[:1] == b"\x00":
                # NUL padding between/after members is skipped, as Python's gzip module does.
                self._input = self._input.lstrip(b"\x00")
                return
            if not self._input.startswith(GZIP_MAGIC):
                self._fault(
                    f"bytes after gzip member {self.members} are not a gzip member "
                    f"(starts with {self._input[:4].hex()})",
                    scan=self._input,
                )
                return
            self._start_member()

        d = self._d
        data = self._input or self._raw.read(_CHUNK)
        self._input = b""
        if not data:
            # Input exhausted: flush what zlib still holds (output capped by max_out earlier).
            try:
                out = d.decompress(b"", max_out)
            except zlib.error as e:  # pragma: no cover - zlib reports errors while consuming
                self.corrupt = True
                self._fault(f"corrupt gzip member {self.members}: {e}")
                return
            if out:
                self._set_pending(out)
            if d.eof:
                self.verified_bytes = self._produced
                self._d = None
            elif not out:
                self._fault(f"input ended inside gzip member {self.members}")
            return
        backup = d.copy()
        try:
            out = d.decompress(data, max_out)
        except zlib.error as e:
            self._set_pending(self._salvage(backup, data))
            self.corrupt = True
            # zlib may have read past the member's true end: the next member may start
            # anywhere after this one's first byte.
            self._fault(
                f"corrupt gzip member {self.members}: {e}",
                scan=bytes(self._member) + data,
                scan_from=0 if self._member_cut else 1,
            )
            return
        if out:
            self._set_pending(out)
        if d.eof:
            self.verified_bytes = self._produced
            self._input = d.unused_data
            self._d = None
        else:
            self._input = d.unconsumed_tail
            self._keep_member_bytes(data, len(data) - len(self._input))

    @staticmethod
    def _salvage(d: zlib._Decompress, data: bytes) -> bytes:
        """Re-decode ``data`` a byte at a time to keep every byte zlib produced before the fault
        (a single ``decompress`` call that fails returns nothing). Only runs on corrupt input."""
        out: list[bytes] = []
        for i in range(len(data)):
            try:
                out.append(d.decompress(data[i : i + 1]))
            except zlib.error:
                break
            if d.eof:
                break
        return b"".join(out)


def open_decoded(raw: BinaryIO, *, resync: bool = False) -> DecodedStream:
    """Wrap ``raw`` (compressed or not) as a stream of decoded bytes (see ``DecodedStream``)."""
    return DecodedStream(raw, resync=resync)
