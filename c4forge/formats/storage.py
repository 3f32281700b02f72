"""File operations on a shard folder that may be local or remote (gs://, s3://, any Beam FS).

Why a module: a Dataflow run must write its shards, progress records and index.json to a
bucket, while local runs keep the plain-file behaviour of `c4forge.fsutil` (fsync + rename).
Every function here takes a path; a path with a scheme goes through
`apache_beam.io.filesystems.FileSystems` (imported only then), anything else through `os`.
Writes are atomic in both cases: a `name.tmp-…` sibling, then a rename over the final name
(object stores make the final object visible only when the rename's copy completes).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import posixpath
from collections.abc import Iterator
from typing import IO, Any

from c4forge import fsutil

_CHUNK = 1 << 20


def is_remote(path: str) -> bool:
    """True for `scheme://…` paths (gs, s3, hdfs, azfs, or any FileSystem registered with Beam)."""
    return "://" in path


def _fs() -> Any:
    from apache_beam.io.filesystems import FileSystems

    return FileSystems


def join(base: str, *names: str) -> str:
    if is_remote(base):
        return posixpath.join(base.rstrip("/"), *names)
    return os.path.join(base, *names)


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_remote(path) else os.path.basename(path)


def exists(path: str) -> bool:
    return _fs().exists(path) if is_remote(path) else os.path.exists(path)


def size(path: str) -> int:
    if is_remote(path):
        return _fs().get_filesystem(path).size(path)
    return os.path.getsize(path)


def listdir(directory: str) -> list[str]:
    """Names of the files directly in ``directory`` ([] when it does not exist)."""
    if not is_remote(directory):
        return sorted(os.listdir(directory)) if os.path.isdir(directory) else []
    prefix = directory.rstrip("/") + "/"
    try:
        results = _fs().match([prefix + "*"])
    except Exception:  # BeamIOError: nothing matched (no such prefix)
        return []
    names = {m.path[len(prefix) :] for r in results for m in r.metadata_list}
    return sorted(n for n in names if n and "/" not in n)


def makedirs(directory: str) -> None:
    """Local folders only: object stores have no folders (a prefix exists once written to)."""
    if not is_remote(directory):
        os.makedirs(directory, exist_ok=True)


def remove(path: str) -> None:
    """Delete one file; a missing file is not an error."""
    if not is_remote(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return
    if _fs().exists(path):
        _fs().delete([path])


def rmtree(directory: str) -> None:
    """Delete a folder (local) or every object under the prefix ``directory/`` (remote)."""
    if not is_remote(directory):
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
        return
    prefix = directory.rstrip("/") + "/"
    try:
        results = _fs().match([prefix + "**"])
    except Exception:
        return
    paths = [m.path for r in results for m in r.metadata_list]
    if paths:
        _fs().delete(paths)


def open_read(path: str) -> IO[bytes]:
    if is_remote(path):
        from apache_beam.io.filesystems import CompressionTypes

        return _fs().open(path, compression_type=CompressionTypes.UNCOMPRESSED)
    return open(path, "rb")


def read_bytes(path: str) -> bytes:
    with open_read(path) as f:
        return f.read()


def read_json(path: str) -> Any:
    if not is_remote(path):
        return fsutil.read_json(path)
    return json.loads(read_bytes(path).decode("utf-8"))


@contextlib.contextmanager
def atomic_writer(path: str) -> Iterator[IO[bytes]]:
    """A binary file that appears under ``path`` only if the block completes."""
    if not is_remote(path):
        with fsutil.atomic_open(path, "wb") as f:
            yield f
        return
    from apache_beam.io.filesystems import CompressionTypes

    fs = _fs()
    tmp = fsutil.tmp_name(path)
    f = fs.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED)
    try:
        yield f
        f.close()
        if fs.exists(path):  # rename does not replace on every filesystem
            fs.delete([path])
        fs.rename([tmp], [path])
    except BaseException:
        with contextlib.suppress(Exception):
            f.close()
        with contextlib.suppress(Exception):
            if fs.exists(tmp):
                fs.delete([tmp])
        raise


def write_bytes(path: str, data: bytes) -> None:
    with atomic_writer(path) as f:
        f.write(data)


def write_json(path: str, obj: Any) -> None:
    """Sorted keys, 2-space indent, trailing newline: the same bytes as `fsutil.write_json`."""
    if not is_remote(path):
        fsutil.write_json(path, obj)
        return
    write_bytes(path, fsutil.dumps_pretty(obj).encode("utf-8"))


def sha256(path: str) -> str:
    """sha256 of a file's bytes (remote files are streamed back: only needed on resume)."""
    if not is_remote(path):
        return fsutil.sha256_file(path)
    h = hashlib.sha256()
    with open_read(path) as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()
