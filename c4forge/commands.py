"""One way to run a command from a program: ``run(request) -> result``.

Every command package has a ``command`` module whose ``run`` takes the command's typed request
(the ``CliConfig`` dataclass its flags build: ``CleanJob``, ``VocabOptions``, ``ShardsJob`` …),
does what the command line does short of printing its closing summary, and returns a small
frozen result: the output folder, the figures the command reports, ``text()`` (the summary the
command line prints; empty where the command prints its own as it goes, as clean and shards
do) and ``fingerprint()`` (the sha256 that names what was written). A failure raises (a
``C4ForgeError`` for the user's mistakes); nothing returns an exit code. The CLI modules'
``run(args, extra) -> int`` build the request from argparse, call this, print ``text()``.

``run`` here finds a request's command from its type, so a driver of the chain (``demo``,
``experiments``) holds a table of requests and never a wrapper per command. The table below is
names, not imports: this module stays import-free, and a room never imports it.
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol


class CommandResult(Protocol):
    """What every command's ``run`` returns (each a frozen dataclass of its package)."""

    output: str

    def text(self) -> str:
        """The closing summary the command line prints ("" when the command printed its own)."""
        ...

    def fingerprint(self) -> str:
        """The sha256 naming the command's output (its completion file's, or the dataset's)."""
        ...


# request class name -> its command package's ``command`` module (whose ``REQUESTS`` holds the
# class and whose ``run`` takes it); one line per request type.
RUNNERS: dict[str, str] = {
    "CleanJob": "c4forge.clean.command",
    "VocabOptions": "c4forge.vocab.command",
    "ShardsJob": "c4forge.shards.command",
    "TaskShardsRequest": "c4forge.shards.command",
    "TrainOptions": "c4forge.trainers.command",
    "ExportOptions": "c4forge.trainers.command",
    "FinetuneOptions": "c4forge.finetune.command",
    "EvaluateOptions": "c4forge.finetune.command",
    "GlueOptions": "c4forge.finetune.command",
}


def runner_for(request: Any) -> Any:
    """The ``run`` of the command whose request ``request`` is (TypeError for any other)."""
    name = type(request).__qualname__
    module = importlib.import_module(RUNNERS[name]) if name in RUNNERS else None
    if module is None or type(request) not in module.REQUESTS:
        raise TypeError(f"{name} is not a command's request (one of {', '.join(RUNNERS)})")
    return module.run


def run(request: Any) -> CommandResult:
    """Run the command ``request`` is for; returns its result, raises on failure."""
    return runner_for(request)(request)
