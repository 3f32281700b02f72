"""The shape every refused command must have: exit 2 and one line on stderr, no traceback."""

from __future__ import annotations

from c4forge.cli import main


def one_line_error(capsys, argv: list[str], *needles: str) -> str:
    """Run ``c4forge argv`` in this process; its stderr, after checking it is one line holding
    every needle."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err
