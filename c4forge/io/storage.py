"""The one file layer of c4forge: every path kind, one set of rules.

Paths: a plain local path, a ``file://`` URI (normalised to the local path it names, for every
engine), or a remote ``scheme://`` path (``gs://``, ``s3://``, ``hdfs://``, ``azfs://`` or any
filesystem registered with Beam, imported only then; schemes Beam does not know but fsspec does,
``memory://``, ``http(s)://`` …, are readable through fsspec).

Rules every caller gets:
* Writes are atomic: a ``name.tmp-<pid>-<rand>`` sibling, fsync (local), then a rename over the
  final name; a reader never sees a partial file under a final name.
* Errors propagate. A listing or read that fails is a ``StorageError`` naming the path, never
  "nothing there": "absent" is only ever a confirmed absence (``exists`` said no, or the
  listing succeeded and was empty). Why: a failed bucket listing read as empty let stale
  shards survive, and a failed read of a finished run's stats.json let it be overwritten.
* Metadata JSON is canonical: sorted keys, 2-space indent, trailing newline.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import posixpath
import re
import secrets
from collections.abc import Iterator
from typing import IO, Any

from c4forge import faults
from c4forge.errors import ConfigError, JSONFileError, StorageError, VerificationError

_CHUNK = 1 << 20
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+)://")  # 2+ letters: not a Windows drive


# --- path kinds --------------------------------------------------------------------------------


def scheme(path: str) -> str | None:
    m = _SCHEME.match(path)
    return m.group(1).lower() if m else None


def normalize(path: str) -> str:
    """``file:///x`` (and ``file:/x``) → ``/x``; any other path unchanged. Beam has no
    filesystem for the ``file`` scheme, so every engine gets the plain local path."""
    if path.startswith("file:"):
        from urllib.parse import unquote, urlparse

        return unquote(urlparse(path).path)
    return path


def is_remote(path: str) -> bool:
    """True for ``scheme://…`` paths other than ``file://`` (those are local files)."""
    s = scheme(path)
    return s is not None and s != "file"


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


def _beam_knows(path: str) -> bool:
    try:
        _fs().get_filesystem(path)
    except Exception:  # noqa: BLE001 - unknown scheme or a missing Beam extra
        return False
    return True


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


def join(base: str, *names: str) -> str:
    if is_remote(base):
        return posixpath.join(base.rstrip("/"), *names)
    return os.path.join(normalize(base), *names)


def basename(path: str) -> str:
    return posixpath.basename(path.rstrip("/")) if is_remote(path) else os.path.basename(path)


# --- metadata ----------------------------------------------------------------------------------


def exists(path: str) -> bool:
    if not is_remote(path):
        return os.path.exists(normalize(path))
    try:
        return bool(_fs().exists(path))
    except Exception as err:  # noqa: BLE001 - a failed lookup is not an absence
        raise StorageError(f"cannot check {path}: {_first_line(err)}") from err


def size(path: str) -> int:
    if is_remote(path):
        return _fs().get_filesystem(path).size(path)
    return os.path.getsize(normalize(path))


def match(pattern: str) -> list[tuple[str, int]]:
    """(path, size) of the files a remote glob matches ([] only when the listing succeeded and
    found nothing); errors are StorageErrors naming the pattern."""
    return [(p, n) for p, n, _ in match_versions(pattern)]


def match_versions(pattern: str) -> list[tuple[str, int, str]]:
    """``match`` with each object's version: its last-modified time as the filesystem lists
    it ("" where it lists none), which a re-upload changes."""
    try:
        results = _fs().match([pattern])
    except Exception as err:  # noqa: BLE001 - BeamIOError with per-pattern causes
        causes = getattr(err, "exception_details", None) or {}
        detail = _first_line(next(iter(causes.values()))) if causes else _first_line(err)
        raise StorageError(f"cannot list {pattern}: {detail}") from err
    return [
        (m.path, m.size_in_bytes, _version(getattr(m, "last_updated_in_seconds", None)))
        for r in results
        for m in r.metadata_list
    ]


def _version(updated: Any) -> str:
    return "" if updated is None or updated == 0 else f"mtime:{float(updated)!r}"


