"""Language identification with langdetect, as the reference does it (c4_rules.md §9).

langdetect is random (it samples n-grams); the reference sets ``DetectorFactory.seed = 0``
before each call. The seed is a class attribute shared by the whole process, so setting it
and detecting happen under one process-wide lock. All detection goes through
``_detect_langs`` so a faster backend with identical results can replace it in one place.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import threading

from c4forge.corpus import drop_samples as ds
from c4forge.corpus.counting import Count, Flow
from c4forge.errors import ConfigError

STAGE = "langid"
MIN_PROBABILITY = 0.99
LANGDETECT_SEED = 0
FLOW = Flow(
    ("langdetect_exception", "no_predictions", "low_confidence", "ignored_language"),
    ("passed",),
    title=f"langdetect en ≥ {MIN_PROBABILITY}",
    detail="by language",
    breakdown="ignored_language:",  # ignored_language:<code>
)

_LOCK = threading.Lock()
BACKEND_ENV = "C4FORGE_LANGDETECT"
# The values C4FORGE_LANGDETECT accepts (unset = "fast"); anything else is an error.
BACKENDS: dict[str, str] = {
    "fast": "c4forge.langid.langdetect_fast: numba kernels replaying langdetect bit for bit",
    "stock": "langdetect itself (same results, ~50x slower): the escape hatch and benchmark baseline",
}
# Read once per process (Beam and Spark workers inherit it); checked by backend().
_BACKEND = os.environ.get(BACKEND_ENV, "").strip() or "fast"


def backend() -> str:
    """The langdetect backend this process runs (``fast`` or ``stock``), checked: an unknown
    ``C4FORGE_LANGDETECT`` value, or a fast backend that does not load, is a ``ConfigError``.
    stats.json records it (``langdetect_backend``)."""
    if _BACKEND not in BACKENDS:
        raise ConfigError(
            f"{BACKEND_ENV}={_BACKEND!r} is not a langdetect backend; use one of: "
            + ", ".join(f"{name} ({why})" for name, why in BACKENDS.items())
        )
    if _BACKEND == "fast":
        from c4forge.langid import langdetect_fast

        langdetect_fast.backend()  # loads the kernels now, or says why they do not load
    return _BACKEND


def _detect_langs(text: str) -> list[tuple[str, float]]:
    """``[(lang, prob), …]`` best first, exactly ``langdetect.detect_langs`` with seed 0.

    The one swap point for a faster backend (``c4forge.langid.langdetect_fast``); it must
    raise langdetect's ``LangDetectException`` where langdetect does (e.g. no features).
    """
    if _BACKEND != "stock" and backend() == "fast":
        from c4forge.langid.langdetect_fast import detect_langs_fast

        # Bit-identical to stock langdetect with seed 0 (tests/test_langdetect_fast.py), ~50x
        # faster, and lock-free: the seed is fixed per call, not process-global state.
        return [(p[0], p[1]) for p in detect_langs_fast(text)]
    from langdetect import DetectorFactory, detect_langs

    with _LOCK:
        DetectorFactory.seed = LANGDETECT_SEED
        return [(p.lang, p.prob) for p in detect_langs(text)]


def langid_filter(text: str, count: Count, language: str = "en") -> bool:
    """Keep ``text`` iff langdetect's top prediction is ``language`` with prob >= 0.99."""
    from langdetect.lang_detect_exception import LangDetectException

    try:
        predictions = _detect_langs(text)
    except LangDetectException:
        count(STAGE, "langdetect_exception")
        ds.sample(count, STAGE, "langdetect_exception", text)
        return False
    if not predictions:
        count(STAGE, "no_predictions")
        ds.sample(count, STAGE, "no_predictions", text)
        return False
    lang, prob = predictions[0]
    if prob < MIN_PROBABILITY:
        count(STAGE, "low_confidence")
        ds.sample(count, STAGE, "low_confidence", text)
        return False
    if lang != language:
        count(STAGE, "ignored_language")
        count(STAGE, f"ignored_language:{lang}")
        ds.sample(count, STAGE, "ignored_language", text)
        return False
    count(STAGE, "passed")
    return True


_FINGERPRINT: dict | None = None


def langdetect_fingerprint() -> dict:
    """langdetect version and a hash of its language profiles (they decide every result)."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        import langdetect

        profiles = os.path.join(os.path.dirname(langdetect.__file__), "profiles")
        h = hashlib.sha256()
        names = sorted(os.listdir(profiles))
        for name in names:
            with open(os.path.join(profiles, name), "rb") as f:
                h.update(name.encode("utf-8") + b"\0" + f.read() + b"\0")
        _FINGERPRINT = {
            "package": "langdetect",
            "version": importlib.metadata.version("langdetect"),
            "profiles": len(names),
            "profiles_sha256": h.hexdigest(),
            "seed": LANGDETECT_SEED,
            "min_probability": MIN_PROBABILITY,
        }
    return dict(_FINGERPRINT)
