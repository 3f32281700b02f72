"""One way from the command line to a typed config.

Every command's options are a frozen dataclass whose fields declare their own flags in field
metadata (``option(...)``): flag names, help, choices, type/parse function, argument group. Two
functions join the dataclass and argparse, and nothing else does:

* ``add_flags(parser, Cls)`` adds the fields' flags to a parser, in field order (so the field
  order *is* the ``--help`` order), then checks the whole parser: every action must be one it
  made for a field, or have a dest declared CLI-only (one the command itself interprets, e.g.
  ``shards``' ``DOCS | verify DIR``). A flag without a field is an error when the parser is
  built, so a value can never be parsed and then silently dropped.
* ``from_args(Cls, args, **given)`` builds the dataclass from the parsed namespace: each flagged
  field from its dest (through the field's ``convert``), every other field from ``given``.

The command-line modules are the only callers of ``from_args``; everything below them takes the
dataclass, never an ``argparse.Namespace``. Programs (``c4forge experiment``, tests) build the
same dataclasses directly or from a mapping (``from_mapping``; ``override`` for a changed copy),
and an unknown key is a one-line ``ConfigError`` listing the valid ones.

Why not a library (jsonargparse, tyro, simple-parsing): each rewrites ``--help`` its own way, and
the commands' help text, flag names and defaults are a public interface kept byte-identical.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from c4forge.errors import ConfigError

_KEY = "c4forge.cli"  # the field-metadata key holding a field's ``CliSpec``
T = TypeVar("T")


class CliDeclarationError(TypeError):
    """A command's parser and its config dataclass disagree (a programming error)."""


@dataclass(frozen=True)
class Flag:
    """One ``add_argument`` call: names (``"--output", "-o"`` or a positional's name) and the
    other argparse keywords (help, type, choices, action, metavar, nargs, required …)."""

    names: tuple[str, ...]
    kwargs: Mapping[str, Any]

    @property
    def positional(self) -> bool:
        return not self.names[0].startswith("-")


@dataclass(frozen=True)
class CliSpec:
    """A field's command-line side: its flags (several flags may share the field, as
    ``--compile``/``--no-compile``), its argument group, and ``convert`` (parsed value → field
    value, e.g. a comma list → a list)."""

    flags: tuple[Flag, ...]
    group: str | None = None
    convert: Callable[[Any], Any] | None = None
    # a mapping field made of flags known only when the parser is built (each objective's own
    # options): () -> [(group title, dest, Flag)]; the field's value is {dest: parsed value}
    expand: Callable[[], Iterable[tuple[str | None, str, Flag]]] | None = None


def flag(*names: str, **kwargs: Any) -> Flag:
    """One flag of a field whose other flags share its dest (``option(flags=(…, …))``)."""
    return Flag(names, kwargs)


def option(
    *names: str,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    group: str | None = None,
    convert: Callable[[Any], Any] | None = None,
    flags: tuple[Flag, ...] = (),
    **kwargs: Any,
) -> Any:
    """A dataclass field with its command-line flag(s).

    ``names`` and ``kwargs`` are ``add_argument``'s (``dest`` is always the field's name);
    ``default`` is both the field's and the flag's (argparse's None when the field has none).
    """
    if names:
        flags = (Flag(names, kwargs), *flags)
    elif kwargs:
        raise CliDeclarationError(f"argparse keywords {sorted(kwargs)} without a flag name")
    if not flags:
        raise CliDeclarationError("option() needs a flag name or flags=(flag(...), ...)")
    spec = CliSpec(tuple(flags), group, convert)
    return dataclasses.field(
        default=default, default_factory=default_factory, metadata={_KEY: spec}
    )


def option_set(expand: Callable[[], Iterable[tuple[str | None, str, Flag]]]) -> Any:
    """A mapping field whose flags come from ``expand()`` when the parser is built: ``(group
    title, dest, flag)`` per flag; parsed, the field is ``{dest: value}`` (None = not given)."""
    return dataclasses.field(default_factory=dict, metadata={_KEY: CliSpec((), expand=expand)})


def _expanded(f: dataclasses.Field) -> list[tuple[str | None, str, Flag]]:
    spec = cli_spec(f)
    return list(spec.expand()) if spec is not None and spec.expand is not None else []


def cli_spec(f: dataclasses.Field) -> CliSpec | None:
    return f.metadata.get(_KEY)


def flagged_fields(cls: type) -> list[dataclasses.Field]:
    """The fields of ``cls`` that have command-line flags, in declaration (= ``--help``) order."""
    return [f for f in dataclasses.fields(cls) if cli_spec(f) is not None]


def _group(parser: argparse.ArgumentParser, title: str | None) -> Any:
    if title is None:
        return parser
    for group in parser._action_groups:  # noqa: SLF001 - reuse a group another call made
        if group.title == title:
            return group
    return parser.add_argument_group(title)


def _default(f: dataclasses.Field) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return None


