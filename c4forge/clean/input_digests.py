"""What a clean run read, by content: each input's sha256 in stats.json, and its size and
version (mtime / last-modified) beside it, so a rerun knows cheaply whether an input changed.

Why: a re-downloaded input of the same name and size must not be served from the old output.
The sha256 of every input is computed during the read the front pass does anyway
(``io.fingerprint``) and recorded in the chunk's ``_work`` record; stats.json lists it per file
(``inputs.files``: name and sha256, machine-independent like the rest of stats.json). The
file's path, size and version go to ``.c4forge-inputs.json`` beside it: a rerun whose inputs
still have that size and version trusts the recorded sha256; any other input is hashed again
(one read of that file), and a different sha256 is refused, never served.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from c4forge.clean import resume_state
from c4forge.clean.stats import INPUT_FILES_KEY
from c4forge.errors import OutputExistsError
from c4forge.io import storage
from c4forge.io.inputs import InputFile

SEEN_NAME = ".c4forge-inputs.json"
SEEN_FORMAT = "c4forge.clean.inputs"


def from_chunks(work: resume_state.WorkDir, chunks: Sequence[resume_state.Chunk]) -> dict[str, str]:
    """path → sha256 of every input, from the chunks' records (an input whose record has none,
    one written before digests were recorded, is hashed now)."""
    digests: dict[str, str] = {}
    for chunk in chunks:
        recorded = (work.done(chunk) or {}).get("sha256") or {}
        for f in chunk.files:
            digests[f.path] = recorded.get(f.path) or storage.sha256(f.path)
    return digests


def files_block(files: Sequence[InputFile], digests: dict[str, str]) -> list[dict[str, str]]:
    """stats.json's ``inputs.files``: name and sha256, sorted (no folders: machine-free)."""
    return sorted(
        ({"name": f.name, "sha256": digests[f.path]} for f in files),
        key=lambda e: (e["name"], e["sha256"]),
    )


def write_seen(output: str, files: Sequence[InputFile], digests: dict[str, str]) -> None:
    entries = [
        {"path": f.path, "size": f.size, "version": f.version, "sha256": digests[f.path]}
        for f in sorted(files)
    ]
    storage.write_json(
        storage.join(output, SEEN_NAME),
        {"format": SEEN_FORMAT, "format_version": 1, "files": entries},
    )


def _read_seen(output: str) -> dict[str, dict[str, Any]]:
    try:
        obj = storage.read_json_if_exists(storage.join(output, SEEN_NAME))
    except (ValueError, UnicodeDecodeError):
        return {}
    if not isinstance(obj, dict) or obj.get("format") != SEEN_FORMAT:
        return {}
    return {e.get("path"): e for e in obj.get("files") or [] if isinstance(e, dict)}


def verify(
    output: str, existing: dict[str, Any], files: Sequence[InputFile]
) -> dict[str, str] | None:
    """Refuse to serve a finished folder whose inputs are not the bytes it was cleaned from
    (``OutputExistsError`` naming the first changed input). A folder of a run that recorded no
    digests is taken on name and size, as it was. Returns the digests to record again
    (``write_seen``) when an input had to be hashed again (same bytes, another version), else
    None: a check that writes nothing itself, so a finished folder is answered read-only."""
    recorded = (existing.get("inputs") or {}).get(INPUT_FILES_KEY)
    if not recorded:
        return None
    seen = _read_seen(output)
    digests: dict[str, str] = {}
    rehashed = False
    for f in files:
        e = seen.get(f.path)
        if e and f.version and e.get("size") == f.size and e.get("version") == f.version:
            digests[f.path] = str(e.get("sha256"))
        else:  # another version, or none listed (a store without one: hashed every time)
            digests[f.path] = storage.sha256(f.path)
            rehashed = rehashed or bool(f.version)
    actual = files_block(files, digests)
    if actual != recorded:
        wanted = {(e.get("name"), e.get("sha256")) for e in recorded if isinstance(e, dict)}
        changed = next(e["name"] for e in actual if (e["name"], e["sha256"]) not in wanted)
        raise OutputExistsError(
            f"{output} was cleaned from another version of input {changed} (its sha256 "
            "differs from the one recorded in stats.json); pass --overwrite to clean it again"
        )
    return digests if rehashed else None  # same content, newer mtime (a touch, a copy)
