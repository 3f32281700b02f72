"""Entry point of the local SDK worker processes (``python -m c4forge.engines.beam_worker``).

Beam's own ``sdk_worker_main`` with two kinds of output removed, so the end-of-job summary or
the one-line error is what the user reads:
- Beam 2.77's start-up chatter (``beam_options.BEAM_NOISE``, e.g. "apitools not found" from
  every worker);
- the worker-side traceback of a c4forge user error (a bad input file): Beam prints it to the
  worker's stderr itself (``sdk_worker._execute``), the CLI then prints the same error once as
  ``c4forge clean: error: …``. Tracebacks of anything else (real bugs) still show.
"""

from __future__ import annotations

import sys
from typing import TextIO

from c4forge.engines.beam_options import quiet_beam_logging

USER_ERROR_MARK = "c4forge.errors."


class _DropUserErrorTracebacks:
    """A stderr that swallows single writes holding a c4forge user-error traceback."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._swallowed = False

    def write(self, text: str) -> int:
        # print() writes the text, then "\n" on its own: drop that newline too.
        dropped = (USER_ERROR_MARK in text and "Traceback" in text) or (
            self._swallowed and text == "\n"
        )
        self._swallowed = dropped and text != "\n"
        return len(text) if dropped else self._stream.write(text)

    def __getattr__(self, name: str):  # noqa: ANN204 - delegate flush, fileno, encoding…
        return getattr(self._stream, name)


def main() -> None:
    quiet_beam_logging()
    sys.stderr = _DropUserErrorTracebacks(sys.stderr)  # type: ignore[assignment]
    from apache_beam.runners.worker import sdk_worker_main

    sdk_worker_main.main(sys.argv)


if __name__ == "__main__":
    main()
