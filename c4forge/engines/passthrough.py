"""Checks of the pass-through options of ``clean`` and ``shards`` (what argparse did not know).

Why: c4forge hands unknown arguments to the engine, and an engine left alone swallows a typo
(Beam logs "Discarding unparseable args" and carries on): ``--dedupe lines`` would build a
corpus with the default dedup and exit 0. Here every pass-through argument is parsed with the engine's
own option set before any work starts, and anything it does not know is a one-line error:

* Beam: the argparse parser Beam itself builds from every registered ``PipelineOptions``
  subclass (standard, Google Cloud, worker, direct, portable, Flink, Spark …) after importing
  the module of the chosen runner (so a runner's own options class is registered).
* ``--engine spark``: only ``--conf KEY=VALUE`` pairs, and only ``spark.*`` keys (spark-submit
  ignores any other key with a warning; here it is an error).
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Sequence

from c4forge.errors import ConfigError

# Runner name (as --runner takes it, lower case) → module that registers its options class.
_RUNNER_MODULES = {
    "dataflowrunner": "apache_beam.runners.dataflow.dataflow_runner",
    "flinkrunner": "apache_beam.runners.portability.flink_runner",
    "sparkrunner": "apache_beam.runners.portability.spark_runner",
    "portablerunner": "apache_beam.runners.portability.portable_runner",
    "prismrunner": "apache_beam.runners.portability.prism_runner",
}


def _hint(option: str, known: Sequence[str]) -> str:
    if option and not option.startswith("-"):
        # a bare value: the second value given to an option of c4forge, which takes one
        # (`--decontaminate glue mine=f.jsonl`, where `glue,mine=f.jsonl` was meant)
        return (
            " (a value with no option before it: a c4forge option takes one value; repeat the "
            "option, or join a list with commas as --decontaminate glue,NAME=FILE)"
        )
    close = difflib.get_close_matches(option, known, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


def beam_option_names(runner: str | None) -> tuple[argparse.ArgumentParser, list[str]]:
    """Beam's own parser for every registered ``PipelineOptions`` (the runner's included)."""
    import importlib

    from c4forge.engines.beam_options import quiet_beam_logging

    quiet_beam_logging()  # before Beam's first import: its import-time noise is not our error
    from apache_beam.options import pipeline_options as po

    module = _RUNNER_MODULES.get((runner or "").rsplit(".", 1)[-1].lower())
    if module:
        try:
            importlib.import_module(module)
        except ImportError:  # the runner's extra is not installed; its options stay unknown
            pass

    class _Parser(po._BeamArgumentParser):  # noqa: SLF001 - Beam's own option parser
        def error(self, message: str) -> None:  # type: ignore[override]
            raise ConfigError(f"bad Beam pipeline option: {message}")

    parser = _Parser(allow_abbrev=False)
    seen: dict[str, type] = {}
    for cls in po.PipelineOptions.__subclasses__():
        seen.setdefault(str(cls), cls)
    for cls in seen.values():
        cls._add_argparse_args(parser)  # noqa: SLF001 - as PipelineOptions.get_all_options
    names = [o for a in parser._actions for o in a.option_strings]  # noqa: SLF001
    return parser, names


def check_beam(extra: Sequence[str], runner: str | None, own: Sequence[str] = ()) -> None:
    """Every argument of ``extra`` must be a Beam pipeline option (with a valid value)."""
    if not extra:
        return
    parser, names = beam_option_names(runner)
    _, unknown = parser.parse_known_args(list(extra))
    if unknown:
        bad = unknown[0]
        option = bad.split("=", 1)[0]
        raise ConfigError(
            f"unknown option {bad!r}: not a c4forge option and not a Beam pipeline option "
            f"for runner {runner or 'DirectRunner'}{_hint(option, [*own, *names])}"
        )


def spark_conf_pairs(extra: Sequence[str], own: Sequence[str] = ()) -> list[tuple[str, str]]:
    """``--conf key=value`` pass-through (as spark-submit) with ``spark.*`` keys; anything else
    is a ConfigError naming the argument."""
    pairs: list[tuple[str, str]] = []
    it = iter(extra)
    for arg in it:
        value = None
        if arg == "--conf":
            value = next(it, None)
        elif arg.startswith("--conf="):
            value = arg[len("--conf=") :]
        if value is None or "=" not in value:
            raise ConfigError(
                f"unknown option for the Spark engine: {arg!r} (only --conf key=value is "
                f"passed to Spark; Beam options need --engine beam){_hint(arg.split('=')[0], own)}"
            )
        key, _, val = value.partition("=")
        if not key.startswith("spark."):
            raise ConfigError(f"--conf {value!r}: Spark configuration keys start with 'spark.'")
        pairs.append((key, val))
    return pairs


def check(engine: str, runner: str | None, extra: Sequence[str], own: Sequence[str] = ()) -> None:
    """Refuse, before any work, a pass-through argument the chosen engine does not know.

    ``own``: the command's own option names, for a "did you mean" hint on a typo."""
    if engine == "spark":
        spark_conf_pairs(extra, own)
    elif engine == "local":
        raise ConfigError(
            f"--engine local takes no engine options, got {' '.join(extra)!r}{_hint(extra[0], own)}"
        )
    else:
        check_beam(extra, runner, own)


def own_options(parser: argparse.ArgumentParser) -> list[str]:
    return [o for a in parser._actions for o in a.option_strings if o.startswith("--")]  # noqa: SLF001