def add_flags(
    parser: argparse.ArgumentParser,
    cls: type,
    *,
    cli_only: Iterable[str] = (),
    insert_after: Mapping[str, Iterable[Flag]] | None = None,
) -> argparse.ArgumentParser:
    """Add the flags of ``cls``'s fields to ``parser`` and check that every dest of the parser
    is accounted for: a flagged field (or a dest of an ``option_set`` field), or one of
    ``cli_only`` (interpreted by the command itself). Anything else raises
    ``CliDeclarationError``: call this after any flag added by hand. ``insert_after`` adds
    CLI-only flags right after a field's (``{field: flags}``: ``export``'s positional ``OUT``
    follows ``RUN_OR_CHECKPOINT``)."""
    cli_only = list(cli_only)
    insert_after = dict(insert_after or {})
    unknown = sorted(set(insert_after) - {f.name for f in flagged_fields(cls)})
    if unknown:
        raise CliDeclarationError(f"{cls.__name__}: insert_after names no flagged field {unknown}")
    made: list[argparse.Action] = []  # the actions of fields (the rest must be CLI-only)
    for f in flagged_fields(cls):
        spec = cli_spec(f)
        for title, dest, fl in _expanded(f):
            made.append(_group(parser, title).add_argument(*fl.names, dest=dest, **fl.kwargs))
        target = _group(parser, spec.group)
        for fl in spec.flags:
            kwargs = dict(fl.kwargs)
            if fl.positional:
                if fl.names != (f.name,):
                    raise CliDeclarationError(
                        f"{cls.__name__}.{f.name}: a positional flag is named after its field, "
                        f"got {fl.names}"
                    )
            else:
                kwargs["dest"] = f.name
            if not kwargs.get("required") and kwargs.get("action") not in ("version", "help"):
                # a converted field's flag parses to None when not given (then the field's own
                # default applies), so ``convert`` only ever sees command-line text
                kwargs.setdefault("default", None if spec.convert else _default(f))
            made.append(target.add_argument(*fl.names, **kwargs))
        for fl in insert_after.get(f.name, ()):
            action = target.add_argument(*fl.names, **fl.kwargs)
            cli_only.append(action.dest)
    _check_parser(parser, cls, made, cli_only)
    return parser


