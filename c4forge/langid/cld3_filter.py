"""Language identification for mC4 (``--variant multilingual``) with CLD3, as TFDS does it.

TFDS ``c4_utils.detect_languages`` (c4 3.1.0): one ``gcld3.NNetLanguageIdentifier(
min_num_bytes=100, max_num_bytes=10000)``; for each page ``FindLanguage(text)``:

* not ``is_reliable`` → the page is **kept** as ``und`` (reference counter
  ``filtered:no_predictions``, although nothing is filtered; here ``und_not_reliable``);
* ``probability < 0.95`` → kept as ``und`` (``filtered:low_confidence``; here
  ``und_low_confidence``);
* otherwise the predicted code; a code outside the requested languages drops the page
  (``ignored_language`` plus ``ignored_language:<code>``).

Every kept page counts ``passed`` and ``passed:<code>``. So, unlike the English ``langid``
stage, the only page drop is ``ignored_language``; the two ``und_*`` reasons are subsets of
``passed``. ``und`` pages are always kept, whatever ``--languages`` says (the reference
always adds the ``und`` split).

The ``gcld3`` module is an optional dependency (``pip install "c4forge[multilingual]"``),
installed by the ``cld3-py`` distribution: prebuilt wheels of the same module (gcld3 3.0.13
itself compiles CLD3 and needs protoc and libprotobuf). Pinned (3.1.0): language decisions
are data, and on 11,458 real texts its language, probability and reliability equal gcld3
3.0.13's. Without it, asking for this variant is a one-line error that says what to install.
"""

from __future__ import annotations

import importlib.metadata
import threading
from collections.abc import Iterable
from typing import Any

from c4forge.corpus import drop_samples as ds
from c4forge.corpus.counting import Count, Flow
from c4forge.errors import ConfigError

STAGE = "langid"
UNKNOWN_LANGUAGE = "und"
MIN_PROBABILITY = 0.95
MIN_NUM_BYTES = 100  # CLD3 is not expected to work on shorter text
MAX_NUM_BYTES = 10000  # CLD3 reads at most this many bytes of the page
PAGE_DROPS: tuple[str, ...] = ("ignored_language",)
REASONS: tuple[str, ...] = ("und_not_reliable", "und_low_confidence", "ignored_language", "passed")
# Only ignored_language drops a page; und_* pages are kept (as ``und``, counted in passed too).
# ``passed:<code>`` / ``ignored_language:<code>`` breakdowns are added as counted.
FLOW = Flow(
    PAGE_DROPS,
    ("passed",),
    ("und_not_reliable", "und_low_confidence"),
    title=f"CLD3 p ≥ {MIN_PROBABILITY} (else und)",
    detail="by language",
    breakdown="ignored_language:",
)

# The 109 codes CLD3's model predicts (google/cld3 src/task_context_params.cc, kLanguageNames;
# the gcld3 module of gcld3 3.0.13 and cld3-py 3.1.0). `--languages` may only name these.
CLD3_LANGUAGES: frozenset[str] = frozenset(
    "af am ar az be bg bg-Latn bn bs ca ceb co cs cy da de el el-Latn en eo es et eu fa fi fil "
    "fr fy ga gd gl gu ha haw hi hi-Latn hmn hr ht hu hy id ig is it iw ja ja-Latn jv ka kk km "
    "kn ko ku ky la lb lo lt lv mg mi mk ml mn mr ms mt my ne nl no ny pa pl ps pt ro ru "
    "ru-Latn sd si sk sl sm sn so sq sr st su sv sw ta te tg th tr uk ur uz vi xh yi yo zh "
    "zh-Latn zu".split()
)
# TFDS c4 3.1.0 MC4_LANGUAGES: the CLD3 languages that gave >= 10k pages (all but bs, hr).
# The default of `--languages` for `--variant multilingual`.
MC4_LANGUAGES: tuple[str, ...] = tuple(sorted(CLD3_LANGUAGES - {"bs", "hr"}))

