"""Names read from data files, checked before they are joined to a folder.

Why: index.json, stats.json and ``checkpoints/latest`` name files and folders relative to the
folder that holds them. A name such as ``../x`` or ``/etc/hostname`` would make a reader hash,
load or copy a file outside that folder (and report it as part of the set). Such a name is
never written by c4forge, so it is refused, not resolved.
"""

from __future__ import annotations

from typing import Any

from c4forge.errors import VerificationError


def member_name(name: Any, where: str, what: str) -> str:
    """``name`` when it names an entry directly inside its folder: a non-empty string with no
    path separator, not ``.`` or ``..``; else a VerificationError naming ``where`` (the file
    that holds the name) and ``what`` (its field)."""
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
    ):
        raise VerificationError(
            f"{where}: {what} {name!r} is not a name inside its folder (no paths, no ..)"
        )
    return name
