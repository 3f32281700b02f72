"""Compatibility alias: the file layer is ``c4forge.io.storage`` (issue 12). Kept only so code
written against the old name keeps importing; new code imports ``c4forge.io.storage``."""

from c4forge.io.storage import (  # noqa: F401
    atomic_open,
    atomic_write_bytes,
    atomic_write_text,
    check_format,
    dumps_canonical,
    dumps_pretty,
    md5_hex,
    read_json,
    sha256_bytes,
    sha256_file,
    tmp_name,
    write_json,
)
