"""Fault injection for tests and benchmarks (never set in a real run).

Why: what Spark, Dataflow and the local engine do on every large job (a task retried after its
worker died, a bundle run twice, a speculative duplicate attempt) must leave the same bytes as
a run without faults. The only honest test is to make the real engine really retry: the
writers call ``at_write`` at their side-effect point, and a variable set in the environment
(which every engine's workers inherit) makes one of them die, raise or stall there.

``C4FORGE_FAULT`` is a comma-separated list of ``PATTERN:ACTION[:TIMES]``:

* ``PATTERN``: an ``fnmatch`` pattern on the base name of the file being written
  (``c4-train.*``, ``*.run``, ``chunk-*``; ``*`` for every file), or, for ``duplicate``, on a
  step label (``*`` for every step).
* ``ACTION``: ``kill`` (SIGKILL this process, as the OOM killer does, with the file's bytes
  written but not yet committed), ``kill-after`` (the same just after the commit, before the
  task has reported), ``raise`` (an ``OSError`` at the same point as ``kill``), ``stall``
  (sleep ``C4FORGE_FAULT_STALL_S`` seconds, default 20, before the commit: a straggler for
  speculative execution; every later write of the file leaves an ``again-…`` marker, the
  proof that another attempt ran), ``duplicate`` (the engine runs each matching task, bundle or
  element twice and keeps one attempt's output, as a speculative duplicate or a bundle
  re-run does; read by every engine; ``TIMES`` is ignored: every match).
* ``TIMES``: ``once`` (default: the first matching write of the whole run, across every
  process), ``each`` (once per distinct file: every side-effecting step fails once),
  ``always`` (every matching write: a task whose retries are all spent).

``once`` and ``each`` claim a marker file under ``C4FORGE_FAULT_MARKERS`` (a folder every
worker can write; required with them) with ``O_EXCL``, so a fault fires exactly once however
many processes race for it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import secrets
import signal
import time
from typing import NamedTuple

FAULT_ENV = "C4FORGE_FAULT"
MARKERS_ENV = "C4FORGE_FAULT_MARKERS"
STALL_ENV = "C4FORGE_FAULT_STALL_S"

WRITE_ACTIONS = ("kill", "kill-after", "raise", "stall")
ACTIONS = (*WRITE_ACTIONS, "duplicate")
TIMES = ("once", "each", "always")


class Fault(NamedTuple):
    pattern: str
    action: str
    times: str

    @property
    def spec(self) -> str:
        return f"{self.pattern}:{self.action}:{self.times}"


class InjectedFault(OSError):
    """The exception a ``raise`` fault throws (an ``OSError``: what a failed write raises)."""


def parse(text: str) -> list[Fault]:
    """``C4FORGE_FAULT``'s faults; a malformed entry is a ``ValueError`` naming it (a test
    hook must not silently do nothing)."""
    faults = []
    for entry in filter(None, (e.strip() for e in text.split(","))):
        parts = entry.split(":")
        if len(parts) == 2:
            parts.append("once")
        if len(parts) != 3 or parts[1] not in ACTIONS or parts[2] not in TIMES:
            raise ValueError(
                f"{FAULT_ENV}: bad entry {entry!r}; expected PATTERN:ACTION[:TIMES] with ACTION "
                f"one of {', '.join(ACTIONS)} and TIMES one of {', '.join(TIMES)}"
            )
        faults.append(Fault(*parts))
    return faults


def _faults() -> list[Fault]:
    text = os.environ.get(FAULT_ENV)
    return parse(text) if text else []


def _claim(fault: Fault, name: str) -> bool:
    """True for the one caller (across processes) that gets to fire ``fault`` for ``name``."""
    if fault.times == "always":
        return True
    folder = os.environ.get(MARKERS_ENV)
    if not folder:
        raise ValueError(f"{FAULT_ENV}={fault.spec} needs {MARKERS_ENV} (a marker folder)")
    key = fault.spec if fault.times == "once" else f"{fault.spec}|{name}"
    marker = os.path.join(folder, hashlib.sha256(key.encode()).hexdigest()[:24])
    os.makedirs(folder, exist_ok=True)
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(f"{key}\n{os.getpid()}\n")
    return True


def _mark(name: str, text: str) -> None:
    folder = os.environ.get(MARKERS_ENV)
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w") as f:
            f.write(text + "\n")


def fired(folder: str) -> int:
    """How many faults fired (markers claimed) under ``folder``: a test asserts a fault it set
    really happened."""
    return len(os.listdir(folder)) if os.path.isdir(folder) else 0


def at_write(path: str, committed: bool) -> None:
    """The writers' hook, called with the file's bytes written (``committed``: False before the
    rename that makes it visible, True just after). Does nothing unless ``C4FORGE_FAULT`` is
    set."""
    if FAULT_ENV not in os.environ:
        return
    name = os.path.basename(path.rstrip("/"))
    for fault in _faults():
        if fault.action not in WRITE_ACTIONS or (fault.action == "kill-after") != committed:
            continue
        if not fnmatch.fnmatchcase(name, fault.pattern):
            continue
        if not _claim(fault, path):
            if fault.action == "stall":  # another attempt of the straggler's task: record it
                _mark(f"again-{os.getpid()}-{secrets.token_hex(6)}", path)
            continue
        if fault.action in ("kill", "kill-after"):
            os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(60)  # never reached: the signal is delivered at once
        if fault.action == "raise":
            raise InjectedFault(f"injected fault ({fault.spec}) writing {path}")
        if fault.action == "stall":
            time.sleep(float(os.environ.get(STALL_ENV, "20")))


_marked: set[str] = set()  # the steps this process left a ``duplicate`` marker for


def duplicate(label: str) -> bool:
    """Whether the engine should run this step's task (or bundle, element) twice; each yes
    leaves a marker under ``C4FORGE_FAULT_MARKERS`` when it is set (``fired`` counts them)."""
    if FAULT_ENV not in os.environ:
        return False
    hit = any(f.action == "duplicate" and fnmatch.fnmatchcase(label, f.pattern) for f in _faults())
    if hit and label not in _marked:  # one marker per step and process
        _marked.add(label)
        _mark(f"duplicate-{os.getpid()}-{secrets.token_hex(6)}", label)
    return hit
