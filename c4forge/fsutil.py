"""Atomic writes, checksums and canonical JSON: the rules every c4forge artefact follows.

A reader never sees a partial file under a final name: we write ``<name>.tmp-<pid>-<rand>`` in
the same directory, fsync, then ``os.replace``. Works for local paths; remote outputs go
through Beam's filesystems, which have their own commit protocol.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator
from typing import IO, Any


def tmp_name(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"


@contextlib.contextmanager
def atomic_open(path: str, mode: str = "wb") -> Iterator[IO[Any]]:
    """Open a temporary sibling of ``path``; on success fsync and rename it into place."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = tmp_name(path)
    encoding = None if "b" in mode else "utf-8"
    f = open(tmp, mode, encoding=encoding)
    try:
        yield f
        f.flush()
        os.fsync(f.fileno())
        f.close()
        os.replace(tmp, path)
    except BaseException:
        f.close()
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def atomic_write_bytes(path: str, data: bytes) -> None:
    with atomic_open(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: str, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def dumps_pretty(obj: Any) -> str:
    """Metadata JSON: sorted keys, 2-space indent, trailing newline (stats.json, index.json…)."""
    return json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False) + "\n"


def dumps_canonical(obj: Any) -> str:
    """Canonical JSON for fingerprints: sorted keys, no spaces."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def write_json(path: str, obj: Any) -> None:
    atomic_write_text(path, dumps_pretty(obj))


def read_json(path: str) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def md5_hex(text: str) -> str:
    return hashlib.md5(text.encode("utf-8")).hexdigest()


def check_format(obj: dict, path: str, fmt: str, versions: tuple[int, ...] = (1,)) -> None:
    """Refuse a metadata file of another format or an unknown version, naming both."""
    from c4forge.errors import VerificationError

    found_fmt, found_ver = obj.get("format"), obj.get("format_version")
    if found_fmt != fmt or found_ver not in versions:
        raise VerificationError(
            f"{path}: expected format {fmt!r} version {'/'.join(map(str, versions))}, "
            f"found format {found_fmt!r} version {found_ver!r}"
        )
