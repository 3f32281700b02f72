"""Errors a user can act on. The CLI prints them without a traceback and exits 2."""


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


class TaskFailedError(C4ForgeError):
    """A task's every attempt failed (its worker killed each time: out of memory?); the work
    finished so far is kept for ``--resume``."""
