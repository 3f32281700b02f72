"""Reading clean shards: ``clean_docs.gzip_lines`` (1 MiB inflates, split into lines) must give
exactly what Python's gzip module gives, and a cut or corrupt clean shard must stop the read
with a clear error, never end it early as if the file were complete. Real data: the bundled
C4 sample (``c4forge/data/sample``)."""

from __future__ import annotations

import gzip
import io
import zlib
from pathlib import Path

import pytest

from c4forge.corpus import clean_docs
from c4forge.errors import InputError

SAMPLE = Path(clean_docs.__file__).parent.parent / "data/sample/c4-sample.00000-of-00001.json.gz"


def _reference(data: bytes) -> list[bytes]:
    text = gzip.decompress(data)
    lines = text.split(b"\n")
    return lines[:-1] if lines[-1] == b"" else lines


@pytest.mark.parametrize("read", [clean_docs.GZIP_READ, 4096, 37])
def test_lines_equal_the_gzip_module_across_members_and_padding(monkeypatch, read) -> None:
    """Multi-member files, zero padding between and after members, a last line without a
    newline, and reads that cut lines and gzip headers anywhere."""
    monkeypatch.setattr(clean_docs, "GZIP_READ", read)
    real = SAMPLE.read_bytes()
    text = gzip.decompress(real)
    half = text.index(b"\n", len(text) // 2) + 1
    data = (
        gzip.compress(text[:half], mtime=0)
        + b"\x00" * 9
        + gzip.compress(text[half:] + b'{"text": "no newline at the end"}', mtime=0)
        + b"\x00" * 3
    )
    got = list(clean_docs.gzip_lines(io.BytesIO(data)))
    assert got == _reference(data)
    assert len(got) > 1000 and got[-1] == b'{"text": "no newline at the end"}'
    assert list(clean_docs.gzip_lines(io.BytesIO(real))) == _reference(real)


def test_a_cut_file_raises_instead_of_ending_early() -> None:
    real = SAMPLE.read_bytes()
    with pytest.raises(EOFError):
        list(clean_docs.gzip_lines(io.BytesIO(real[: len(real) // 2])))


def test_a_corrupt_member_raises() -> None:
    real = bytearray(SAMPLE.read_bytes())
    real[-6] ^= 0xFF  # inside the CRC-32 trailer: zlib refuses the member
    with pytest.raises(zlib.error):
        list(clean_docs.gzip_lines(io.BytesIO(bytes(real))))


def test_a_truncated_clean_shard_is_an_input_error_naming_the_file(tmp_path: Path) -> None:
    real = SAMPLE.read_bytes()
    cut = tmp_path / "c4-train.00000-of-00001.json.gz"
    cut.write_bytes(real[: len(real) * 2 // 3])
    with pytest.raises(InputError, match="unreadable or truncated file"):
        for _ in clean_docs.iter_documents(str(cut)):
            pass
