"""``c4forge.cliconfig``: the one way from the command line to a typed config.

Real argparse parsers (the commands' own, from ``c4forge.cli.build_parser``) and the real config
dataclasses; nothing is mocked.
"""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from c4forge import cliconfig
from c4forge.clean.config import CleanJob
from c4forge.cli import COMMANDS, build_parser
from c4forge.cliconfig import CliConfig, CliDeclarationError, flag, option
from c4forge.errors import ConfigError
from c4forge.finetune.options import EvaluateOptions, FinetuneOptions, GlueOptions
from c4forge.shards.job import ShardsJob
from c4forge.trainers.cli_export import ExportOptions
from c4forge.trainers.options import TrainOptions
from c4forge.vocab.options import VocabOptions


@dataclasses.dataclass(frozen=True, kw_only=True)
class Toy(CliConfig):
    name: str = option("name", help="a positional")
    size: int = option("--size", default=3, type=int, help="a number")
    fast: bool | None = option(
        default=None,
        flags=(flag("--slow", action="store_false"), flag("--fast", action="store_true")),
    )
    items: list[str] = option("--items", default_factory=list, convert=lambda s: s.split(","))
    note: str = "not a flag"


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="toy")


def test_a_flag_without_a_field_is_an_error_when_the_parser_is_built():
    p = _parser()
    p.add_argument("--colour")  # parsed, but no field would receive it
    with pytest.raises(CliDeclarationError, match="dest 'colour' has no field"):
        Toy.add_flags(p)
    p = _parser()
    p.add_argument("--colour")
    Toy.add_flags(p, cli_only=("colour",))  # declared as the command's own: accepted


def test_declarations_that_cannot_be_honoured_are_refused():
    p = _parser()
    p.add_argument("--size-2", dest="size")  # a second owner of a field's dest
    with pytest.raises(CliDeclarationError, match="'size' has another owner than its field"):
        Toy.add_flags(p)
    with pytest.raises(CliDeclarationError, match="without a flag"):
        Toy.add_flags(_parser(), cli_only=("ghost",))
    with pytest.raises(CliDeclarationError, match="also fields"):
        p = _parser()
        p.add_argument("--note")
        Toy.add_flags(p, cli_only=("note",))

    @dataclasses.dataclass(frozen=True)
    class Misnamed(CliConfig):
        path: str = option("where")  # a positional's dest is its name: it must be the field's

    with pytest.raises(CliDeclarationError, match="positional flag is named after its field"):
        Misnamed.add_flags(_parser())


def test_from_args_reads_every_flag_and_the_given_fields():
    p = Toy.add_flags(_parser())
    t = Toy.from_args(p.parse_args(["n", "--size", "5", "--fast", "--items", "a,b"]), note="x")
    assert t == Toy(name="n", size=5, fast=True, items=["a", "b"], note="x")
    assert Toy.from_args(p.parse_args(["n", "--slow"])).fast is False
    assert Toy.from_args(p.parse_args(["n"])) == Toy(name="n")  # CLI defaults = field defaults
    with pytest.raises(ConfigError, match="unknown key"):
        Toy.from_args(p.parse_args(["n"]), colour="red")


def test_from_mapping_and_override_refuse_unknown_keys_in_one_line():
    t = Toy.from_mapping({"name": "n", "size": 7})
    assert t.size == 7 and t.override({"size": 8}).size == 8 and t.size == 7
    with pytest.raises(ConfigError) as err:
        TrainOptions.from_mapping({"shards": "s", "output": "o", "steps": 1, "stepz": 2})
    message = str(err.value)
    assert "\n" not in message and "unknown key(s) stepz" in message
    assert "valid: shards, output, steps, preset" in message
    with pytest.raises(ConfigError, match="missing required key.*steps"):
        TrainOptions.from_mapping({"shards": "s", "output": "o"})
    with pytest.raises(ConfigError, match="unknown key.*lrr"):
        TrainOptions(shards="s", output="o", steps=1).override({"lrr": 1.0})


