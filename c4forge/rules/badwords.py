"""Bad-words page filter (c4_rules.md §10): LDNOOBW lists shipped as package data.

The reference test is ``pattern.search(text.lower())`` with ``(?:\\W|^)(w1|w2|…)(?:\\W|$)``.
That regex is slow on long pages (hundreds of alternatives tried at every non-word
character), so ``has_badword`` answers the same question with set lookups, exactly:

* an entry made only of word characters matches iff it equals a maximal ``\\w+`` run of the
  text (its left neighbour is ``\\W`` or the start, its right one ``\\W`` or the end);
* any other entry can only match where each of its own ``\\w+`` runs is a maximal run of the
  text too, so it is looked for (``str.find`` + the same boundary test) only when all of
  them occur among the text's runs; an entry without word characters is always looked for.

``\\w``/``\\W`` are taken from ``re`` itself, so the boundaries are Python's Unicode ones.
Tests compare this against the plain regex on real pages and adversarial strings.
"""

from __future__ import annotations

import hashlib
import importlib.resources
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from c4forge.corpus import drop_samples as ds
from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.documents import Doc
from c4forge.corpus.stages import StageJob
from c4forge.errors import ConfigError, VerificationError

STAGE = "badwords"
# A kept page is one of three kinds: soft-passed (a match spared by the fraction), no list for
# its language, or no match.
FLOW = Flow(
    ("contains_badword",), ("soft_passed", "no_list", "passed"), title="bad words", detail="kept"
)
EN_DIR = "en-25e679f"  # LDNOOBW en @ 25e679f03d96baa721cde20db9944649e8d0a844 (C4 English)
ALL_DIR = "all-5faf2ba"  # LDNOOBW @ 5faf2ba42d7b1c0977169ec3611df25a3c08eb13 (mC4)
EN_SHA256 = "a506cbcf8a31935b122299f3bb1d32be6db3d0ad498765d28f365dfc4f4d7b8c"
EN_ENTRIES = 377
# Languages whose lists match without word boundaries (no spaces between words).
NO_BOUNDARY_LANGUAGES = frozenset({"ja", "th", "zh"})
# mC4 removes these entries (too common in normal text).
ALLOWLIST = {"ja": frozenset({"sm", "グロ", "女の子"}), "zh": frozenset({"性"})}

_WORD_RUN = re.compile(r"\w+")
_NON_WORD = re.compile(r"\W")


@dataclass(frozen=True)
class _ListFile:
    path: str  # relative to the badwords package folder
    sha256: str
    bytes: int
    lines: int


@dataclass(frozen=True)
class BadWords:
    language: str
    entries: frozenset[str]
    files: tuple[_ListFile, ...]
    removed: frozenset[str]
    regex: re.Pattern[str]  # the reference pattern
    word_entries: frozenset[str]  # entries that are a single \w+ run
    # other entries, indexed by one of their \w+ runs ("" = no run: always looked for)
    phrase_index: dict[str, tuple[tuple[str, frozenset[str]], ...]]

    def has_badword(self, text: str) -> bool:
        """Same answer as ``self.regex.search(text.lower()) is not None``, faster."""
        low = text.lower()
        if self.language in NO_BOUNDARY_LANGUAGES:
            return self.regex.search(low) is not None
        runs = set(_WORD_RUN.findall(low))
        if not self.word_entries.isdisjoint(runs):
            return True
        for key in (runs & self.phrase_index.keys()) | ({""} & self.phrase_index.keys()):
            for entry, needed in self.phrase_index[key]:
                if needed <= runs and _occurs_bounded(low, entry):
                    return True
        return False


def _occurs_bounded(low: str, entry: str) -> bool:
    """Does ``entry`` occur with ``\\W`` or a text end on both sides (the regex's flanks)?"""
    n = len(entry)
    i = low.find(entry)
    while i >= 0:
        j = i + n
        if (i == 0 or _NON_WORD.match(low, i - 1)) and (j == len(low) or _NON_WORD.match(low, j)):
            return True
        i = low.find(entry, i + 1)
    return False


def _files() -> dict[str, list[str]]:
    """Language code → list files (relative paths). ``en`` comes from the en-25e679f pin."""
    root = importlib.resources.files("c4forge") / "data" / "badwords"
    out: dict[str, list[str]] = {"en": [f"{EN_DIR}/en"]}
    for item in sorted(root.joinpath(ALL_DIR).iterdir(), key=lambda p: p.name):
        lang = item.name.split("-", 1)[0]  # fr-CA-u-sd-caqc joins fr
        if lang == "en":
            continue  # replaced by the en-25e679f file
        out.setdefault(lang, []).append(f"{ALL_DIR}/{item.name}")
    return out


def _read(rel: str) -> bytes:
    root = importlib.resources.files("c4forge") / "data" / "badwords"
    return root.joinpath(*rel.split("/")).read_bytes()


