"""Progress of SentencePiece's training, read from its own log while it runs.

Why: the trainer is C++ that reports nothing to Python until it returns; on the default sample
(1e8 characters) that is the longest part of ``c4forge vocab``, and it ran silent between
"vocab: sampled …" and the summary. Its log (hidden unless ``--verbose``) says what it is doing:
the seed pieces it found, then one line per EM sub-iteration with the current piece count. The
unigram trainer prunes the pieces by ``SHRINKING_FACTOR`` after every ``SUB_ITERATIONS`` EM
steps until they fit ``vocab_size × 1.1``, so the number of pruning rounds left follows from the
last count. A thread tails the log into a ``c4forge.progress`` display: a bar of rounds on a
terminal, a line per ``C4FORGE_PROGRESS_SECONDS`` in a log, ending at 100 % when training ends.
"""

from __future__ import annotations

import math
import os
import re
import sys
import threading
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any

# SentencePiece's unigram trainer (trainer_spec defaults; c4forge does not change them).
SHRINKING_FACTOR = 0.75
SUB_ITERATIONS = 2
DESIRED_OVER_VOCAB = 1.1  # the trainer prunes to vocab_size × 1.1, then keeps the best

_PHASES = (  # (log text, what the display says), in the order the trainer writes them
    ("Loaded all", "loading sentences"),
    ("Normalizing sentences", "normalising"),
    ("Extracting seed sentencepieces", "finding seed pieces"),
    ("Tokenizing input sentences", "tokenising"),
    ("Using ", "EM"),
)
_SEEDS = re.compile(r"Initialized (\d+) seed pieces")
_EM = re.compile(r"EM sub_iter=(\d+) size=(\d+)")


@dataclass(frozen=True)
class TrainerState:
    """What the log says so far: the phase, pruning rounds done and expected, current pieces."""

    phase: str
    rounds: int = 0
    total: int | None = None
    pieces: int | None = None


def rounds_left(pieces: int, target: int) -> int:
    """Pruning rounds still to run after a round that ended with ``pieces`` (0: it was the last).

    A round prunes to ``max(target, SHRINKING_FACTOR × pieces)``; training stops after the round
    whose pruning reaches ``target``."""
    if pieces <= target:
        return 0
    return max(0, math.ceil(math.log(target / pieces) / math.log(SHRINKING_FACTOR)) - 1)


def read_state(log: str, vocab_size: int) -> TrainerState:
    """The trainer's state from the text of its log so far (a cut last line is ignored)."""
    target = int(vocab_size * DESIRED_OVER_VOCAB)
    log = log[: log.rfind("\n") + 1]  # a line being written could end mid-number: not yet
    phase = "starting"
    for marker, name in _PHASES:
        if marker in log:
            phase = name
    seeds = _SEEDS.findall(log)
    pieces = int(seeds[-1]) if seeds else None
    rounds, total = 0, None
    for sub_iter, size in _EM.findall(log):
        pieces = int(size)
        if int(sub_iter) == SUB_ITERATIONS - 1:  # a round's last EM step: it prunes next
            rounds += 1
            total = rounds + rounds_left(pieces, target)
    if phase == "EM" and pieces is not None:
        phase = f"EM, {pieces:,} pieces → {target:,}"
    elif phase == "tokenising" and pieces is not None:
        phase = f"tokenising, {pieces:,} seed pieces"
    return TrainerState(phase, rounds, total, pieces)


class TrainerProgress:
    """Tails ``log_path`` every ``interval`` seconds into a progress display while the trainer
    runs; on exit reads the whole log once more and, after a successful run, ends at 100 %."""

    def __init__(self, log_path: str, vocab_size: int, *, interval: float = 0.5) -> None:
        self.log_path, self.vocab_size, self.interval = log_path, vocab_size, interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bar: Any = None
        self._stream: IO[str] = sys.stderr
        self.state = TrainerState("starting")

    def __enter__(self) -> TrainerProgress:
        from c4forge.progress import progress

        self._stream = _stderr_kept()
        self._bar = progress(total=None, desc="vocab training", unit="round", file=self._stream)
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._show()
        if exc_type is None and self.state.rounds:  # finished: every round it ran is done
            self._bar.total = self._bar.n = self.state.rounds
        self._bar.close()
        if self._stream is not sys.stderr:
            self._stream.close()

    def _poll(self) -> None:
        while not self._stop.wait(self.interval):
            self._show()

    def _show(self) -> None:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                text = f.read()
        except OSError:
            return
        self.state = read_state(text, self.vocab_size)
        bar = self._bar
        if self.state.total is not None:
            bar.total = max(self.state.total, self.state.rounds)
        bar.set_postfix(phase=self.state.phase)
        bar.update(self.state.rounds - bar.n)  # 0: still a line per period in a log


def _stderr_kept() -> IO[str]:
    """Where the display writes while the trainer's log takes file descriptor 2: a copy of
    descriptor 2 when ``sys.stderr`` writes there (else the display would land in the log it
    reads), otherwise ``sys.stderr`` itself (a stage log, a test's capture)."""
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.stderr
    if fd != 2:
        return sys.stderr
    sys.stderr.flush()
    return os.fdopen(os.dup(2), "w", encoding="utf-8", errors="replace")


def log_path_in(folder: str) -> str:
    """Where the trainer's log goes while a display reads it (a c4forge temporary folder)."""
    return os.path.join(folder, "sentencepiece.log")
