"""``ShardsJob``: one `c4forge shards DOCS …` build as asked for: its flags, validated once.

The one typed request of the stage, as ``CleanJob`` is clean's: the command line builds it
(``from_args``), a program builds it (``from_mapping``, or the constructor), and the driver,
the engines (``workers``, ``runner``, ``master``, ``passthrough``) and the stage read it. What
needs the inputs read (the vocabulary's size for the token dtype and the objective's sentinels,
the clean files, the manifest) is ``c4forge.shards.build.resolve``'s, not the request's.

Light (argparse, the objective registry; no Beam, no Arrow) so ``--help`` stays quick. The field
order is the order of ``shards --help``; each objective's own options come from the registry
when the parser is built (``option_set``), so a registered objective gets its flags with no
change here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from c4forge.cliconfig import CliConfig, Flag, option, option_set
from c4forge.engines.choose import check_runner
from c4forge.engines.options import (
    engine_option,
    master_option,
    runner_option,
    workers_option,
)
from c4forge.errors import ConfigError
from c4forge.objectives.registry import OBJECTIVES, objective_options, objectives_help


def _objective_flags() -> Iterator[tuple[str, str, Flag]]:
    """Each registered objective's own options, one argument group per objective."""
    for name, options in objective_options().items():
        title = f"{name} only ({OBJECTIVES[name].reference})"
        for o in options:
            yield title, o.name, Flag((o.flag,), {"type": o.type, "default": None, "help": o.help})


