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
import io
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


def use_pipeline_options(argv: list[str]) -> None:
    """Give Beam's filesystems in THIS process the job's options (``--s3_endpoint_url``,
    ``--s3_access_key_id`` …, ``--project``), before the driver lists inputs or checks the
    output. Beam sets them itself only when a pipeline is built (and in its workers), which is
    after the driver's own remote calls; without options its S3 client cannot even be made."""
    from apache_beam.io.filesystems import FileSystems
    from apache_beam.options.pipeline_options import PipelineOptions

    FileSystems.set_options(PipelineOptions(list(argv)))


def _fs() -> Any:
    from apache_beam.io.filesystems import FileSystems

    # Beam keeps the options in a class attribute; none set yet (a command that built no
    # pipeline, e.g. `shards verify s3://…`): empty options, so boto3 reads the standard AWS
    # environment (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, credentials, region). Options
    # already set (a worker, or use_pipeline_options) are kept.
    if getattr(FileSystems, "_pipeline_options", None) is None:
        use_pipeline_options([])
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


class _RemoteFile(io.RawIOBase):
    """A Beam filesystem file opened on the first byte written. Why lazily: Beam's S3
    uploader starts a multipart upload on open and cannot complete one of zero parts
    (S3 answers MalformedXML), so an empty file must be made without one (``_put_empty``)."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self.file: IO[bytes] | None = None

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        if self.file is None:
            if not len(b):
                return 0
            from apache_beam.io.filesystems import CompressionTypes

            self.file = _fs().create(self.path, compression_type=CompressionTypes.UNCOMPRESSED)
        return self.file.write(b)

    def commit(self) -> bool:
        """Close the upload; False when nothing was written (no file exists then)."""
        if self.file is None:
            return False
        self.file.close()
        return True

    def discard(self) -> None:
        if self.file is not None:
            with contextlib.suppress(Exception):
                self.file.close()
            with contextlib.suppress(Exception):
                if _fs().exists(self.path):
                    _fs().delete([self.path])


def _put_empty(path: str) -> None:
    """An empty object under ``path``: one PUT on S3 (atomic by itself), else create + close."""
    fs = _fs()
    if path.startswith("s3://"):
        from apache_beam.io.aws.clients.s3 import boto3_client

        bucket, _, key = path[len("s3://") :].partition("/")
        client = boto3_client.Client(options=getattr(fs, "_pipeline_options", None) or {})
        client.client.put_object(Bucket=bucket, Key=key, Body=b"")
        return
    from apache_beam.io.filesystems import CompressionTypes

    fs.create(path, compression_type=CompressionTypes.UNCOMPRESSED).close()


@contextlib.contextmanager
def atomic_writer(path: str) -> Iterator[IO[bytes]]:
    """A binary file that appears under ``path`` only if the block completes."""
    if not is_remote(path):
        with fsutil.atomic_open(path, "wb") as f:
            yield f
        return
    fs = _fs()
    f = _RemoteFile(fsutil.tmp_name(path))
    try:
        yield f  # type: ignore[misc] - a writable binary file
        written = f.commit()
        if fs.exists(path):  # rename does not replace on every filesystem
            fs.delete([path])
        if written:
            fs.rename([f.path], [path])
        else:
            _put_empty(path)
    except BaseException:
        f.discard()
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
