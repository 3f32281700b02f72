"""The corpus variants of ``c4forge clean --variant NAME`` as data (TFDS c4 3.1.0 configs).

Each variant says which rules run; the job's stage plan is built from it, so a variant is a
different plan, never a fork of the pipeline. The fields mirror TFDS's ``C4Config`` (``clean``,
``realnewslike``, ``webtextlike``, ``paragraph_filter``, ``dedupe``, ``badwords_filter_fraction``,
languages → langdetect for ``en`` and CLD3 otherwise); ``en.noblocklist`` is the AllenAI
release's name for ``en`` without the bad-words filter.

Stage order (TFDS ``_get_pages_pcollection``): read → length → [realnews] → URL dedup →
[webtext join] → [paragraph] → [clean] → [dedup] → [near-dedup] → langid (langdetect or CLD3)
→ [bad words] → split → output.

Default dedup per variant: the ``en`` family keeps c4forge's project default ``spans``
(c4_rules.md D1; TFDS ``en`` dedups ``lines``: pass ``--dedup lines`` for the reference);
``en.noclean`` dedups nothing (TFDS ``dedupe=False``); ``multilingual`` dedups ``lines`` with no
sentence minimum (TFDS ``remove_duplicate_text(min_num_sentences=0)`` because it does not
clean). Without the line rules there is no sentence minimum after dedup either.
"""

from __future__ import annotations

from dataclasses import dataclass

from c4forge.dedup.exact import MIN_SENTENCES
from c4forge.errors import ConfigError

DEDUP_MODES = ("spans", "lines", "none")


@dataclass(frozen=True)
class Variant:
    name: str
    summary: str
    clean: bool  # C4's line and page rules (c4_rules.md §6)
    realnews: bool  # RealNews domain filter after the length filter
    webtext: bool  # join with a URL list after URL dedup (needs --url-list)
    paragraph_filter: bool  # mC4's >= 3 lines of >= 200 characters
    language_id: str  # "langdetect" (en, p >= 0.99) or "cld3" (many languages, p >= 0.95)
    badwords_fraction: float  # 0.0: no bad-words stage; 1.0: every match dropped; mC4 0.999
    default_dedup: str
    dedup_modes: tuple[str, ...] = DEDUP_MODES

    @property
    def multilingual(self) -> bool:
        return self.language_id == "cld3"

    @property
    def min_sentences_after_dedup(self) -> int:
        """3 when the line rules ran (the reference rechecks), else 0 (no recheck)."""
        return MIN_SENTENCES if self.clean else 0

    def resolve_dedup(self, requested: str | None) -> str:
        """``--dedup`` if given (checked against what this variant supports), else the default."""
        if requested is None:
            return self.default_dedup
        if requested not in self.dedup_modes:
            raise ConfigError(
                f"--variant {self.name} cannot use --dedup {requested} "
                f"(choose {' or '.join(self.dedup_modes)})"
            )
        return requested

    def describe(self) -> dict:
        """The variant's rules, for ``stats.json`` ``config.variant``."""
        return {
            "name": self.name,
            "clean": self.clean,
            "realnews": self.realnews,
            "webtext": self.webtext,
            "paragraph_filter": self.paragraph_filter,
            "language_id": self.language_id,
            "badwords_fraction": self.badwords_fraction,
            "min_sentences_after_dedup": self.min_sentences_after_dedup,
        }


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "en", "C4 (today's behaviour)", True, False, False, False, "langdetect", 1.0, "spans"
        ),
        Variant(
            "en.noclean",
            "T5's 'C4, unfiltered': length, URL dedup, langdetect only",
            False,
            False,
            False,
            False,
            "langdetect",
            0.0,
            "none",
        ),
        Variant(
            "en.noblocklist",
            "en without the bad-words filter",
            True,
            False,
            False,
            False,
            "langdetect",
            0.0,
            "spans",
        ),
        Variant(
            "realnewslike",
            "en restricted to RealNews' news domains",
            True,
            True,
            False,
            False,
            "langdetect",
            1.0,
            "spans",
        ),
        Variant(
            "webtextlike",
            "en restricted to the URLs of an OpenWebText URL list (--url-list)",
            True,
            False,
            True,
            False,
            "langdetect",
            1.0,
            "spans",
        ),
        Variant(
            "multilingual",
            "mC4: paragraph filter, line dedup, CLD3, per-language bad words (0.999)",
            False,
            False,
            False,
            True,
            "cld3",
            0.999,
            "lines",
            # spans are Punkt-English sentences; mC4 dedups lines
            dedup_modes=("lines", "none"),
        ),
    )
}
DEFAULT_VARIANT = "en"


def get_variant(name: str) -> Variant:
    """The variant called ``name``; an unknown name is a one-line error listing the choices."""
    try:
        return VARIANTS[name]
    except KeyError:
        raise ConfigError(f"unknown --variant {name!r} (choose {', '.join(VARIANTS)})") from None


def variants_help() -> str:
    """One line per variant with its default dedup, for ``--help``."""
    return "; ".join(f"{v.name}: {v.summary} [dedup {v.default_dedup}]" for v in VARIANTS.values())