@dataclass(frozen=True, kw_only=True)
class ShardsJob(CliConfig):
    """One shard build as asked for (None = the objective's / the vocabulary's default)."""

    docs: str  # the clean documents folder (the CLI's `DOCS` positional)
    vocab: str | None = option(
        "--vocab",
        default=None,  # required: refused below with the CLI's message
        help="`c4forge vocab` folder (vocab.json), or a plain SentencePiece .model (+ --extra-ids)",
    )
    extra_ids: int | None = option(
        "--extra-ids",
        default=None,
        type=int,
        help="sentinels added to a plain .model (default 100)",
    )
    output: str | None = option("--output", "-o", default=None, help="output shard folder")
    # choices: the live registry (an objective registered later is a valid choice)
    objective: str = option(
        "--objective",
        default="span_corruption",
        choices=OBJECTIVES,
        metavar="NAME",
        help="pretraining objective (objectives.md §3-4), its T5 config, what it does:\n"
        + objectives_help(),
    )
    inputs_length: int | None = option(
        "--inputs-length",
        default=None,
        type=int,
        help="encoder row length (default: objective's; bert_mlm_nsp: max_seq_length, 128)",
    )
    targets_length: int | None = option(
        "--targets-length",
        default=None,
        type=int,
        help="decoder row length (default: objective's)",
    )
    noise_density: float | None = option(
        "--noise-density", default=None, type=float, help="default 0.15"
    )
    mean_noise_span_length: float | None = option(
        "--mean-noise-span-length", default=None, type=float, help="default 3.0"
    )
    packing: str = option(
        "--packing",
        default="concat",
        choices=["concat", "per_document"],
        help="concat = T5 (documents concatenated, one example per row); per_document = "
        "examples never mix documents, first-fit packed with segment ids",
    )
    pack_window: int = option(
        "--pack-window",
        default=512,
        type=int,
        help="per_document: examples per first-fit window",
    )
    doc_separator: str = option(
        "--doc-separator",
        default="none",
        choices=["none", "eos"],
        help="none = T5 (no separator between concatenated documents); eos = HF/nanoT5",
    )
    objective_options: Mapping[str, Any] = option_set(_objective_flags)  # name → value
    num_shards: str | None = option(
        "--num-shards",
        default="auto",
        help="N (train), or train=N,validation=M; default auto = the clean shard count per split",
    )
    rows_per_shard: int | None = option(
        "--rows-per-shard",
        default=None,
        type=int,
        help="size shards by rows instead: num_shards = ceil(rows / N) per split",
    )
    batch_rows: int = option(
        "--batch-rows", default=1024, type=int, help="rows per Arrow record batch"
    )
    seed: int = option(
        "--seed",
        default=0,
        type=int,
        help="seed of every random choice (noise masks, chunks, shard keys): the same seed, "
        "inputs and options give byte-identical shards",
    )
    token_dtype: str = option(
        "--token-dtype",
        default="auto",
        choices=["auto", "uint16", "int32"],
        help="token column type; auto = uint16 when the vocabulary (sentinels included) fits "
        "in 65,536 ids, else int32",
    )
    compression: str | None = option(
        "--compression",
        default="none",
        choices=["none", "lz4"],
        help="Arrow IPC buffer compression of the shards (lz4: smaller files)",
    )
    workers: int | None = workers_option()
    runner: str | None = runner_option()
    engine: str = engine_option()
    master: str | None = master_option()
    overwrite: bool = option(
        "--overwrite",
        default=False,
        action="store_true",
        help="replace a shard set built differently",
    )
    resume: bool = option(
        "--resume",
        default=False,
        action="store_true",
        help="continue an interrupted build: clean shards whose sorted runs under "
        "OUTPUT/_progress/ are complete are not tokenized again (finished shards are kept "
        "either way)",
    )
    quiet: bool = option(
        "--quiet", default=False, action="store_true", help="no progress bar or summary"
    )
    passthrough: tuple[str, ...] = ()  # engine options, passed on unchanged (not a flag)

    def __post_init__(self) -> None:
        """Every check that needs no input read (the objective's own options are checked
        against the vocabulary by ``resolve``); a bad value is a one-line ``ConfigError``."""
        object.__setattr__(self, "passthrough", tuple(self.passthrough))
        if not self.vocab:
            raise ConfigError("--vocab is required (a `c4forge vocab` folder or a .model file)")
        if not self.output:
            raise ConfigError("--output is required")
        if self.batch_rows < 1:
            raise ConfigError(f"--batch-rows must be >= 1, got {self.batch_rows}")
        if self.seed < 0:
            raise ConfigError(f"--seed must be >= 0, got {self.seed}")
        if self.compression not in ("none", "lz4", None):
            raise ConfigError(f"--compression must be none or lz4, got {self.compression!r}")
        requested = self.shard_counts  # a bad --num-shards is refused here
        if self.rows_per_shard is not None:
            if self.rows_per_shard < 1:
                raise ConfigError(f"--rows-per-shard must be >= 1, got {self.rows_per_shard}")
            if any(v is not None for v in requested.values()):
                raise ConfigError("give either --num-shards or --rows-per-shard, not both")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")
        check_runner(self.engine, self.runner)

    def replace(self, **changes: Any) -> ShardsJob:
        return dataclasses.replace(self, **changes)

    @property
    def shard_counts(self) -> dict[str, int | None]:
        """``--num-shards`` per split (None: the clean shard count of that split)."""
        return parse_num_shards(self.num_shards)

    @property
    def arrow_compression(self) -> str | None:
        """The Arrow IPC codec: None for ``none``."""
        return None if self.compression in (None, "none") else self.compression

    def chosen_objective_options(self) -> dict[str, Any]:
        """The options handed to the objective (None = its default). argparse's defaults for
        packing and the separator are the T5 ones, so they count as "not given"."""
        concat = self.packing == "concat"
        return {
            "inputs_length": self.inputs_length,
            "targets_length": self.targets_length,
            "noise_density": self.noise_density,
            "mean_noise_span_length": self.mean_noise_span_length,
            "packing": None if concat else self.packing,
            "doc_separator": None if self.doc_separator == "none" else self.doc_separator,
            "pack_window": None if concat else self.pack_window,
            **self.objective_options,
        }


def parse_num_shards(spec: str | None) -> dict[str, int | None]:
    """``auto`` | ``N`` (train) | ``train=N,validation=M``; None means the clean shard count."""
    out: dict[str, int | None] = {"train": None, "validation": None}
    spec = (spec or "auto").strip()
    if spec == "auto":
        return out
    try:
        if "=" not in spec:
            out["train"] = int(spec)
        else:
            for part in spec.split(","):
                split, value = part.split("=")
                if split.strip() not in out:
                    raise ValueError(split)
                out[split.strip()] = None if value.strip() == "auto" else int(value)
    except ValueError as err:
        raise ConfigError(
            f"--num-shards must be auto, N, or train=N,validation=M; got {spec!r}"
        ) from err
    for split, n in out.items():
        if n is not None and n < 1:
            raise ConfigError(f"--num-shards for {split} must be >= 1, got {n}")
    return out
