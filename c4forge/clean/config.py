"""``CleanJob``: the typed, frozen description of one `c4forge clean` run.

Built once from the command line (``from_args``) and validated there; everything below the CLI
reads this object, never an argparse ``Namespace``. ``record()`` is the ``config`` block of
stats.json (what changes the output, nothing that does not: workers, runner, paths).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

from c4forge.errors import ConfigError
from c4forge.io.storage import is_remote

SUPPORTED_LANGUAGES = ("en",)  # D5: the language is a parameter; only English has resources
DEDUP_MODES = ("spans", "lines", "none")
FORMATS = ("jsonl", "parquet")
INPUT_FORMATS = ("auto", "wet", "warc")
NEAR_DEDUP_MODES = ("none", "minhash")
ENGINES = ("auto", "beam", "spark", "local")
# --engine auto (the default): a local run on at least this much input (compressed bytes) runs
# on the local engine, which spills its shuffles to disk; smaller ones on Beam's DirectRunner.
AUTO_LOCAL_BYTES = 64 << 20


def _local_output(path: str) -> str:
    from c4forge.io.storage import normalize

    return normalize(path)


@dataclass(frozen=True)
class CleanJob:
    """One clean run. ``output`` is normalised (``file:///x`` → ``/x``) on construction, for
    both engines; ``train_shards`` / ``validation_shards`` keep the value as given (``auto`` or
    a count) because stats.json records it verbatim."""

    inputs: tuple[str, ...]
    output: str
    dedup: str | None = None  # None: the variant's default (``en``: spans)
    format: str = "jsonl"
    language: str = "en"
    input_format: str = "auto"
    max_record_bytes: int = 64 << 20
    near_dedup: str = "none"
    ngram: int = 5
    num_perm: int = 128
    threshold: float = 0.8
    badwords_fraction: float | None = None  # None: the variant's (en 1.0, mC4 0.999)
    variant: str = "en"  # issue 10: c4forge.filters.variants
    url_list: str | None = None  # webtextlike: FILE|GLOB of URL files
    languages: str | tuple[str, ...] | None = None  # multilingual: CLD3 codes kept
    domain_list: str | None = None  # realnewslike: another domain_to_allowed_subdomains.json
    train_shards: str | int = "auto"
    validation_shards: str | int = "auto"
    engine: str = "auto"  # resolved by ``clean.driver.choose_engine`` before any work
    runner: str | None = None
    workers: int | None = None
    master: str | None = None
    passthrough: tuple[str, ...] = ()
    resume: bool = False
    overwrite: bool = False
    report: bool = False
    quiet: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "passthrough", tuple(self.passthrough))
        given = self.output
        object.__setattr__(self, "output", _local_output(given))
        self._resolve_variant()
        self._validate(given)

    @classmethod
    def from_args(cls, args: Any, extra: list[str] | tuple[str, ...] = ()) -> CleanJob:
        """From the parsed `c4forge clean` arguments (the CLI's only use of them)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"passthrough"}
        return cls(**{n: getattr(args, n) for n in names if hasattr(args, n)}, passthrough=extra)

    def replace(self, **changes: Any) -> CleanJob:
        return dataclasses.replace(self, **changes)

    # -- variants (issue 10) ----------------------------------------------------------------------
    @property
    def spec(self) -> Any:
        """The ``Variant`` this job builds (``c4forge.filters.variants``)."""
        from c4forge.filters.variants import get_variant

        return get_variant(self.variant)

    def _resolve_variant(self) -> None:
        """Fill the variant's defaults (dedup, bad-words fraction) and refuse options that do
        not belong to it; check its resources now, before any work (one-line errors)."""
        v = self.spec  # ConfigError for an unknown name
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
            from c4forge.filters.url_list import resolve_url_list

            resolve_url_list(self.url_list or "")  # InputError: missing, empty glob, a folder
        if v.realnews:
            _ = self.domains  # InputError: damaged or missing domain list
        if v.multilingual:
            from c4forge.filters.langid_cld3 import parse_languages, require_gcld3

            require_gcld3()  # ConfigError that says what to install
            object.__setattr__(self, "languages", parse_languages(self.languages))

    @functools.cached_property
    def domains(self) -> Any:
        """The RealNews domain list (bundled unless ``--domain-list``), validated."""
        from c4forge.filters.realnews import load_domain_list

        return load_domain_list(self.domain_list)

    @functools.cached_property
    def url_list_files(self) -> tuple[str, ...]:
        from c4forge.filters.url_list import resolve_url_list

        return tuple(resolve_url_list(self.url_list or ""))

    @functools.cached_property
    def url_list_info(self) -> Any:
        """One streamed pass over the whole URL list (sha256, URL count, not empty, intact)."""
        from c4forge.filters.url_list import inspect_url_list

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
        parse_shards_option(self.train_shards, "--train-shards")
        parse_shards_option(self.validation_shards, "--validation-shards")
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
        from c4forge.filters.minhash import make_params

        return make_params(self.ngram, self.num_perm, self.threshold)

    def record(self) -> dict[str, Any]:
        """stats.json's ``config``: everything that changes the output, nothing that does not
        (workers, runner, engine, paths); constants and resource fingerprints included."""
        from c4forge.clean.stats import constants
        from c4forge.clean.variant_resources import job_resources

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
        if self.near_dedup != "none":
            config["near_dedup_params"] = {
                "ngram": self.ngram,
                "num_perm": self.num_perm,
                "threshold": self.threshold,
            }
        return config
