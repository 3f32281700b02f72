"""A test-only in-memory Beam ``FileSystem``: a fake bucket for the remote-path tests.

It fakes the storage, not the code under test: c4forge's jobs, ``c4forge.io.storage`` and
Beam's ``FileSystems`` dispatch all run for real. Semantics follow object stores (GCS/S3):
no directories (a "folder" is a key prefix), objects become visible only when their writer is
closed, ``exists`` of a prefix is False, and deleting a missing object is an error (as Beam's
LocalFileSystem does; GCS ignores it, so code that relies on the error would break there).

Beam finds FileSystem subclasses by scheme and refuses a scheme claimed by two classes, so this
module's scheme (``membucket``) differs from the ``memfs`` class that
``tests/test_shards_remote.py`` still defines for itself; both can be imported in one pytest
process. A job must run with one in-process worker (``--workers 1``) to share this memory.
"""

from __future__ import annotations

import io
import threading

from apache_beam.io.filesystem import BeamIOError, FileMetadata, FileSystem

SCHEME = "membucket"


class _Writer(io.BytesIO):
    def __init__(self, fs: type[MemFileSystem], path: str) -> None:
        super().__init__()
        self.fs, self.path = fs, path

    def close(self) -> None:
        if not self.closed:
            with self.fs.lock:
                self.fs.files[self.path] = self.getvalue()
                self.fs.writes.append(self.path)
        super().close()


class MemFileSystem(FileSystem):
    """Objects in a class-level dict (Beam creates a new FileSystem object per call)."""

    files: dict[str, bytes] = {}
    writes: list[str] = []
    lock = threading.Lock()
    # Fault injection: creating an object whose path contains this string fails, as a bucket
    # that stops accepting writes would (used to interrupt a job at a known point).
    fail_create: str | None = None

    @classmethod
    def scheme(cls) -> str:
        return SCHEME

    @classmethod
    def reset(cls) -> None:
        with cls.lock:
            cls.files.clear()
            cls.writes.clear()
            cls.fail_create = None

    @classmethod
    def put(cls, path: str, data: bytes) -> None:
        with cls.lock:
            cls.files[path] = data

    @classmethod
    def under(cls, prefix: str) -> dict[str, bytes]:
        """The objects below ``prefix/``, keyed by their name relative to it."""
        base = prefix.rstrip("/") + "/"
        with cls.lock:
            return {p[len(base) :]: d for p, d in cls.files.items() if p.startswith(base)}

    def join(self, basepath: str, *paths: str) -> str:
        return "/".join([basepath.rstrip("/"), *paths])

    def split(self, path: str) -> tuple[str, str]:
        head, _, tail = path.rpartition("/")
        return head, tail

    def mkdirs(self, path: str) -> None:
        pass

    def has_dirs(self) -> bool:
        return False

    def _list(self, dir_or_prefix: str):
        with self.lock:
            items = sorted(self.files.items())
        for path, data in items:
            if path.startswith(dir_or_prefix):
                yield FileMetadata(path, len(data))

    def create(self, path, mime_type="application/octet-stream", compression_type=None):
        if self.fail_create is not None and self.fail_create in path:
            raise BeamIOError(f"{path}: injected write failure")
        return _Writer(type(self), path)

    def open(self, path, mime_type="application/octet-stream", compression_type=None):
        with self.lock:
            data = self.files.get(path)
        if data is None:
            raise BeamIOError(f"{path}: no such object")
        return io.BytesIO(data)

    def copy(self, source_file_names, destination_file_names):
        with self.lock:
            for src, dst in zip(source_file_names, destination_file_names):
                self.files[dst] = self.files[src]

    def rename(self, source_file_names, destination_file_names):
        with self.lock:
            for src, dst in zip(source_file_names, destination_file_names):
                self.files[dst] = self.files.pop(src)

    def exists(self, path: str) -> bool:
        return path in self.files

    def size(self, path: str) -> int:
        return len(self.files[path])

    def last_updated(self, path: str) -> float:
        return 0.0

    def checksum(self, path: str) -> str:
        return str(len(self.files[path]))

    def metadata(self, path: str) -> FileMetadata:
        return FileMetadata(path, len(self.files[path]))

    def delete(self, paths) -> None:
        with self.lock:
            for p in paths:
                if p not in self.files:
                    raise BeamIOError(f"{p}: no such object")
                del self.files[p]
