"""A run owns its output folder: one writer at a time, a dead writer's lock taken over.

Why: two runs writing one folder interleave their files (the first run's finished corpus
replaced, a checkpoint ``latest`` naming the other run's step) and both exit 0. Every command
that writes a folder takes the folder with ``owned_output`` before its first write and gives it
back when it ends (success or error).

Local folders: ``FOLDER/.c4forge.lock``, created with ``O_CREAT`` and held with an exclusive
``flock`` for the whole run. The file names the holder (host, pid, start time, command), so a
second run fails with one line naming it. ``flock`` is released by the kernel when its holder
dies, however it dies (kill -9, OOM), so a lock file whose ``flock`` can be taken is stale: on
this host it is taken over with a line saying so; a lock written by another host is refused
(its holder cannot be checked from here), naming the file to delete if that run has ended.

Object stores (``s3://``, ``gs://``, the tests' in-memory bucket) have no locks: a run marker
``FOLDER/_c4forge_run.json`` is created only if absent, and ``check_owner`` reads it again just
before a command's final commit (stats.json, index.json), so a run whose marker was replaced
fails instead of committing over another run. A marker of a process of this host that has ended
is taken over, as a stale lock is.

Within one process the same folder may be taken again (an experiment calls the stage functions,
which take their own folders; a stage may call another that writes the same folder): the lock
counts its holders and is released by the last.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import os
import secrets
import socket
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from c4forge.errors import ConfigError, OutputExistsError
from c4forge.io import storage

LOCK_NAME = ".c4forge.lock"
MARKER_NAME = "_c4forge_run.json"
# Files a command may find in its folder that are this module's, never a run's output.
OWNERSHIP_FILES = frozenset({LOCK_NAME, MARKER_NAME})
T = TypeVar("T")


class OutputBusyError(OutputExistsError):
    """Another run holds the output folder."""


@dataclass
class _Held:
    path: str  # the lock file or the marker
    holder: dict[str, Any]
    fd: int | None = None  # local: the open, flocked lock file
    depth: int = 1
    inode: tuple[int, int] | None = field(default=None)
    created: str | None = None  # local: the folder this run created (removed if left empty)


_HELD: dict[tuple[str, str], _Held] = {}


def _key(folder: str, name: str = LOCK_NAME) -> tuple[str, str]:
    folder = storage.normalize(folder)
    path = folder.rstrip("/") if storage.is_remote(folder) else os.path.realpath(folder)
    return path, name


def _me(command: str) -> dict[str, Any]:
    return {
        "command": command,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "run_id": secrets.token_hex(8),
    }


def describe(holder: dict[str, Any]) -> str:
    """``c4forge clean (pid 123 on host h, started 2026-…Z)``: the holder, for one line."""
    return (
        f"c4forge {holder.get('command', '?')} (pid {holder.get('pid', '?')} on host "
        f"{holder.get('host', '?')}, started {holder.get('started', '?')})"
    )


def pid_alive(pid: int) -> bool:
    """True when a process ``pid`` exists on this host (one of another user counts)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _parse(raw: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return obj if isinstance(obj, dict) else {}


# --- local folders -----------------------------------------------------------------------------


def _take_local(folder: str, command: str, name: str = LOCK_NAME) -> _Held:
    import fcntl

    local = storage.normalize(folder)
    if os.path.exists(local) and not os.path.isdir(local):
        raise ConfigError(f"output {folder!r} exists and is not a folder")
    created = None if os.path.isdir(local) else local
    try:
        os.makedirs(local, exist_ok=True)
    except OSError as err:
        raise ConfigError(f"cannot create output folder {folder!r}: {err.strerror}") from None
    path = os.path.join(local, name)
    me = _me(command)
    for _ in range(20):  # a lock file removed between open and flock: open the new one
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as err:
            raise ConfigError(f"cannot write to output folder {folder!r}: {err.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                os.close(fd)
                raise
            holder = _parse(_read_fd(fd))
            os.close(fd)
            raise OutputBusyError(
                f"{folder} is being written by {describe(holder)}; wait for it to end or "
                "choose another --output"
            ) from None
        st = os.fstat(fd)
        try:
            now = os.stat(path)
        except FileNotFoundError:
            now = None
        if now is None or (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino):
            os.close(fd)  # its holder ended and removed it after we opened it
            continue
        old = _parse(_read_fd(fd)) if st.st_size else {}
        if old:
            if old.get("host") != me["host"]:
                os.close(fd)
                raise OutputBusyError(
                    f"{folder} is locked by {describe(old)} on another machine; if that run "
                    f"has ended, delete {path}"
                )
            _say(
                f"c4forge {command}: taking over the lock of {describe(old)} on {folder}: "
                "that process has ended"
            )
        data = json.dumps(me, sort_keys=True).encode("utf-8") + b"\n"
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)
        return _Held(path, me, fd=fd, inode=(st.st_dev, st.st_ino), created=created)
    raise OutputBusyError(f"{folder}: its lock file keeps changing; another run is starting there")


def _read_fd(fd: int) -> bytes:
    return os.pread(fd, 1 << 16, 0)


def _release_local(held: _Held) -> None:
    assert held.fd is not None
    with contextlib.suppress(OSError):
        now = os.stat(held.path)
        if (now.st_dev, now.st_ino) == held.inode:
            os.remove(held.path)  # while still flocked: nobody takes a lock being removed
    os.close(held.fd)
    if held.created is not None:  # a run that failed before writing leaves no empty folder
        with contextlib.suppress(OSError):
            os.rmdir(held.created)


# --- object stores -----------------------------------------------------------------------------


def _read_marker(path: str) -> dict[str, Any] | None:
    try:
        raw = storage.read_bytes(path) if storage.exists(path) else None
    except OSError:
        raw = None
    return None if raw is None else _parse(raw)


def _take_remote(folder: str, command: str) -> _Held:
    path = storage.join(folder, MARKER_NAME)
    me = _me(command)
    old = _read_marker(path)
    if old is not None:
        same_host = old.get("host") == me["host"]
        if not same_host or pid_alive(int(old.get("pid", 0) or 0)):
            raise OutputBusyError(
                f"{folder} is being written by {describe(old)} (run marker {path}); wait for "
                "it to end, or delete the marker if that run has ended"
            )
        _say(
            f"c4forge {command}: taking over the run marker of {describe(old)} on {folder}: "
            "that process has ended"
        )
    storage.write_bytes(path, json.dumps(me, sort_keys=True).encode("utf-8") + b"\n")
    held = _Held(path, me)
    _check_remote(folder, held)  # two runs that both found no marker: the last write wins
    return held


def _check_remote(folder: str, held: _Held) -> None:
    now = _read_marker(held.path)
    if now is None or now.get("run_id") != held.holder["run_id"]:
        who = describe(now) if now else "nobody (the marker was deleted)"
        raise OutputBusyError(
            f"{folder} was taken over by {who} while this run wrote it; nothing was committed"
        )


def _release_remote(held: _Held) -> None:
    now = _read_marker(held.path)
    if now is not None and now.get("run_id") == held.holder["run_id"]:
        with contextlib.suppress(Exception):
            storage.remove(held.path)


# --- the API -----------------------------------------------------------------------------------


def acquire(folder: str, command: str, name: str = LOCK_NAME) -> None:
    """Take ``folder`` for this process (created if local); ``OutputBusyError`` naming the
    holder when another live run has it. Pair with ``release``, or use ``owned_output``.
    ``name``: the lock file's name (``beside``: a folder replaced whole by a rename is held
    through a lock file in its parent)."""
    key = _key(folder, name)
    held = _HELD.get(key)
    if held is not None:
        held.depth += 1
        return
    _HELD[key] = (
        _take_remote(folder, command)
        if storage.is_remote(folder)
        else _take_local(folder, command, name)
    )


def beside(folder: str) -> tuple[str, str]:
    """``(parent, lock name)`` holding a folder that is written as a sibling and renamed into
    place (export): a lock file inside it would be renamed away with the old folder."""
    local = os.path.abspath(storage.normalize(folder))
    return os.path.dirname(local), f".{os.path.basename(local)}{LOCK_NAME}"


def release(folder: str, name: str = LOCK_NAME) -> None:
    key = _key(folder, name)
    held = _HELD.get(key)
    if held is None:
        return
    held.depth -= 1
    if held.depth > 0:
        return
    del _HELD[key]
    if held.fd is not None:
        _release_local(held)
    else:
        _release_remote(held)


def check_owner(folder: str) -> None:
    """Before a final commit: this process still owns ``folder`` (a folder it never took —
    a caller outside any command — passes). Object stores read the run marker again; a local
    lock file must still be the one this process holds."""
    held = _HELD.get(_key(folder))
    if held is None:
        return
    if held.fd is None:
        _check_remote(folder, held)
        return
    try:
        now = os.stat(held.path)
    except FileNotFoundError:
        now = None
    if now is None or (now.st_dev, now.st_ino) != held.inode:
        raise OutputBusyError(
            f"{folder}: its lock file {held.path} was removed or replaced while this run wrote "
            "it; nothing was committed"
        )


def holds(folder: str) -> bool:
    return _key(folder) in _HELD


@contextlib.contextmanager
def owned_output(folder: str, command: str, name: str = LOCK_NAME) -> Iterator[None]:
    """Hold ``folder`` for the block (see the module docstring)."""
    acquire(folder, command, name)
    try:
        yield
    finally:
        release(folder, name)


def owns_output(
    command: str, folder_of: Callable[..., str | tuple[str, str] | None]
) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Decorate a command's stage function so it holds its output folder while it runs:
    ``folder_of`` gets the function's arguments and names the folder (None: take nothing,
    e.g. a training rank other than the main one)."""

    def wrap(fn: Callable[..., T]) -> Callable[..., T]:
        @functools.wraps(fn)
        def inner(*args: Any, **kwargs: Any) -> T:
            folder = folder_of(*args, **kwargs)
            if folder is None:
                return fn(*args, **kwargs)
            where, name = folder if isinstance(folder, tuple) else (folder, LOCK_NAME)
            with owned_output(where, command, name):
                return fn(*args, **kwargs)

        return inner

    return wrap