def _build(language: str, rels: list[str]) -> BadWords:
    entries: set[str] = set()
    files = []
    for rel in rels:
        raw = _read(rel)
        lines = raw.decode("utf-8").splitlines()
        files.append(_ListFile(rel, hashlib.sha256(raw).hexdigest(), len(raw), len(lines)))
        entries.update(w.strip() for w in lines)
    entries.discard("")  # C6: an empty alternative would match nearly every page
    removed = frozenset(entries & ALLOWLIST.get(language, frozenset()))
    entries -= removed
    if language == "en":
        if files[0].sha256 != EN_SHA256 or len(entries) != EN_ENTRIES:
            raise VerificationError(
                f"bad-words list {rels[0]}: sha256 {files[0].sha256}, {len(entries)} entries; "
                f"expected {EN_SHA256} and {EN_ENTRIES} (LDNOOBW en @ 25e679f)"
            )
    ordered = sorted(entries)
    alternation = "|".join(re.escape(w) for w in ordered)
    if language in NO_BOUNDARY_LANGUAGES:
        regex = re.compile(alternation)
    else:
        regex = re.compile(rf"(?:\W|^)({alternation})(?:\W|$)")
    word_entries = frozenset(w for w in ordered if _WORD_RUN.fullmatch(w))
    index: dict[str, list[tuple[str, frozenset[str]]]] = {}
    for w in ordered:
        if w in word_entries:
            continue
        needed = frozenset(_WORD_RUN.findall(w))
        key = min(needed, key=lambda r: (-len(r), r)) if needed else ""
        index.setdefault(key, []).append((w, needed))
    return BadWords(
        language=language,
        entries=frozenset(entries),
        files=tuple(files),
        removed=removed,
        regex=regex,
        word_entries=word_entries,
        phrase_index={k: tuple(v) for k, v in index.items()},
    )


_LOCK = threading.Lock()
_CACHE: dict[str, BadWords | None] = {}


def load_badwords(language: str) -> BadWords | None:
    """The list for ``language`` (code cut at the first ``-``), or ``None`` if there is none.
    Built once per process."""
    lang = language.split("-", 1)[0]
    if lang in _CACHE:
        return _CACHE[lang]
    with _LOCK:
        if lang not in _CACHE:
            rels = _files().get(lang)
            _CACHE[lang] = _build(lang, rels) if rels else None
    return _CACHE[lang]


def badwords_filter(
    text: str,
    language: str,
    normalized_url: str,
    count: Count,
    fraction: float = 1.0,
) -> bool:
    """Keep the page? §10.4: no list → keep (``no_list``); a match is dropped
    (``contains_badword``) unless the soft fraction keeps it (``soft_passed``)."""
    if not 0.0 <= fraction <= 1.0:
        raise ConfigError(f"bad-words fraction must be in [0, 1], got {fraction}")
    words = load_badwords(language)
    if words is None:
        count(STAGE, "no_list")
        return True
    if not words.has_badword(text):
        count(STAGE, "passed")
        return True
    numerator, denominator = float(fraction).as_integer_ratio()
    bucket = int(hashlib.md5(normalized_url.encode("utf-8")).hexdigest(), 16) % denominator
    if bucket >= numerator:
        count(STAGE, "soft_passed")
        return True
    count(STAGE, "contains_badword")
    ds.sample(count, STAGE, "contains_badword", text)
    return False


def badwords_fingerprint(language: str) -> dict:
    """Files, hashes and entry counts of the list used for ``language`` (for stats.json)."""
    words = load_badwords(language)
    if words is None:
        return {"language": language.split("-", 1)[0], "files": [], "entries": 0}
    return {
        "language": words.language,
        "files": [
            {"path": f.path, "sha256": f.sha256, "bytes": f.bytes, "lines": f.lines}
            for f in words.files
        ],
        "entries": len(words.entries),
        "multi_word_entries": sum(1 for w in words.entries if " " in w),
        "allowlist_removed": sorted(words.removed),
        "word_boundaries": words.language not in NO_BOUNDARY_LANGUAGES,
        "source": "LDNOOBW List-of-Dirty-Naughty-Obscene-and-Otherwise-Bad-Words (CC BY 4.0)",
    }


def list_languages() -> list[str]:
    """Language codes that have a list (mC4's per-language filter), sorted."""
    return sorted(_files())


# --- the plan's stage: one list (C4) or each page's own language's list (mC4) ----------------


def badwords(doc: Doc, count: Count, *, language: str, fraction: float) -> Iterator[Doc]:
    counted = ds.with_url(count, doc.url)
    if badwords_filter(doc.text, language, doc.normalized_url, counted, fraction):
        yield doc


def badwords_by_language(doc: Doc, count: Count, *, fraction: float) -> Iterator[Doc]:
    """mC4: each page against its own language's list (none → ``no_list``)."""
    bag: dict[str, int] = {}

    def both(stage: str, reason: str, n: int = 1) -> None:
        count(stage, reason, n)
        bag[reason] = n

    kept = badwords_filter(doc.text, doc.language, doc.normalized_url, both, fraction)
    for reason, n in bag.items():
        count(STAGE, f"{reason}:{doc.language}", n)
    if not kept:
        ds.sample(count, STAGE, f"contains_badword:{doc.language}", doc.text, doc.url)
    if kept:
        yield doc


def stage(job: StageJob) -> Any:
    """After language ID; none for variants that keep every page (``en.noblocklist``)."""
    import functools

    from c4forge.corpus.stages import MapStage

    if job.spec.badwords_fraction <= 0.0:
        return None
    if job.spec.multilingual:
        fn = functools.partial(badwords_by_language, fraction=job.badwords_fraction)
    else:
        fn = functools.partial(badwords, language=job.language, fraction=job.badwords_fraction)
    return MapStage(STAGE, fn, flow=FLOW)
