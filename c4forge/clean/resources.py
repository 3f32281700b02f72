"""Everything that decides which pages and lines survive, for ``stats.json`` ``config``.

Two runs with equal fingerprints apply the same rules with the same resources; a changed
constant, list or library version shows up here before it shows up in the output.
"""

from __future__ import annotations

from c4forge.langid import langdetect_filter as langid
from c4forge.readers import wet
from c4forge.rules import badwords, split
from c4forge.rules import lines as clean


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


def fingerprints(language: str = "en", badwords_fraction: float = 1.0) -> dict:
    """Resource fingerprints plus the constants: bad-words files (sha256, entry counts), Punkt
    package version and parameter counts, langdetect and NLTK versions."""
    from c4forge.rules.sentences import punkt_fingerprint

    punkt = punkt_fingerprint()
    return {
        "language": language,
        "constants": constants(),
        "badwords": {**badwords.badwords_fingerprint(language), "fraction": badwords_fraction},
        "punkt": punkt,
        "langdetect": langid.langdetect_fingerprint(),
        "nltk_version": punkt["nltk_version"],
    }
