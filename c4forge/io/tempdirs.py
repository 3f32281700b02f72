"""Temporary folders a run can prove are its own, so a later run can remove a dead one's.

Why: a run killed with SIGKILL (the OOM killer) never runs its cleanup, and its shuffle spills
stay in the temporary directory, gigabytes at a time. Each folder made here is named
``PREFIX<pid>-<random>``; before making one, the folders of the same prefix whose process has
ended on this host (and that belong to this user) are deleted. A folder of a live process, or
of a name this module did not make, is never touched.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

from c4forge.io.ownership import pid_alive


def make(prefix: str) -> str:
    """A new temporary folder ``PREFIX<pid>-…``, after removing dead runs' ones (``sweep``)."""
    sweep(prefix)
    return tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-")


def sweep(prefix: str, directory: str | None = None) -> list[str]:
    """Delete ``PREFIX<pid>-*`` folders in the temporary directory whose process has ended;
    returns their paths."""
    root = directory or tempfile.gettempdir()
    pattern = re.compile(re.escape(prefix) + r"(\d+)-[A-Za-z0-9_]+$")
    removed = []
    try:
        names = os.listdir(root)
    except OSError:
        return []
    for name in names:
        m = pattern.match(name)
        if not m or pid_alive(int(m.group(1))):
            continue
        path = os.path.join(root, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not os.path.isdir(path) or os.path.islink(path) or st.st_uid != os.getuid():
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed
