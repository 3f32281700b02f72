"""An input's content, known without a second read: sha256 of the bytes the reader reads anyway.

Why: an input known only by name and size lets a re-downloaded file of the same size be served
from the old output, or its old work be kept by ``--resume``. Reading every input a second time
to hash it would double the I/O of a job, so the hash rides on the read: inside
``digesting(path)`` every file ``storage.open_read`` opens for ``path`` feeds a digest with the
bytes read at the offset the digest has reached (a reader that sniffs the start and reopens, or
seeks back, hashes nothing twice); ``hexdigest`` reads only the tail a reader did not (one that
stopped at damage), so the result is always the sha256 of the whole file.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar

_CHUNK = 1 << 20
_local = threading.local()
T = TypeVar("T")


class Digest:
    """The sha256 of one file, fed in order by the files opened for it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.h = hashlib.sha256()
        self.upto = 0  # bytes hashed so far: the file's prefix [0, upto)

    def feed(self, offset: int, data: bytes | memoryview) -> None:
        end = offset + len(data)
        if offset <= self.upto < end:
            self.h.update(memoryview(data)[self.upto - offset :])
            self.upto = end

    def hexdigest(self) -> str:
        """The whole file's sha256 (its unread tail read now)."""
        from c4forge.io import storage

        with storage.open_read(self.path) as f:  # not wrapped: this digest is no longer active
            if self.upto:
                f.seek(self.upto)
            while block := f.read(_CHUNK):
                self.h.update(block)
                self.upto += len(block)
        return self.h.hexdigest()


class _DigestingFile:
    """A read-only file that feeds ``digest`` with what is read through it."""

    def __init__(self, raw: IO[bytes], digest: Digest) -> None:
        self._raw = raw
        self._digest = digest
        self._pos = 0

    def read(self, n: int = -1) -> bytes:
        data = self._raw.read(n)
        self._digest.feed(self._pos, data)
        self._pos += len(data)
        return data

    def readinto(self, b: Any) -> int:
        got = self._raw.readinto(b)
        if got:
            self._digest.feed(self._pos, memoryview(b)[:got])
            self._pos += got
        return got or 0

    def readline(self, limit: int = -1) -> bytes:
        data = self._raw.readline(limit)
        self._digest.feed(self._pos, data)
        self._pos += len(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line

    def seek(self, offset: int, whence: int = 0) -> int:
        self._pos = self._raw.seek(offset, whence)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def close(self) -> None:
        self._raw.close()

    def __enter__(self) -> _DigestingFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def _active() -> dict[str, Digest]:
    active = getattr(_local, "active", None)
    if active is None:
        active = _local.active = {}
    return active


def wrap(path: str, f: IO[bytes]) -> IO[bytes]:
    """``f`` (just opened for ``path``) feeding ``path``'s digest when one is active."""
    digest = _active().get(path)
    return f if digest is None else _DigestingFile(f, digest)  # type: ignore[return-value]


@contextlib.contextmanager
def digesting(path: str) -> Iterator[Digest]:
    """Hash ``path`` from the reads of this thread inside the block; call ``hexdigest`` after."""
    digest = Digest(path)
    _active()[path] = digest
    try:
        yield digest
    finally:
        _active().pop(path, None)


def read_hashed(
    read: Callable[[str, Any], Iterable[T]], path: str, count: Any, digests: dict[str, str]
) -> Iterator[T]:
    """``read(path, count)``'s items; when it is exhausted, ``digests[path]`` is the file's
    sha256, computed from that read (``digesting``)."""
    with digesting(path) as digest:
        yield from read(path, count)
    digests[path] = digest.hexdigest()
