"""``CleanJob``: the typed, frozen description of one `c4forge clean` run.

Built once from the command line (``cliconfig``: each field declares its flag) and validated there; everything below the CLI
reads this object, never an argparse ``Namespace``. ``record()`` is the ``config`` block of
stats.json (what changes the output, nothing that does not: workers, runner, paths).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from c4forge.clean.variants import DEDUP_MODES, DEFAULT_VARIANT, variants_help
from c4forge.cliconfig import CliConfig, option
from c4forge.engines.choose import ENGINES, check_runner
from c4forge.engines.options import (
    engine_option,
    master_option,
    runner_option,
    workers_option,
)
from c4forge.errors import ConfigError
from c4forge.io.storage import is_remote

SUPPORTED_LANGUAGES = ("en",)  # D5: the language is a parameter; only English has resources
FORMATS = ("jsonl", "parquet")
INPUT_FORMATS = ("auto", "wet", "warc", "c4")
NEAR_DEDUP_MODES = ("none", "minhash")


def _decontaminate_specs(values: list[str] | None) -> tuple[str, ...]:
    """The ``--decontaminate`` flags' specs (imported late: ``--help`` stays instant)."""
    from c4forge.contamination.benchmarks import flatten_specs

    return flatten_specs(values)


def _local_output(path: str) -> str:
    from c4forge.io.storage import normalize

    return normalize(path)


