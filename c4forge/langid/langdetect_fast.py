"""A bit-identical, ~50x faster ``langdetect.detect_langs`` with seed 0.

Why: language identification is ~70-80 % of the clean job's CPU time and the rules (c4_rules.md
§9) require langdetect 1.0.9's exact decisions.  This module replays the stock ``Detector``
operation by operation instead of approximating it:

* same profiles: read from langdetect's own profile files, same file order and float division;
* same text preparation: langdetect's own URL/e-mail regexes and Vietnamese normaliser, the
  10,000-character cut, space-run collapsing, the (quirky) ``cleaning_text`` Latin count;
* same n-grams in the same order: ``NGram.normalize`` tabulated for every code point, the
  ``capitalword`` state machine in a numba kernel, n-gram -> profile row by hash lookup;
* same random stream: ``random.Random(0)``'s raw 32-bit words replayed for ``choice`` (rejection
  sampling on ``getrandbits(k)``) and for ``gauss`` (alphas tabulated once per word position
  in Python, stdlib formula and ``math`` functions), so the drawn n-grams and alphas are the
  stock ones;
* same float arithmetic: ``prob[i] *= weight + p`` elementwise, ``sum()`` replayed exactly as the
  running interpreter adds floats (sequential, or Neumaier from Python 3.12; checked at start-up),
  division and max as in ``_normalize_prob``, trial averaging ``+= prob / 7``.

Unlike the stock API it needs no process-wide lock: the seed is fixed per call, not a global.
Without numba (or if the start-up self-check fails) it raises a ``ConfigError`` that names the
cause and the way out (``C4FORGE_LANGDETECT=stock``): a silent fall-back ran jobs ~50x slower
with nothing in their output saying so.
"""

from __future__ import annotations

import sys
import threading
from typing import NamedTuple

import numpy as np
from langdetect.detector import Detector
from langdetect.lang_detect_exception import ErrorCode, LangDetectException
from langdetect.utils.ngram import NGram

from c4forge.errors import ConfigError

__all__ = [
    "LangProb",
    "LangDetectException",
    "backend",
    "detect_langs_fast",
]


SEED = 0
N_TRIAL = 7
ALPHA_DEFAULT = Detector.ALPHA_DEFAULT  # 0.5
ALPHA_WIDTH = Detector.ALPHA_WIDTH  # 0.05
BASE_FREQ = Detector.BASE_FREQ  # 10000
PROB_THRESHOLD = Detector.PROB_THRESHOLD  # 0.1
MAX_TEXT_LENGTH = 10000
_VI_MARKS = tuple(NGram.DMARK_CLASS)  # the combining marks normalize_vi rewrites
_WORDS_INITIAL = 1 << 16  # MT words kept per process; ~15k are ever needed for one text


class LangProb(NamedTuple):
    """``(lang, prob)``; also has langdetect ``Language``'s ``.lang`` / ``.prob`` attributes."""

    lang: str
    prob: float


class _State:
    """Per-process tables and kernels, built on first use under a lock."""

    def __init__(self) -> None:
        from c4forge.langid import _langdetect_kernels as kernels
        from c4forge.langid import _langdetect_tables as tables

        self.kernels = kernels
        self.profiles = tables.load_profiles()
        self.hash_bits = tables.hash_bits(len(self.profiles.keys))
        self.hash_keys, self.hash_rows = kernels.build_hash(self.profiles.keys, self.hash_bits)
        self.norm = tables.normalization_table()
        self.upper = tables.isupper_table()
        words, self._rng = tables.mt_words(SEED, _WORDS_INITIAL)
        self.stream = (words, *tables.gauss_alphas(words, ALPHA_DEFAULT, ALPHA_WIDTH))
        self.neumaier = sys.version_info >= (3, 12)
        self._tables = tables
        self._self_check()

    def more_words(self) -> None:
        """Double the replayed MT stream (only for absurdly unlucky rejection sampling)."""
        words = self.stream[0]
        extra, self._rng = self._tables.mt_words(SEED, len(words), self._rng)
        words = np.concatenate([words, extra])
        self.stream = (words, *self._tables.gauss_alphas(words, ALPHA_DEFAULT, ALPHA_WIDTH))

    def _self_check(self) -> None:
        """The kernel's float sum must equal this interpreter's ``sum()`` bit for bit."""
        rng = np.random.default_rng(12345)
        for size in (1, 2, 7, 55, 56):
            for scale in (1.0, 1e-300, 1e300):
                v = rng.random(size) * scale
                v[rng.random(size) < 0.3] *= 1e-17
                if self.kernels.python_sum(v, self.neumaier) != sum(v.tolist()):
                    raise RuntimeError("kernel sum() differs from the interpreter's sum()")


