"""Errors a user can act on. The CLI prints them without a traceback and exits 2."""

import json
import re


class C4ForgeError(Exception):
    """Base class: bad input, bad configuration, or an output that would be overwritten."""


class InputError(C4ForgeError):
    """A missing path, an empty glob, a file of the wrong kind."""


class ConfigError(C4ForgeError):
    """An option value that cannot work (e.g. more sentinels than the vocabulary has)."""


class OutputExistsError(C4ForgeError):
    """The output folder holds a finished run; pass --overwrite to replace it."""


class VerificationError(C4ForgeError):
    """A manifest, checksum, vocabulary or schema does not match what was expected."""


class StorageError(C4ForgeError):
    """Listing, reading or writing a (usually remote) path failed; never read as "absent"."""


class JSONFileError(VerificationError, json.JSONDecodeError):
    """A JSON file c4forge reads (stats.json, index.json, a ``_work/`` record …) is cut, not
    UTF-8 or not JSON. Also a ``JSONDecodeError``, so callers that treat a torn record as
    "not done" keep doing so; uncaught, it is the one-line error naming the file."""

    def __init__(self, path: str, why: str, doc: str = "", pos: int = 0) -> None:
        json.JSONDecodeError.__init__(self, why, doc, pos)
        self.path = path
        self.why = why

    def __str__(self) -> str:
        return f"{self.path}: not a valid JSON file ({self.why})"

    def __reduce__(self):  # noqa: ANN204 - pickled across engine workers
        return (type(self), (self.path, self.why))


# OSError numbers that mean the machine, not c4forge, stopped the work: a read-only or full
# disk, a file size limit, permissions, a file standing where a folder is needed (or the
# reverse). Only these become one-line errors; any other exception keeps its traceback, so a
# programming error is never hidden behind a tidy message.
_FAULTS = {
    "EROFS": "read-only file system",
    "ENOSPC": "no space left on device",
    "EDQUOT": "disk quota exceeded",
    "EFBIG": "file too large (a file size limit was reached)",
    "EACCES": "permission denied",
    "EPERM": "operation not permitted",
    "ENOTDIR": "not a directory (a file stands where a folder is needed)",
    "EISDIR": "is a directory (a folder stands where a file is needed)",
}


def environment_fault(err: BaseException, output: str | None = None) -> str | None:
    """The one-line message for an ordinary fault of the machine found in ``err`` or the
    exceptions it was raised from (engines wrap their workers' errors), else ``None``.

    ``output``: the command's output path, named when the OS did not say which file failed
    (a full disk is reported on ``write``, which has no file name)."""
    import errno

    seen: set[int] = set()
    todo: list[BaseException | None] = [err]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen or len(seen) > 32:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno is not None:
            name = errno.errorcode.get(e.errno, "")
            if name == "EEXIST" and _raised_by_makedirs(e):
                # makedirs(exist_ok=True) raises this only when a file stands at the path.
                return f"{e.filename}: exists and is not a folder"
            if name in _FAULTS:
                if e.filename is None:
                    return _FAULTS[name] + (f" (writing {output})" if output else "")
                extra = f" → {e.filename2}" if e.filename2 is not None else ""
                return f"{e.filename}{extra}: {_FAULTS[name]}"
        todo += [e.__cause__, e.__context__]
        message = _wrapped_fault(e)
        if message is not None:
            return message if ": " in message or not output else f"{message} (writing {output})"
    return None


# How a worker's OSError reads once an engine re-raised it as text: Beam's runners raise
# ``RuntimeError("OSError: [Errno 28] No space left on device [while running 'pass0']")``,
# Spark a Py4J/PySpark error holding the Python worker's traceback.
_WRAPPED = re.compile(r"\b\w*Error: \[Errno (\d+)\] ([^\n\[]*)")
_ENGINE_MODULES = ("apache_beam", "py4j", "pyspark")


def _wrapped_fault(err: BaseException) -> str | None:
    """The fault of a worker's OSError that an engine passed on only as text, else ``None``."""
    import errno

    kind = type(err)
    if kind is not RuntimeError and not kind.__module__.startswith(_ENGINE_MODULES):
        return None
    for m in reversed(list(_WRAPPED.finditer(str(err)))):
        name = errno.errorcode.get(int(m.group(1)), "")
        if name in _FAULTS:
            where = m.group(2).rsplit(": ", 1)
            path = where[1].strip().strip("'\"") if len(where) == 2 else ""
            return f"{path}: {_FAULTS[name]}" if path else _FAULTS[name]
    return None


def _raised_by_makedirs(err: OSError) -> bool:
    """Did ``os.makedirs`` raise ``err`` (its innermost frame)? Other ``EEXIST`` errors (an
    exclusive create that lost a race) are left to their traceback."""
    tb = err.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return code.co_name == "makedirs" and code.co_filename.replace("\\", "/").endswith(
        ("/os.py", "<frozen os>")
    )


class TaskFailedError(C4ForgeError):
    """A task's every attempt failed (its worker killed each time: out of memory?); the work
    finished so far is kept for ``--resume``."""