def listdir(directory: str) -> list[str]:
    """Names of the files directly in ``directory``; [] when it is confirmed absent."""
    if not is_remote(directory):
        local = normalize(directory)
        return sorted(os.listdir(local)) if os.path.isdir(local) else []
    fs = _fs().get_filesystem(directory)
    if fs.has_dirs() and not exists(directory):  # a folder filesystem (HDFS) lists a folder
        return []
    prefix = directory.rstrip("/") + "/"
    names = {p[len(prefix) :] for p, _ in match(prefix + "*")}
    return sorted(n for n in names if n and "/" not in n)


# --- changes -----------------------------------------------------------------------------------


def check_output_folder(path: str, *, writable: bool = True) -> None:
    """Refuse, before any work, a local output that cannot become the run's folder: a file at
    the path (``ConfigError``), or (``writable``) a folder, or for a new one its nearest
    existing parent, that cannot be written (``OSError`` EROFS/EACCES/ENOTDIR: a one-line error
    at the CLI). Hours of sampling or training must not end in a write that never succeeds."""
    import errno

    if is_remote(path):
        return
    local = os.path.abspath(normalize(path))
    if os.path.exists(local) and not os.path.isdir(local):
        raise ConfigError(f"--output {path!r} exists and is not a folder")
    if not writable:
        return
    probe = local
    while not os.path.lexists(probe):
        probe = os.path.dirname(probe)
    code = 0
    if not os.path.isdir(probe):
        code = errno.ENOTDIR
    elif not os.access(probe, os.W_OK | os.X_OK):
        code = errno.EROFS if os.statvfs(probe).f_flag & os.ST_RDONLY else errno.EACCES
    if code:
        raise OSError(code, os.strerror(code), probe)


def makedirs(directory: str) -> None:
    """Local folders only: object stores have no folders (a prefix exists once written to)."""
    if not is_remote(directory):
        os.makedirs(normalize(directory), exist_ok=True)


def remove(path: str) -> None:
    """Delete one file; a missing file is not an error."""
    if not is_remote(path):
        with contextlib.suppress(FileNotFoundError):
            os.remove(normalize(path))
        return
    if exists(path):
        _fs().delete([path])


def rmtree(directory: str) -> None:
    """Delete a folder (local) or every object under the prefix ``directory/`` (remote)."""
    if not is_remote(directory):
        import shutil

        shutil.rmtree(normalize(directory), ignore_errors=True)
        return
    fs = _fs().get_filesystem(directory)
    if fs.has_dirs() and not exists(directory):
        return
    paths = [p for p, _ in match(directory.rstrip("/") + "/**")]
    if paths:
        _fs().delete(paths)


# --- reading -----------------------------------------------------------------------------------


def open_read(path: str) -> IO[bytes]:
    """Raw bytes of a file (never decompressed: readers sniff gzip themselves). Local paths and
    ``file://`` through ``open``, Beam filesystems through Beam, other schemes through fsspec
    when it knows them. ``OSError``/``ValueError`` (or Beam's IO errors) propagate. Inside
    ``fingerprint.digesting(path)`` the bytes read feed the file's sha256."""
    from c4forge.io import fingerprint

    return fingerprint.wrap(path, _open_read(path))


def _open_read(path: str) -> IO[bytes]:
    if not is_remote(path):
        return open(normalize(path), "rb")  # noqa: SIM115 - the caller closes it
    if not _beam_knows(path):
        try:
            import fsspec
        except ImportError:
            fsspec = None
        if fsspec is not None:
            return fsspec.open(path, "rb").open()
    from apache_beam.io.filesystems import CompressionTypes

    return _fs().open(path, compression_type=CompressionTypes.UNCOMPRESSED)


def read_bytes(path: str) -> bytes:
    with open_read(path) as f:
        return f.read()


