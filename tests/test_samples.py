"""The bundled sample's WET files are reproducible byte for byte.

warcio stamps a random WARC-Record-ID by default; the demo's inputs (and every checksum computed
from them, e.g. stats.json's input fingerprints) would then differ between two runs.
"""

from __future__ import annotations

import hashlib

from warcio.archiveiterator import ArchiveIterator

from c4forge.samples import demo_inputs


def _digest(path: str) -> str:
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_demo_inputs_are_byte_identical_across_writes(tmp_path):
    first = demo_inputs(str(tmp_path / "a"))
    second = demo_inputs(str(tmp_path / "b"))
    assert [_digest(p) for p in first] == [_digest(p) for p in second]


def test_record_ids_are_unique_and_well_formed(tmp_path):
    for path in demo_inputs(str(tmp_path))[1:]:
        with open(path, "rb") as f:
            ids = [r.rec_headers.get_header("WARC-Record-ID") for r in ArchiveIterator(f)]
        assert len(ids) == len(set(ids)) > 600
        assert all(i.startswith("<urn:uuid:") and i.endswith(">") for i in ids)