GCLD3_MISSING = (
    "--variant multilingual needs gcld3 (CLD3 language ID), which is not installed or does not "
    "load: pip install 'c4forge[multilingual]' (it installs cld3-py, prebuilt wheels of gcld3)"
)


def require_gcld3() -> Any:
    """The gcld3 module, or a ``ConfigError`` that says how to get it (checked before work)."""
    from c4forge.optional import require

    require(("gcld3",), GCLD3_MISSING)
    import gcld3

    return gcld3


def parse_languages(spec: str | Iterable[str] | None) -> tuple[str, ...]:
    """``--languages en,de,…`` → sorted codes; default ``MC4_LANGUAGES``. Every code must be
    one CLD3 predicts (``und`` is always kept and need not be listed)."""
    if spec is None:
        return MC4_LANGUAGES
    codes = [c.strip() for c in (spec.split(",") if isinstance(spec, str) else spec)]
    codes = [c for c in codes if c and c != UNKNOWN_LANGUAGE]
    if not codes:
        raise ConfigError("--languages is empty; give CLD3 codes such as en,de,fr")
    unknown = sorted(set(codes) - CLD3_LANGUAGES)
    if unknown:
        raise ConfigError(
            f"--languages: CLD3 does not know {', '.join(unknown)} "
            f"(it predicts: {' '.join(sorted(CLD3_LANGUAGES))})"
        )
    return tuple(sorted(set(codes)))


_LOCAL = threading.local()


def _detector() -> Any:
    """One identifier per thread: CLD3's identifier keeps per-call state and is not
    thread-safe (TFDS guards its single one with a lock)."""
    det = getattr(_LOCAL, "detector", None)
    if det is None:
        gcld3 = require_gcld3()
        det = gcld3.NNetLanguageIdentifier(min_num_bytes=MIN_NUM_BYTES, max_num_bytes=MAX_NUM_BYTES)
        _LOCAL.detector = det
    return det


def predict(text: str) -> tuple[str, bool, float]:
    """CLD3's raw answer for ``text``: ``(code, is_reliable, probability)``."""
    result = _detector().FindLanguage(text=text)
    return result.language, bool(result.is_reliable), float(result.probability)


def cld3_language(text: str, count: Count, languages: frozenset[str]) -> str | None:
    """The page's language (a code of ``languages`` or ``und``), or ``None`` to drop it."""
    code, reliable, probability = predict(text)
    if not reliable:
        count(STAGE, "und_not_reliable")
        code = UNKNOWN_LANGUAGE
    elif probability < MIN_PROBABILITY:
        count(STAGE, "und_low_confidence")
        code = UNKNOWN_LANGUAGE
    elif code not in languages:
        count(STAGE, "ignored_language")
        count(STAGE, f"ignored_language:{code}")
        ds.sample(count, STAGE, "ignored_language", text)
        return None
    count(STAGE, "passed")
    count(STAGE, f"passed:{code}")
    return code


def gcld3_distribution() -> tuple[str, str]:
    """``(distribution, version)`` that installed the ``gcld3`` module: ``cld3-py`` (what the
    extra installs) or, on an older set-up, ``gcld3`` itself."""
    names = importlib.metadata.packages_distributions().get("gcld3") or ["gcld3"]
    name = sorted(set(names))[0]
    return name, importlib.metadata.version(name)


def cld3_fingerprint() -> dict:
    """The CLD3 package's name and version (its model is compiled into the package) and the
    rule's constants. The extension's own bytes are not hashed: they differ from build to
    build of one release."""
    require_gcld3()
    package, version = gcld3_distribution()
    return {
        "package": package,
        "module": "gcld3",
        "version": version,
        "model_languages": len(CLD3_LANGUAGES),
        "min_num_bytes": MIN_NUM_BYTES,
        "max_num_bytes": MAX_NUM_BYTES,
        "min_probability": MIN_PROBABILITY,
        "unknown_language": UNKNOWN_LANGUAGE,
    }