_state: _State | None = None
_state_error: str | None = None
_lock = threading.Lock()


def _get_state() -> _State:
    """The loaded kernels and tables, or a ``ConfigError`` saying why they did not load."""
    global _state, _state_error
    if _state is None and _state_error is None:
        with _lock:
            if _state is None and _state_error is None:
                try:
                    _state = _State()
                except Exception as exc:  # noqa: BLE001 - any cause (numba, self-check) is reported
                    _state_error = f"{type(exc).__name__}: {exc}"
    if _state is None:
        raise ConfigError(
            f"langdetect_fast (the default langdetect backend) did not load ({_state_error}); "
            "fix that, or set C4FORGE_LANGDETECT=stock for stock langdetect (same results, "
            "~50x slower)"
        )
    return _state


def backend() -> str:
    """``"numba"`` once the fast kernels are loaded (a ``ConfigError`` if they cannot be)."""
    _get_state()
    return "numba"


def _prepare(text: str) -> str:
    """``Detector.append``: drop URLs and e-mails, normalise Vietnamese, cut, collapse spaces."""
    text = Detector.URL_RE.sub(" ", text)
    if "@" in text:  # every MAIL_RE match contains "@"; the scan costs ~75 ns/char
        text = Detector.MAIL_RE.sub(" ", text)
    if any(mark in text for mark in _VI_MARKS):  # every normalize_vi match holds one
        text = NGram.normalize_vi(text)
    text = text[:MAX_TEXT_LENGTH]
    # append() keeps char i unless it and char i-1 are both " ": runs of spaces become one
    while "  " in text:
        text = text.replace("  ", " ")
    return text


def _sorted_probs(langlist: tuple[str, ...] | list[str], probs: list[float]) -> list[LangProb]:
    """``Detector._sort_probability``: p > 0.1, stable descending sort as ``list.sort``."""
    result = [LangProb(lang, p) for lang, p in zip(langlist, probs) if p > PROB_THRESHOLD]
    result.sort(key=lambda lp: lp.prob, reverse=True)
    return result


def detect_langs_fast(text: str) -> list[LangProb]:
    """``langdetect.detect_langs(text)`` with ``DetectorFactory.seed = 0``, bit for bit.

    Returns ``[(lang, prob), ...]`` (descending, only prob > 0.1) and raises langdetect's own
    ``LangDetectException`` ("No features in text.") exactly where the stock call does.
    """
    state = _get_state()
    prepared = _prepare(text)
    cps = np.frombuffer(prepared.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
    if cps.size and cps.max() >= 0x10000:  # isupper is tabulated lazily beyond the BMP
        with _lock:
            state._tables.fill_isupper(state.upper, state.norm[cps])
    langlist = state.profiles.langlist
    langprob = np.empty(len(langlist), dtype=np.float64)
    rows = np.empty(3 * len(cps), dtype=np.int32)
    while True:
        words, alpha_z, alpha_next = state.stream
        n_rows = state.kernels.detect_block(
            cps,
            state.norm,
            state.upper,
            state.hash_keys,
            state.hash_rows,
            state.hash_bits,
            state.profiles.table,
            words,
            alpha_z,
            alpha_next,
            state.neumaier,
            rows,
            langprob,
        )
        if n_rows == 0:
            raise LangDetectException(ErrorCode.CantDetectError, "No features in text.")
        if n_rows > 0:
            return _sorted_probs(langlist, langprob.tolist())
        with _lock:
            if words is state.stream[0]:
                state.more_words()
