"""Resolve the INPUT arguments of a job to a sorted list of files, before any pipeline starts.

A missing path or a glob that matches nothing is a user mistake (c4_rules.md C3), so it fails
here with an ``InputError`` naming the argument, not deep inside a worker an hour later.
Files are listed once each and sorted by path so counters and errors come out deterministically.
"""

from __future__ import annotations

import fnmatch
import glob
import os
import stat
from dataclasses import dataclass, field

from c4forge.errors import InputError, StorageError
from c4forge.io import storage

# What a directory contributes: Common Crawl names WET files *.warc.wet.gz; uncompressed
# *.wet is accepted as well. WARC names are added for --input-format warc/auto.
WET_PATTERNS = ("*.wet", "*.wet.gz")
WARC_PATTERNS = ("*.warc", "*.warc.gz", "*.arc.gz")
C4_PATTERNS = ("c4-*.json.gz", "c4-*.parquet")  # a clean corpus folder's shards (--input-format c4)
GLOB_CHARS = set("*?[")


@dataclass(frozen=True, order=True)
class InputFile:
    """One input file; ``version`` is what changes when it is rewritten (local: mtime in ns;
    object stores: last-modified), recorded so a finished folder or ``--resume`` never serves
    the work of an older file of the same name and size (not part of equality or order)."""

    path: str
    size: int
    version: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]


def dir_patterns(input_format: str) -> tuple[str, ...]:
    """The file-name patterns a folder INPUT is expanded with, for ``input_format`` (also the
    Spark engine's, which lists folders on the cluster's filesystems)."""
    if input_format == "wet":
        return WET_PATTERNS
    if input_format == "warc":
        return WARC_PATTERNS
    if input_format == "c4":
        return C4_PATTERNS
    return WET_PATTERNS + WARC_PATTERNS


def _local_file(path: str) -> InputFile:
    st = os.stat(path)
    return InputFile(os.path.abspath(path), st.st_size, f"mtime_ns:{st.st_mtime_ns}")


def _match_remote(pattern: str) -> list[InputFile]:
    try:
        found = storage.match_versions(pattern)
    except StorageError as err:
        raise InputError(str(err)) from err
    # A key ending in "/" is a folder marker (S3 consoles, Hadoop's s3a), never an input file.
    return [InputFile(p, n, v) for p, n, v in found if not p.endswith("/")]


def _is_file(path: str, *, listed: bool = False) -> bool:
    """``os.path.isfile``, but a FIFO, socket or device is refused rather than skipped or
    read: opening a FIFO blocks until a writer comes, a device may never end. ``listed``: the
    name came from a folder listing, so one that cannot be looked at (a dangling link) is an
    error too, not a file silently left out."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if listed:
            raise InputError(f"cannot open input {path!r}: {err.strerror}") from err
        return False
    if stat.S_ISREG(mode):
        return True
    if stat.S_ISDIR(mode):
        return False
    raise InputError(f"input {path!r} is not a regular file (a FIFO, socket or device)")


def _expand_local(spec: str, input_format: str) -> list[InputFile]:
    path = storage.normalize(spec)
    if any(c in path for c in GLOB_CHARS):
        matches = sorted(glob.glob(path, recursive=True))
        files = [m for m in matches if _is_file(m)]
        if not files:
            raise InputError(f"glob {spec!r} matches no file")
        return [_local_file(f) for f in files]
    if os.path.isdir(path):
        patterns = dir_patterns(input_format)
        files = []
        for root, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for n in names:
                if not n.startswith(".") and any(fnmatch.fnmatch(n, p) for p in patterns):
                    if _is_file(os.path.join(root, n), listed=True):
                        files.append(os.path.join(root, n))
        if not files:
            raise InputError(
                f"directory {spec!r} holds no input file (looked for {', '.join(patterns)})"
            )
        return [_local_file(f) for f in files]
    if _is_file(path):
        try:
            with open(path, "rb"):
                pass
        except OSError as err:
            raise InputError(f"cannot open input {spec!r}: {err.strerror}") from err
        return [_local_file(path)]
    raise InputError(f"input {spec!r} does not exist")


def _expand_remote(spec: str, input_format: str) -> list[InputFile]:
    if any(c in spec for c in GLOB_CHARS):
        files = _match_remote(spec)
        if not files:
            raise InputError(f"glob {spec!r} matches no file")
        return files
    files = _match_remote(spec)
    exact = [f for f in files if f.path.rstrip("/") == spec.rstrip("/")]
    if exact:
        return exact
    # A "directory" on an object store is a prefix.
    prefix = spec.rstrip("/") + "/"
    found: list[InputFile] = []
    for pattern in dir_patterns(input_format):
        found += _match_remote(prefix + "**" + pattern[1:])
    if not found:
        raise InputError(f"input {spec!r} does not exist (no object, no files under it)")
    return found


def read_path_list(spec: str) -> list[str]:
    """``@paths.txt``: one path per line (as Common Crawl's ``wet.paths``); blanks and
    ``#`` comments ignored; relative paths are relative to the list's folder."""
    list_path = spec[1:]
    if not list_path:
        raise InputError("'@' must be followed by the name of a file of paths")
    try:
        raw = storage.read_bytes(list_path)
    except Exception as err:  # noqa: BLE001 - OSError, or a remote filesystem's own error
        raise InputError(f"cannot read path list {list_path!r}: {err}") from err
    if list_path.endswith(".gz") or raw[:2] == b"\x1f\x8b":
        import gzip
        import zlib

        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as err:
            raise InputError(f"path list {list_path!r} is not a whole gzip file: {err}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        utf16 = raw[:2] in (b"\xff\xfe", b"\xfe\xff")
        hint = " (it looks like UTF-16: save it as UTF-8)" if utf16 else ""
        raise InputError(
            f"path list {list_path!r} is not UTF-8 text (byte {err.start}){hint}"
        ) from None
    base = os.path.dirname(list_path)
    paths = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if (
            not storage.is_remote(line)
            and not os.path.isabs(line)
            and not storage.is_remote(list_path)
        ):
            line = os.path.join(base, line)
        elif (
            not storage.is_remote(line)
            and storage.is_remote(list_path)
            and not line.startswith("/")
        ):
            line = list_path.rsplit("/", 1)[0] + "/" + line
        paths.append(line)
    if not paths:
        raise InputError(f"path list {list_path!r} is empty")
    return paths


def resolve_inputs(specs: list[str], input_format: str = "wet") -> list[InputFile]:
    """Expand files, globs, directories, remote paths and ``@lists`` into sorted unique files."""
    expanded: list[str] = []
    for spec in specs:
        expanded += read_path_list(spec) if spec.startswith("@") else [spec]
    files: dict[str, InputFile] = {}
    for spec in expanded:
        found = (
            _expand_remote(spec, input_format)
            if storage.is_remote(spec)
            else _expand_local(spec, input_format)
        )
        for f in found:
            files.setdefault(f.path, f)
    return sorted(files.values())


def inputs_block(files: list[InputFile]) -> dict:
    """The ``inputs`` block of stats.json: no directories, so runs from different folders or
    machines on the same files compare equal."""
    return {
        "count": len(files),
        "bytes": sum(f.size for f in files),
        "names": sorted(f.name for f in files),
    }
