"""`--help` of every command: each option explained, each default shown, no stale or raw words.

The test walks the real parser tree (``c4forge.cli.parser_tree``: the top parser, every command,
and the forms a command parses itself, `shards verify` and `shards task`), so an option added
later without help, or with a default its help hides, fails here.
"""

from __future__ import annotations

import argparse
import re

import pytest

from c4forge.cli import build_parser, main, parser_tree

# Words that once described a command wrongly: clean runs on three engines, not as a Beam job.
STALE = ("(Beam job;", "DirectRunner worker processes", "DirectRunner default", "Beam workers")


def _parsers() -> list[argparse.ArgumentParser]:
    return list(parser_tree(build_parser()))


def _options(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    return [
        a
        for a in parser._actions  # noqa: SLF001
        if not isinstance(a, (argparse._HelpAction, argparse._VersionAction))  # noqa: SLF001
        and not isinstance(a, argparse._SubParsersAction)  # noqa: SLF001
        and a.help != argparse.SUPPRESS
    ]


def _shown(default: object) -> str:
    """How a user would read the default: ``16`` for 16.0, ``a,b`` for a list."""
    if isinstance(default, (list, tuple)):
        return ",".join(map(str, default))
    return f"{default:g}" if isinstance(default, float) else str(default)


def _rendered(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    """The option's help exactly as `--help` prints it (defaults and %-fields expanded)."""
    return parser._get_formatter()._expand_help(action)  # noqa: SLF001


def test_the_tree_holds_every_command_and_the_nested_forms() -> None:
    progs = [p.prog for p in _parsers()]
    for command in ("clean", "vocab", "shards", "train", "finetune", "evaluate", "experiment"):
        assert f"c4forge {command}" in progs
    assert "c4forge shards task" in progs and "c4forge shards verify" in progs
    assert sum(len(_options(p)) for p in _parsers()) > 200


def test_every_option_has_help_and_shows_its_default() -> None:
    missing, hidden = [], []
    for parser in _parsers():
        for action in _options(parser):
            name = f"{parser.prog} {'/'.join(action.option_strings) or action.dest}"
            text = _rendered(parser, action) if action.help else ""
            if not text.strip():
                missing.append(name)
                continue
            default = action.default
            if action.nargs == 0 or default in (None, False, (), []):
                continue  # a switch, or "not given": nothing to show
            shown = re.escape(_shown(default))
            near = rf"default\W{{0,3}}(\./)?{shown}(?!\w)|(?<!\w){shown}\W{{0,3}}default"
            if not re.search(near, text, re.IGNORECASE):
                hidden.append(f"{name} (default {shown!r}): {text}")
    assert not missing, "options without help:\n" + "\n".join(missing)
    assert not hidden, "defaults the help does not show:\n" + "\n".join(hidden)


def test_no_default_is_said_twice() -> None:
    """A help that already calls a value the default (``0 = off (default)``, ``off by
    default``) but not next to the value gets the formatter's ``(default: X)`` as well: the
    user reads the default twice. The help names it once, and the formatter adds it."""
    twice = []
    for parser in _parsers():
        for action in _options(parser):
            text = _rendered(parser, action) if action.help else ""
            head, appended, _ = text.rpartition(" (default: ")
            if appended and re.search(r"\(default\)|by default|\Wdefault\)", head, re.I):
                twice.append(f"{parser.prog} {'/'.join(action.option_strings)}: {text}")
    assert not twice, "defaults said twice:\n" + "\n".join(twice)


def test_no_stale_words_no_raw_rst_and_sane_usage_lines() -> None:
    for parser in _parsers():
        text = parser.format_help()
        assert "``" not in text, f"{parser.prog}: raw reStructuredText in --help"
        for words in STALE:
            assert words not in text, f"{parser.prog}: stale words {words!r}"
        for action in _options(parser):
            if not action.option_strings:  # a positional's name is one word in the usage line
                metavar = action.metavar or action.dest
                assert isinstance(metavar, str) and " " not in metavar, (parser.prog, metavar)
    top = build_parser().format_help()
    assert re.search(r"clean +WET files → C4 documents \(local, Spark or Beam", top)
    usage = next(p for p in _parsers() if p.prog == "c4forge shards").format_usage()
    assert "c4forge shards DOCS" in usage and "shards task NAME" in usage
    assert "DOCS | verify" not in usage


@pytest.mark.parametrize(
    "form, expect",
    [("task", ["--inputs-length", "--data", "--input-field", "NAME"]), ("verify", ["DIR"])],
)
def test_a_nested_form_prints_its_own_help(form: str, expect: list[str], capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["shards", form, "--help"])
    assert stop.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: c4forge shards {form} ")
    assert all(word in out for word in expect)
    # options of `shards DOCS` that do not apply to the form are not offered
    assert "--engine" not in out and "--objective" not in out and "--runner" not in out


def test_a_nested_form_refuses_an_option_it_does_not_take(capsys) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["shards", "task", "sst2", "--vocab", "v", "-o", "o", "--objective", "prefix_lm"])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "usage: c4forge shards task" in err and "--objective" in err


def test_objective_help_describes_every_registered_objective() -> None:
    from c4forge.objectives.registry import OBJECTIVES

    shards = next(p for p in _parsers() if p.prog == "c4forge shards")
    action = next(a for a in _options(shards) if "--objective" in a.option_strings)
    text = re.sub(r"\s+", " ", _rendered(shards, action))
    assert len(OBJECTIVES) == 8
    for name, spec in OBJECTIVES.items():
        assert spec.description, f"{name}: no description in the registry"
        assert f"{name} ({spec.reference}): {spec.description}" in text
    assert "(default: span_corruption)" in text