# (command, the arguments a run needs, its config class, the fields those arguments set)
REQUIRED = {
    "clean": (["in.wet.gz", "-o", "out"], CleanJob, {"inputs": ("in.wet.gz",), "output": "out"}),
    "vocab": (["docs", "-o", "v"], VocabOptions, {"docs": "docs", "output": "v"}),
    "train": (
        ["s", "-o", "r", "--steps", "3"],
        TrainOptions,
        {"shards": "s", "output": "r", "steps": 3},
    ),
    "finetune": (
        ["ck", "--task", "sst2", "--data", "d", "-o", "f"],
        FinetuneOptions,
        {"checkpoint": "ck", "task": "sst2", "data": "d", "output": "f"},
    ),
    "glue": (
        ["ck", "--data", "d", "-o", "g"],
        GlueOptions,
        {"checkpoint": "ck", "data": "d", "output": "g"},
    ),
    "evaluate": (
        ["ft", "--task", "sst2", "--data", "d"],
        EvaluateOptions,
        {"ft": "ft", "task": "sst2", "data": "d"},
    ),
    "export": (["run", "-o", "hf"], ExportOptions, {"checkpoint": "run", "output": "hf"}),
}


@pytest.mark.parametrize("command", sorted(REQUIRED))
def test_each_command_s_defaults_are_its_config_s_defaults(command):
    """The CLI and a program (``from_mapping``) get the same config for the same request."""
    argv, cls, given = REQUIRED[command]
    args = build_parser().parse_args([command, *argv])
    assert cls.from_args(args) == cls.from_mapping(given)


def test_shards_options_keep_each_objective_s_own_flags():
    args = build_parser().parse_args(
        ["shards", "docs", "--vocab", "v", "-o", "o", "--objective", "prefix_lm"]
    )
    opts = ShardsJob.from_args(args, docs="docs")
    assert opts == ShardsJob.from_mapping(
        {
            "docs": "docs",
            "vocab": "v",
            "output": "o",
            "objective": "prefix_lm",
            "objective_options": opts.objective_options,
        }
    )
    # every objective's own option is a key (None: not given), and nothing else is
    from c4forge.objectives.registry import objective_options

    own = {o.name for options in objective_options().values() for o in options}
    assert set(opts.objective_options) == own and not any(opts.objective_options.values())


def test_every_command_parser_maps_every_dest():
    """``build_parser`` builds every subcommand through ``add_flags``; each check passes, and
    each config field with a flag is a dest of its command's parser."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == set(COMMANDS)
    for command, cls in (
        ("clean", CleanJob),
        ("vocab", VocabOptions),
        ("shards", ShardsJob),
        ("train", TrainOptions),
        ("finetune", FinetuneOptions),
        ("glue", GlueOptions),
        ("evaluate", EvaluateOptions),
        ("export", ExportOptions),
    ):
        dests = {a.dest for a in sub.choices[command]._actions}
        fields = {f.name for f in cliconfig.flagged_fields(cls)} - {"objective_options"}
        assert fields <= dests, (command, fields - dests)


def test_every_train_flag_reaches_its_field():
    """Each flag of `train`, given a non-default value, arrives in ``TrainOptions`` (a flag whose
    value went nowhere would leave its field at the default)."""
    argv = [
        "train",
        "s",
        "-o",
        "r",
        "--steps",
        "9",
        "--preset",
        "small",
        "--ffn",
        "swiglu",
        "--d-ff",
        "64",
        "--tie-embeddings",
        "--attn",
        "eager",
        "--dropout",
        "0.2",
        "--vocab",
        "v",
        "--batch-size",
        "3",
        "--grad-accum",
        "2",
        "--optimizer",
        "adamw",
        "--schedule",
        "cosine",
        "--lr",
        "0.5",
        "--warmup",
        "4",
        "--grad-clip",
        "0.7",
        "--z-loss",
        "0.001",
        "--seed",
        "5",
        "--shuffle-batches",
        "6",
        "--device",
        "cpu",
        "--resume",
        "--eval-every",
        "2",
        "--eval-rows",
        "11",
        "--save-every",
        "3",
        "--keep-checkpoints",
        "4",
        "--log-every",
        "5",
        "--compile",
        "--verify-shards",
        "full",
        "--num-workers",
        "1",
        "--threads",
        "3",
        "--deterministic",
        "--no-progress",
        "--stop-after-step",
        "8",
        "--mix",
        "a",
        "--mix",
        "b=c",
        "--mix-rates",
        "1,2,3",
        "--mix-strategy",
        "rates",
        "--mix-limit",
        "7",
        "--mix-temperature",
        "2",
        "--mix-pad",
    ]
    opts = TrainOptions.from_args(build_parser().parse_args(argv))
    defaults = TrainOptions(shards="x", output="y", steps=1)
    unchanged = [
        f.name
        for f in dataclasses.fields(TrainOptions)
        if getattr(opts, f.name) == getattr(defaults, f.name)
    ]
    assert unchanged == []
    assert opts.shuffle_window == 6 and opts.resume == "auto" and opts.compile is True
    assert opts.mix == ("a", "b=c")