def parse_json(raw: bytes, path: str) -> Any:
    """``raw`` (the bytes of ``path``) as JSON; a cut, non-UTF-8 or non-JSON file is a
    ``JSONFileError`` naming it (a ``JSONDecodeError`` too)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JSONFileError(path, f"not UTF-8 at byte {err.start}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise JSONFileError(
            path, f"{err.msg} at line {err.lineno} column {err.colno}", err.doc, err.pos
        ) from None


def read_json(path: str) -> Any:
    return parse_json(read_bytes(path), path)


def read_json_if_exists(path: str) -> Any | None:
    """The JSON at ``path``, or None only when the file is confirmed absent. Any other failure
    (permissions, a network error, a listing that fails) propagates."""
    try:
        if not is_remote(path):
            try:
                return read_json(path)
            except FileNotFoundError:
                return None
        if not exists(path):
            return None
        raw = read_bytes(path)
    except OSError as err:  # Beam's IO errors are OSErrors too
        raise StorageError(f"cannot read {path}: {_first_line(err)}") from err
    return parse_json(raw, path)


def sha256(path: str) -> str:
    """sha256 of a file's bytes (remote files are streamed back)."""
    h = hashlib.sha256()
    with open_read(path) as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def md5_hex(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


# --- atomic writes -----------------------------------------------------------------------------


class HashingWriter(io.RawIOBase):
    """A write-only file that counts and sha256-hashes the bytes on their way to ``sink`` (a
    file being written, usually an ``atomic_writer``'s): a written file's ``bytes`` and
    ``sha256`` without reading it back. Closing it leaves ``sink`` open (its own context closes
    and fsyncs it). Used by gzip (the clean shards) and by Arrow's IPC writer (the shards)."""

    def __init__(self, sink: IO[bytes]) -> None:
        self.sink = sink
        self.sha256 = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        view = memoryview(b)
        self.sha256.update(view)
        self.size += view.nbytes
        self.sink.write(view)
        return view.nbytes

    def tell(self) -> int:
        return self.size

    def flush(self) -> None:
        self.sink.flush()


def tmp_name(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "wb") -> Iterator[IO[Any]]:
    """A local file (text or binary) that appears under ``path`` only if the block completes:
    a temporary sibling, fsync, ``os.replace``."""
    path = normalize(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = tmp_name(path)
    encoding = None if "b" in mode else "utf-8"
    f = open(tmp, mode, encoding=encoding)  # noqa: SIM115 - closed below
    try:
        yield f
        f.flush()
        faults.at_write(path, committed=False)  # a test hook (c4forge.faults); else nothing
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise
    faults.at_write(path, committed=True)


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
    """A binary file, local or remote, that appears under ``path`` only if the block completes
    (object stores make the final object visible only when the rename's copy completes)."""
    if not is_remote(path):
        with atomic_open(path, "wb") as f:
            yield f
        return
    fs = _fs()
    f = _RemoteFile(tmp_name(path))
    try:
        yield f  # type: ignore[misc] - a writable binary file
        faults.at_write(path, committed=False)  # a test hook (c4forge.faults); else nothing
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
    faults.at_write(path, committed=True)


def current_umask() -> int:
    """This process's umask. Read from ``/proc`` where it can be: setting it to read it back
    (the portable way) would change it for every other thread for a moment."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def chmod_as_created(path: str) -> None:
    """Give a local file the mode a plain ``open`` would have given it (0666 less the umask).
    Writers that go through a private temporary file of their own (safetensors creates its
    files 0600) would otherwise leave weights unreadable to the group and others, unlike
    every other file of a run."""
    os.chmod(normalize(path), 0o666 & ~current_umask())


def write_bytes(path: str, data: bytes) -> None:
    with atomic_writer(path) as f:
        f.write(data)


def atomic_write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


# --- JSON --------------------------------------------------------------------------------------


def dumps_pretty(obj: Any) -> str:
    """Metadata JSON: sorted keys, 2-space indent, trailing newline (stats.json, index.json…)."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def dumps_canonical(obj: Any) -> str:
    """Canonical JSON for fingerprints: sorted keys, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def write_json(path: str, obj: Any) -> None:
    atomic_write_text(path, dumps_pretty(obj))


def check_format(obj: dict, path: str, fmt: str, versions: tuple[int, ...] = (1,)) -> None:
    """Refuse a metadata file of another format or an unknown version, naming both."""
    found_fmt, found_ver = obj.get("format"), obj.get("format_version")
    if found_fmt != fmt or found_ver not in versions:
        raise VerificationError(
            f"{path}: expected format {fmt!r} version {'/'.join(map(str, versions))}, "
            f"found format {found_fmt!r} version {found_ver!r}"
        )