def _check_parser(
    parser: argparse.ArgumentParser,
    cls: type,
    made: list[argparse.Action],
    cli_only: list[str],
) -> None:
    """Every action of ``parser`` is one ``add_flags`` made for a field, or has a CLI-only
    dest that is no field's (so no value can be parsed for nothing, or land in a field twice)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    ours = {id(a) for a in made}
    only = set(cli_only)
    overlap = sorted(only & fields)
    if overlap:
        raise CliDeclarationError(f"{cls.__name__}: CLI-only dests {overlap} are also fields")
    seen = set()
    for action in parser._actions:  # noqa: SLF001
        if action.dest in ("help", argparse.SUPPRESS):
            continue
        seen.add(action.dest)
        if id(action) in ours or action.dest in only:
            continue
        what = "another owner than its field" if action.dest in fields else "no field"
        raise CliDeclarationError(
            f"{parser.prog}: option dest {action.dest!r} has {what} and is not declared "
            f"CLI-only ({cls.__name__} fields: {', '.join(sorted(fields))})"
        )
    stale = sorted(only - seen)
    if stale:
        raise CliDeclarationError(f"{parser.prog}: CLI-only dests without a flag: {stale}")


def field_flags(cls: type, name: str, **changes: Any) -> list[Flag]:
    """The flag(s) of field ``name`` of ``cls`` as ``add_flags`` adds them (dest = the field,
    default = the field's), ``changes`` replacing argparse keywords (a sharper ``help``): for a
    parser that offers a subset of a command's options (``shards task``, ``shards verify``)."""
    fields = {f.name: f for f in flagged_fields(cls)}
    if name not in fields:
        raise CliDeclarationError(f"{cls.__name__} has no flagged field {name!r}")
    spec = cli_spec(fields[name])
    out = []
    for fl in spec.flags:
        kwargs = dict(fl.kwargs)
        if not fl.positional:
            kwargs["dest"] = name
        if not kwargs.get("required"):
            kwargs.setdefault("default", None if spec.convert else _default(fields[name]))
        kwargs.update(changes)
        out.append(Flag(fl.names, kwargs))
    return out


def from_args(cls: type[T], args: Any, **given: Any) -> T:
    """``cls`` from a parsed namespace: each flagged field from its dest (``convert`` applied to
    a given value; not given, the field's default), each other field from ``given`` (which may
    also replace a flagged field's value)."""
    values: dict[str, Any] = {}
    for f in flagged_fields(cls):
        if cli_spec(f).expand is not None:
            values[f.name] = {dest: getattr(args, dest) for _, dest, _ in _expanded(f)}
            continue
        value = getattr(args, f.name)
        convert = cli_spec(f).convert
        if convert is None:
            values[f.name] = value
        elif value is not None:
            values[f.name] = convert(value)
    _check_keys(cls, given)
    values.update(given)
    return cls(**values)


def _check_keys(cls: type, data: Mapping[str, Any]) -> None:
    known = [f.name for f in dataclasses.fields(cls) if f.init]
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(
            f"{cls.__name__}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(known)}"
        )


def from_mapping(cls: type[T], data: Mapping[str, Any]) -> T:
    """``cls`` from a plain mapping (a JSON/YAML experiment file, a program): unknown keys and
    missing required ones are one-line ``ConfigError``s naming the valid keys."""
    _check_keys(cls, data)
    missing = [
        f.name
        for f in dataclasses.fields(cls)
        if f.init
        and f.name not in data
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{cls.__name__}: missing required key(s) {', '.join(missing)}")
    return cls(**data)


def override(config: T, changes: Mapping[str, Any]) -> T:
    """A copy of ``config`` with ``changes`` (validated again by the class); unknown keys are a
    one-line ``ConfigError``."""
    _check_keys(type(config), changes)
    return dataclasses.replace(config, **changes)


class CliConfig:
    """Mixin for the config dataclasses: the module functions as class methods, so a program
    writes ``TrainOptions.from_mapping({...})`` or ``opts.override({"steps": 10})``."""

    @classmethod
    def add_flags(cls, parser: argparse.ArgumentParser, **kwargs: Any) -> argparse.ArgumentParser:
        return add_flags(parser, cls, **kwargs)

    @classmethod
    def from_args(cls: type[T], args: Any, **given: Any) -> T:
        return from_args(cls, args, **given)

    @classmethod
    def from_mapping(cls: type[T], data: Mapping[str, Any]) -> T:
        return from_mapping(cls, data)

    def override(self: T, changes: Mapping[str, Any]) -> T:
        return override(self, changes)

    def to_dict(self) -> dict[str, Any]:
        """Field → value (shallow: nested configs stay objects)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}


# ----------------------------------------------------------------------------- argparse types


def positive(text: str) -> int:
    """An integer >= 1 (argparse ``type``: a bad value is argparse's usage error, exit 2)."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def non_negative(text: str) -> int:
    """An integer >= 0."""
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


# ----------------------------------------------------------------------------- --help


def default_text(default: Any) -> str:
    """A default as a user types it: ``a,b`` for a list, ``16`` for ``16.0``."""
    if isinstance(default, (list, tuple)):
        return ",".join(str(v) for v in default)
    if isinstance(default, float):
        return f"{default:g}"
    return str(default)


def shows_default(action: argparse.Action) -> bool:
    """Whether ``--help`` must name ``action``'s default: a value option (not a switch) whose
    default is a value (not None, not False: "not given")."""
    default = action.default
    return (
        action.nargs != 0
        and action.help != argparse.SUPPRESS
        and default is not None
        and default is not False
        and default != argparse.SUPPRESS
        and default not in ((), [])
    )


def names_default(text: str, shown: str) -> bool:
    """Whether help ``text`` already names the default ``shown`` next to the word "default":
    ``(default 13)``, ``default: auto``, ``auto (default)``, ``(default ./c4forge-demo)``."""
    value = re.escape(shown)
    pattern = rf"default\W{{0,3}}(\./)?{value}(?!\w)|(?<!\w){value}\W{{0,3}}default"
    return re.search(pattern, text, re.IGNORECASE) is not None


class _ShowDefaults:
    """Appends ``(default: X)`` to an option's help unless the help already names it
    (``default 13``, ``default: auto``), so no option's default is a secret of the code; a
    newline in a help string starts a new line (one per objective in ``--objective``)."""

    def _split_lines(self, text: str, width: int) -> list[str]:
        split = super()._split_lines  # type: ignore[misc]
        return [line for part in text.split("\n") for line in split(part, width)]

    def _get_help_string(self, action: argparse.Action) -> str:
        text = super()._get_help_string(action)  # type: ignore[misc]
        if not shows_default(action) or "%(default)" in (text or ""):
            return text
        shown = default_text(action.default)
        if names_default(text or "", shown):
            return text
        tail = f"(default: {shown})".replace("%", "%%")
        return f"{text} {tail}" if text else tail


class HelpFormatter(_ShowDefaults, argparse.HelpFormatter):
    """c4forge's ``--help`` layout: argparse's, every default shown."""


class RawDescriptionHelpFormatter(_ShowDefaults, argparse.RawDescriptionHelpFormatter):
    """For a description laid out by hand (``demo``, ``report``), every default shown."""


def with_shown_defaults(parser: argparse.ArgumentParser) -> None:
    """Give ``parser`` the matching formatter of this module (argparse's sub-parsers do not
    inherit their parent's): a raw description stays raw."""
    current = parser.formatter_class
    if isinstance(current, type) and issubclass(current, _ShowDefaults):
        return
    raw = isinstance(current, type) and issubclass(current, argparse.RawDescriptionHelpFormatter)
    parser.formatter_class = RawDescriptionHelpFormatter if raw else HelpFormatter
