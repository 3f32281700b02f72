"""Compatibility alias: the file layer is ``c4forge.io.storage`` (issue 12). Kept only so code
written against the old name keeps importing; new code imports ``c4forge.io.storage``."""

from c4forge.io.storage import (  # noqa: F401
    atomic_writer,
    basename,
    exists,
    is_remote,
    join,
    listdir,
    makedirs,
    open_read,
    read_bytes,
    read_json,
    remove,
    rmtree,
    sha256,
    size,
    write_bytes,
    write_json,
)