@dataclass(frozen=True)
class CleanJob(CliConfig):
    """One clean run (its fields, in ``clean --help`` order, declare their flags). ``output`` is normalised (``file:///x`` → ``/x``) on construction, for
    both engines; ``train_shards`` / ``validation_shards`` keep the value as given (``auto`` or
    a count) because stats.json records it verbatim."""

    inputs: tuple[str, ...] = option(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="WET files, globs, directories, gs:// or s3:// paths, or @paths.txt (one path per line)",
    )
    output: str = option(
        "--output", "-o", required=True, help="output folder (local, gs://, s3://)"
    )
    variant: str = option(
        "--variant",
        default=DEFAULT_VARIANT,
        metavar="NAME",
        help="corpus variant (TFDS c4 configs; default en): " + variants_help(),
    )  # the table: c4forge.clean.variants
    dedup: str | None = option(
        "--dedup",
        default=None,  # None: the variant's default (``en``: spans)
        choices=list(DEDUP_MODES),
        help="corpus-wide dedup: paper's 3-sentence spans, TFDS lines, none; default per "
        "variant: spans for en, en.noblocklist, realnewslike, webtextlike; none for en.noclean; "
        "lines (no sentence minimum) for multilingual",
    )
    url_list: str | None = option(
        "--url-list",
        default=None,
        metavar="FILE|GLOB",
        help="webtextlike: OpenWebText URL files (one URL per line, plain or .gz)",
    )
    languages: str | tuple[str, ...] | None = option(
        "--languages",
        default=None,
        metavar="CODES",
        help="multilingual: CLD3 codes to keep, e.g. en,de,fr (default: mC4's 107; und is "
        "always kept)",
    )
    domain_list: str | None = option(
        "--domain-list",
        default=None,
        metavar="JSON",
        help="realnewslike: a domain_to_allowed_subdomains.json to use instead of the bundled "
        "RealNews list",
    )
    format: str = option(
        "--format",
        default="jsonl",
        choices=list(FORMATS),
        help="jsonl = c4-*.json.gz as the C4 release; parquet = c4-*.parquet",
    )
    language: str = option("--language", default="en", help="target language (only 'en' today)")
    workers: int | None = workers_option()
    runner: str | None = runner_option()
    engine: str = engine_option()
    master: str | None = master_option()
    train_shards: str | int = option(
        "--train-shards", default="auto", help="train shard count or 'auto'"
    )
    validation_shards: str | int = option(
        "--validation-shards", default="auto", help="validation shard count or 'auto'"
    )
    max_record_bytes: int = option(
        "--max-record-bytes",
        default=64 << 20,
        type=int,
        help="skip (and count) WARC payloads larger than this many bytes "
        "(default 67108864 = 64 MiB)",
    )
    input_format: str = option(
        "--input-format",
        default="auto",
        choices=list(INPUT_FORMATS),
        help="wet (conversion records) or warc (HTML responses → text); auto detects; c4: the "
        "documents of a clean corpus (c4-*.json.gz or .parquet: AllenAI's C4 or a c4forge "
        "output), through URL dedup and the corpus-wide stages only (--dedup default none)",
    )
    near_dedup: str = option(
        "--near-dedup",
        default="none",
        choices=list(NEAR_DEDUP_MODES),
        help="minhash = MinHash-LSH near-duplicate removal after exact dedup; none = off",
    )
    ngram: int = option("--ngram", default=5, type=int, help="near-dedup word n-gram size")
    num_perm: int = option(
        "--num-perm", default=128, type=int, help="near-dedup MinHash permutations"
    )
    threshold: float = option(
        "--threshold", default=0.8, type=float, help="near-dedup Jaccard threshold"
    )
    dedup_substrings: int = option(
        "--dedup-substrings",
        default=0,
        type=int,
        metavar="N",
        help="exact-substring dedup after every other filter (Lee et al. 2022): strike every "
        "N-byte window that occurs at least twice in the corpus (the reference tool's examples "
        "use 100); 0 = off",
    )
    substrings_keep: str = option(
        "--substrings-keep",
        default="none",
        choices=["none", "first"],
        help="with --dedup-substrings: none = strike every copy (the paper's semantics); "
        "first = keep the copy in the page with the smallest md5 of its URL",
    )
    badwords_fraction: float | None = option(
        "--badwords-fraction",
        default=None,  # None: the variant's (en 1.0, mC4 0.999)
        type=float,
        help="fraction of bad-word pages dropped (default per variant: 1.0 = C4; mC4 0.999)",
    )
    decontaminate: tuple[str, ...] = option(
        "--decontaminate",
        default=None,  # () after __post_init__ (argparse's "append" needs a list or None)
        action="append",  # one value per flag: nargs="+" swallowed the INPUT that followed
        metavar="SPEC[,SPEC...]",
        convert=_decontaminate_specs,
        help="remove documents sharing a word n-gram with an evaluation set: glue (the bundled "
        "GLUE dev sets) and/or NAME=FILE[#FIELD,...] (.tsv, .csv, .jsonl; text field 'text' by "
        "default); several: repeat the flag or join them with commas (glue,mine=eval.jsonl); "
        "counted per benchmark under decontaminate.contaminated:NAME",
    )
    decontaminate_ngram: int = option(
        "--decontaminate-ngram",
        default=13,
        type=int,
        metavar="N",
        help="word n-gram size of --decontaminate (default 13, as GPT-3)",
    )
    keep_samples: int = option(
        "--keep-samples",
        default=0,
        type=int,
        metavar="N",
        help="keep, per drop reason, N dropped lines or pages (the N smallest by a stable hash: "
        "the same on every engine and worker count) under OUTPUT/samples/",
    )
    resume: bool = option(
        "--resume",
        default=False,
        action="store_true",
        help="continue an interrupted run of the same job: chunks (input files) whose records "
        "under OUTPUT/_work/ are complete are not read again",
    )
    overwrite: bool = option(
        "--overwrite", default=False, action="store_true", help="replace a finished run in --output"
    )
    report: bool = option(
        "--report",
        default=False,
        action="store_true",
        help="also write the filter funnel as funnel.png",
    )
    quiet: bool = option(
        "--quiet", default=False, action="store_true", help="no progress bar or summary"
    )
    passthrough: tuple[str, ...] = ()  # engine options, passed on unchanged (not a flag)

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "passthrough", tuple(self.passthrough))
        object.__setattr__(self, "decontaminate", tuple(self.decontaminate or ()))
        given = self.output
        object.__setattr__(self, "output", _local_output(given))
        self._resolve_variant()
        self._validate(given)

    def replace(self, **changes: Any) -> CleanJob:
        return dataclasses.replace(self, **changes)

    # -- variants ------------------------------------------------------------------------------
    @property
    def spec(self) -> Any:
        """The ``Variant`` this job builds (``c4forge.clean.variants``)."""
        from c4forge.clean.variants import get_variant

        return get_variant(self.variant)

    def _resolve_variant(self) -> None:
        """Fill the variant's defaults (dedup, bad-words fraction) and refuse options that do
        not belong to it; check its resources now, before any work (one-line errors)."""
        v = self.spec  # ConfigError for an unknown name
        if self.input_format == "c4":  # a clean corpus: no crawl rules, no variant of them
            if v.name != DEFAULT_VARIANT:
                raise ConfigError(
                    f"--input-format c4 reads a clean corpus; --variant {v.name} does not apply"
                )
            if self.dedup is None:
                object.__setattr__(self, "dedup", "none")
        object.__setattr__(self, "dedup", v.resolve_dedup(self.dedup))
        if self.badwords_fraction is None:
            object.__setattr__(self, "badwords_fraction", v.badwords_fraction)
        elif v.badwords_fraction == 0.0 and self.badwords_fraction != 0.0:  # 0: resolved (replace)
            raise ConfigError(
                f"--variant {v.name} has no bad-words filter; --badwords-fraction does not apply"
            )
        for flag, value, owner in (
            ("--url-list", self.url_list, "webtextlike"),
            ("--languages", self.languages, "multilingual"),
            ("--domain-list", self.domain_list, "realnewslike"),
        ):
            if value is not None and v.name != owner:
                raise ConfigError(f"{flag} is an option of --variant {owner}, not {v.name}")
        if v.webtext:
            from c4forge.rules.url_list import resolve_url_list

            resolve_url_list(self.url_list or "")  # InputError: missing, empty glob, a folder
        if v.realnews:
            _ = self.domains  # InputError: damaged or missing domain list
        if v.multilingual:
            from c4forge.langid.cld3_filter import parse_languages, require_gcld3

            require_gcld3()  # ConfigError that says what to install
            object.__setattr__(self, "languages", parse_languages(self.languages))

    @functools.cached_property
    def domains(self) -> Any:
        """The RealNews domain list (bundled unless ``--domain-list``), validated."""
        from c4forge.rules.realnews import load_domain_list

        return load_domain_list(self.domain_list)

    @functools.cached_property
    def benchmarks(self) -> Any:
        """``(NgramIndex, fingerprints)`` of ``--decontaminate`` (loaded once, on the driver)."""
        from c4forge.contamination.benchmarks import load

        return load(self.decontaminate, self.decontaminate_ngram)

    @functools.cached_property
    def url_list_files(self) -> tuple[str, ...]:
        from c4forge.rules.url_list import resolve_url_list

        return tuple(resolve_url_list(self.url_list or ""))

    @functools.cached_property
    def url_list_info(self) -> Any:
        """One streamed pass over the whole URL list (sha256, URL count, not empty, intact)."""
        from c4forge.rules.url_list import inspect_url_list

        return inspect_url_list(self.url_list_files)

    # -- validation -----------------------------------------------------------------------------
    def _validate(self, given_output: str) -> None:
        from c4forge.clean.output import parse_shards_option

        for name, value, allowed in (
            ("--dedup", self.dedup, DEDUP_MODES),
            ("--format", self.format, FORMATS),
            ("--input-format", self.input_format, INPUT_FORMATS),
            ("--near-dedup", self.near_dedup, NEAR_DEDUP_MODES),
            ("--engine", self.engine, ENGINES),
        ):
            if value not in allowed:
                raise ConfigError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
        if not self.inputs:
            raise ConfigError("no INPUT given")
        if self.language not in SUPPORTED_LANGUAGES:
            raise ConfigError(
                f"--language {self.language!r} is not supported yet (available: "
                f"{', '.join(SUPPORTED_LANGUAGES)}); multilingual mode is a planned extension (D5)"
            )
        if not 0.0 <= self.badwords_fraction <= 1.0:
            raise ConfigError(
                f"--badwords-fraction must be in [0, 1], got {self.badwords_fraction}"
            )
        if self.max_record_bytes < 1:
            raise ConfigError(f"--max-record-bytes must be positive, got {self.max_record_bytes}")
        if self.workers is not None and self.workers < 1:
            raise ConfigError(f"--workers must be >= 1, got {self.workers}")
        if self.near_dedup != "none":
            self.minhash_params()  # ConfigError on bad values
        from c4forge.dedup.substrings import check_options

        check_options(self.dedup_substrings, self.substrings_keep)
        if self.keep_samples < 0:
            raise ConfigError(f"--keep-samples must be >= 0, got {self.keep_samples}")
        if self.decontaminate_ngram < 1:
            raise ConfigError(f"--decontaminate-ngram must be >= 1, got {self.decontaminate_ngram}")
        if self.decontaminate:
            _ = self.benchmarks  # missing file, bad name, malformed rows: one-line errors now
        parse_shards_option(self.train_shards, "--train-shards")
        parse_shards_option(self.validation_shards, "--validation-shards")
        check_runner(self.engine, self.runner)
        runner = (self.runner or "").rsplit(".", 1)[-1].lower()  # Beam's names are case-blind
        if (
            self.engine in ("auto", "beam")
            and runner in ("dataflow", "dataflowrunner")
            and not is_remote(self.output)
        ):
            raise ConfigError(
                f"--output {given_output!r} is a local path, but Dataflow workers cannot write "
                "to this machine; use a gs:// folder"
            )

    # -- derived values -------------------------------------------------------------------------
    @property
    def shard_options(self) -> dict[str, str | int]:
        """Per split: ``"auto"`` or a shard count."""
        from c4forge.clean.output import parse_shards_option

        return {
            "train": parse_shards_option(self.train_shards, "--train-shards"),
            "validation": parse_shards_option(self.validation_shards, "--validation-shards"),
        }

    @property
    def output_options(self) -> dict[str, str | int | bool]:
        """What the shard writers need: ``shard_options`` plus ``by_language`` (one shard set
        per language, mC4's layout)."""
        return {**self.shard_options, "by_language": self.spec.multilingual}

    @property
    def keep_sentences(self) -> bool:
        """Span dedup rebuilds lines from their Punkt sentences, so clean keeps them."""
        return self.dedup == "spans"

    def minhash_params(self) -> Any:
        from c4forge.dedup.minhash import make_params

        return make_params(self.ngram, self.num_perm, self.threshold)

    def record(self) -> dict[str, Any]:
        """stats.json's ``config``: everything that changes the output, nothing that does not
        (workers, runner, engine, paths); constants and resource fingerprints included."""
        from c4forge.clean.resources import job_resources
        from c4forge.clean.stats import constants

        config: dict[str, Any] = {
            "variant": self.spec.describe(),
            "language": self.language,
            "dedup": self.dedup,
            "format": self.format,
            "input_format": self.input_format,
            "max_record_bytes": self.max_record_bytes,
            "badwords_fraction": self.badwords_fraction,
            "near_dedup": self.near_dedup,
            "shards": {"train": self.train_shards, "validation": self.validation_shards},
            "constants": constants(),
            "resources": job_resources(self),
        }
        if self.spec.multilingual:
            config["languages"] = list(self.languages or ())
        if self.decontaminate:  # only when asked: other runs' stats.json stay as they were
            config["decontaminate"] = self.benchmarks[1]
        if self.keep_samples:
            config["keep_samples"] = self.keep_samples
        if self.dedup_substrings:  # only when asked: other runs' stats.json stay as they were
            config["dedup_substrings"] = {
                "bytes": self.dedup_substrings,
                "keep": self.substrings_keep,
            }
        if self.near_dedup != "none":
            config["near_dedup_params"] = {
                "ngram": self.ngram,
                "num_perm": self.num_perm,
                "threshold": self.threshold,
            }
        return config
