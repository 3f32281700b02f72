"""FastPunkt gives exactly NLTK's sentences, and clean_page exactly §6's pages and counters.

The reference is NLTK's own ``PunktSentenceTokenizer.tokenize`` built the slow way
(``sentences.get_tokenizer()``). It is compared with the fast splitter on every line and every
page of the real data in the repo, and on generated adversarial text; ``clean_page`` is
compared with a literal transcription of c4_rules.md §6 that calls NLTK directly.
``C4FORGE_PUNKT_FUZZ=20000`` runs the generated tests with more examples.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from c4forge.corpus.counting import CounterBag
from c4forge.errors import ConfigError
from c4forge.readers.wet import read_wet
from c4forge.rules import punkt_fast, sentences
from c4forge.rules.lines import clean_page
from c4forge.rules.punkt_fast import FastPunkt
from c4forge.samples import iter_c4_sample

ROOT = Path(__file__).resolve().parents[1]
WET_FILES = [ROOT / "c4forge" / "data" / "sample" / "real-warc-html-to-wet.resiliparse.warc.wet.gz"]
WET_FILES += sorted(p for p in (ROOT / "tests" / "data" / "wet").iterdir() if ".wet" in p.name)
EXAMPLES = int(os.environ.get("C4FORGE_PUNKT_FUZZ", "300"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=EXAMPLES <= 300,  # CI: the same examples every run
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def reference():  # noqa: ANN201
    return sentences.get_tokenizer()


@pytest.fixture(scope="module")
def real_pages() -> list[str]:
    """Every page of the real data in the repo: the derived WET, the genuine CC WET excerpts,
    the 1,000 C4 documents."""
    texts = []
    for path in WET_FILES:
        with open(path, "rb") as f:
            texts += [p.text for p in read_wet(f, str(path), CounterBag())]
    texts += [d["text"] for d in iter_c4_sample()]
    assert len(texts) > 1100
    return texts


@pytest.fixture(scope="module")
def real_inputs(real_pages) -> dict[str, list[str]]:  # noqa: ANN001
    """What Punkt is called on: lines (raw, stripped, split on "\\n" only) and whole pages
    (lines dedup runs Punkt on the joined text), with NLTK's answers."""
    items = set(real_pages)
    for text in real_pages:
        for line in text.splitlines():
            items.add(line)
            items.add(line.strip())
        items.update(text.split("\n"))
    tok = reference()
    return {x: tok.tokenize(x) for x in sorted(items)}


# --------------------------------------------------------------------------- wiring


def test_fast_path_is_active_for_the_installed_nltk():
    """A changed NLTK would silently cost the speed-up: fail here instead."""
    assert punkt_fast.nltk_source_sha256() in punkt_fast.VERIFIED_NLTK_SOURCES
    sentences.use_punkt_implementation(None)
    assert sentences.punkt_implementation() == "fast"
    assert sentences.fast_punkt() is not None


def test_implementation_switch(monkeypatch):
    line = "Dr. Smith arrived. He sat down. J. R. R. Tolkien wrote it."
    try:
        monkeypatch.setenv(sentences.PUNKT_IMPL_ENV, "nltk")
        assert sentences.use_punkt_implementation(None) == reference().tokenize
        assert sentences.punkt_implementation() == "nltk"
        nltk_answer = sentences.split_sentences(line)
        monkeypatch.setenv(sentences.PUNKT_IMPL_ENV, "fast")
        sentences.use_punkt_implementation(None)
        assert sentences.punkt_implementation() == "fast"
        assert sentences.split_sentences(line) == nltk_answer == reference().tokenize(line)
        monkeypatch.setenv(sentences.PUNKT_IMPL_ENV, "regex")
        with pytest.raises(ConfigError, match="C4FORGE_PUNKT"):
            sentences.use_punkt_implementation(None)
    finally:
        monkeypatch.delenv(sentences.PUNKT_IMPL_ENV, raising=False)
        sentences.use_punkt_implementation(None)


def test_unverified_nltk_falls_back_to_nltk_with_a_warning(monkeypatch):
    monkeypatch.setattr(punkt_fast, "VERIFIED_NLTK_SOURCES", frozenset())
    with pytest.warns(RuntimeWarning, match="not the version it was verified against"):
        assert FastPunkt.create(reference()) is None


def test_self_check_disagreement_falls_back(monkeypatch):
    monkeypatch.setattr(FastPunkt, "tokenize", lambda self, text: [text])
    with pytest.warns(RuntimeWarning, match="disagrees with NLTK"):
        assert FastPunkt.create(reference()) is None


def test_source_hash_covers_the_restated_code(monkeypatch):
    """Changing any restated NLTK method (here: realignment) changes the hash."""
    from nltk.tokenize.punkt import PunktSentenceTokenizer

    before = punkt_fast.nltk_source_sha256()

    def _realign_boundaries(self, text, slices):  # noqa: ANN001, ANN202
        return slices

    monkeypatch.setattr(PunktSentenceTokenizer, "_realign_boundaries", _realign_boundaries)
    assert punkt_fast.nltk_source_sha256() not in (before, None)


# --------------------------------------------------------------------------- real data


def test_identical_on_every_real_line_and_page(real_inputs):
    fast = FastPunkt.create(reference())
    assert fast is not None
    mismatches = [x for x, want in real_inputs.items() if fast.tokenize(x) != want]
    assert mismatches == []
    # the shortcut and every cache were exercised
    assert 0 < fast.no_candidate < fast.calls
    assert all(n > 0 for n in fast.cache_sizes().values())


def test_identical_with_tiny_caches_that_keep_clearing(real_inputs):
    fast = FastPunkt(reference(), cache_size=16)
    items = list(real_inputs.items())[::3]
    assert [fast.tokenize(x) for x, _ in items] == [want for _, want in items]
    assert all(n <= 16 for n in fast.cache_sizes().values())


def test_identical_under_threads(real_inputs):
    """The second pass annotates a cached token in place; the lock keeps that invisible."""
    fast = FastPunkt(reference(), cache_size=512)
    items = [(x, want) for x, want in real_inputs.items() if len(x) < 2000][:4000]
    errors: list[str] = []

    def work(part: list[tuple[str, list[str]]]) -> None:
        for x, want in part:
            if fast.tokenize(x) != want:
                errors.append(x)

    threads = [threading.Thread(target=work, args=(items[i::4],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_no_candidate_shortcut_matches_nltk_edge_cases():
    fast = FastPunkt(reference())
    tok = reference()
    cases = [
        "",
        " ",
        "\u3000\n",
        "One sentence without a break.",
        "One sentence with trailing whitespace.  \t",
        "  Leading whitespace is kept by NLTK.",
        "Ends in a separator NLTK's rstrip removes.\x1c",
        "No end mark at all",
        "Dots inside 3.5 and e.g.x but no break",
        "Question?",
        "!",
    ]
    for text in cases:
        assert fast.tokenize(text) == tok.tokenize(text), repr(text)


# --------------------------------------------------------------------------- generated text

ABBREVS = sorted(reference()._params.abbrev_types)
STARTERS = sorted(reference()._params.sent_starters)
COLLOCATIONS = sorted(reference()._params.collocations)
PIECES = [
    *"the The word Word end it He She In However and a I x Smith Tolkien café Ünïcödé".split(),
    *"U.S. e.g. i.e. etc. Dr. Mr. Mrs. St. No. Jan. Co. Inc. vs. p. pp. J. R. A. a.m.".split(),
    *"3.5 12. 1,000. 2019. 1. iv. ... .. .... . ? ! ?! !!! -- - , ; : ( ) [ ] { }".split(),
    ". . .",
    '"',
    "'",
    "wasn't",
    "A.B.C.",
    "日本語。",
    "١٢.",
    "\u201c",
    "\u201d",
    "\u2018",
    "\u2019",
    "\u00ab",
    "\u00bb",
    "\u2026",
    "##number##",
]
SEPARATORS = [" ", " ", " ", "", "  ", "\t", "\n", "\n\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c"]
SEPARATORS += ["\x85", "\u00a0", "\u2028", "\u3000", " \n "]
CHARS = "aAzZ09 .?!\"')([]{}-,;:\t\n\r\x0b\x0c\x1c\u00a0\u2028\u3000\u201c\u201d\u00ab\u00bb\u2026"


def _word() -> st.SearchStrategy[str]:
    abbrev = st.sampled_from(ABBREVS).flatmap(
        lambda a: st.sampled_from([a + ".", a.capitalize() + ".", a.upper() + "."])
    )
    starter = st.sampled_from(STARTERS).map(str.capitalize)
    colloc = st.sampled_from(COLLOCATIONS).flatmap(
        lambda c: st.sampled_from(["12" if c[0] == "##number##" else c[0]]).map(
            lambda a: f"{a}. {c[1]}"
        )
    )
    initials = st.lists(st.sampled_from("JRKAB"), min_size=1, max_size=3).map(
        lambda xs: " ".join(x + "." for x in xs)
    )
    number = st.decimals(min_value=-1000, max_value=1000, places=2).map(str)
    return st.one_of(
        st.sampled_from(PIECES),
        abbrev,
        starter,
        colloc,
        initials,
        number,
        st.text(alphabet=CHARS, min_size=1, max_size=6),
    )


adversarial = st.lists(st.tuples(_word(), st.sampled_from(SEPARATORS)), max_size=30).map(
    lambda parts: "".join(w + s for w, s in parts)
)

_FUZZ_FAST = FastPunkt(reference())  # shared on purpose: caches filled by earlier examples


@FUZZ
@given(adversarial)
def test_identical_on_adversarial_text(text):
    assert _FUZZ_FAST.tokenize(text) == reference().tokenize(text)
    stripped = text.strip()
    assert _FUZZ_FAST.tokenize(stripped) == reference().tokenize(stripped)


@FUZZ
@given(st.text(alphabet=CHARS, max_size=80))
def test_identical_on_random_characters(text):
    assert _FUZZ_FAST.tokenize(text) == reference().tokenize(text)


@FUZZ
@given(adversarial.map(lambda t: t[:40]))
def test_context_decision_matches_text_contains_sentbreak(context):
    """The cached decision is NLTK's ``text_contains_sentbreak`` on any string, not only on
    the contexts the period regex produces."""
    fresh = FastPunkt(reference())
    want = reference().text_contains_sentbreak(context)
    assert fresh._context_has_break(context) == want
    assert _FUZZ_FAST._context_has_break(context) == want


# --------------------------------------------------------------------------- clean_page


POLICY = (
    "terms of use",
    "privacy policy",
    "cookie policy",
    "uses cookies",
    "use of cookies",
    "use cookies",
)


def literal_clean_page(text: str, count: CounterBag) -> tuple[str, list[list[str]]] | None:
    """c4_rules.md §6 written out literally: one count per line, NLTK's tokenizer."""
    tok = reference()
    kept: list[str] = []
    n = 0
    for line in text.splitlines():
        line = line.strip()
        if any(len(w) > 1000 for w in line.split()):
            count("clean", "too_long_word")
            continue
        line = re.sub(r"\[\d*\]|\[edit\]|\[citation needed\]", "", line)
        if not line.endswith((".", "?", "!", '"')) or line.endswith("..."):
            count("clean", "no_endmark")
            continue
        if len(line.split()) < 5:
            count("clean", "too_short")
            continue
        low = line.lower()
        if "lorem ipsum" in low:
            count("clean", "loremipsum")
            return None
        if "javascript" in low:
            count("clean", "javascript")
            continue
        if "{" in line:
            count("clean", "squigglybracket")
            return None
        if any(p in low for p in POLICY):
            count("clean", "policy")
            continue
        n += len(tok.tokenize(line))
        kept.append(line)
        count("clean", "line_passed")
    if n < 3:
        count("clean", "too_few_sentences")
        return None
    count("clean", "passed")
    cleaned = "\n".join(kept).strip()
    return cleaned, [tok.tokenize(line) for line in cleaned.split("\n")]


def check_clean_page(text: str) -> None:
    want_bag, got_bag = CounterBag(), CounterBag()
    want = literal_clean_page(text, want_bag)
    got = clean_page(text, got_bag)
    assert (None if got is None else (got.text, got.sentences)) == want
    assert got_bag.counts == want_bag.counts


def test_clean_page_identical_on_real_pages(real_pages):
    sentences.use_punkt_implementation(None)
    assert sentences.punkt_implementation() == "fast"
    for text in real_pages:
        check_clean_page(text)


LINE_PIECES = [
    "Five words make a line.",
    "A line of several words, then more. And another sentence here!",
    "Short line.",
    "Dr. Smith met Mr. Jones at 3.5 p.m. today. They talked.",
    "Some lorem ipsum dolor sit amet here.",
    "Please enable JavaScript in your browser now.",
    "Some code { var x = 1; } goes here.",
    "Read our privacy policy for more details here.",
    "This site uses cookies, as all sites do.",
    "Cited line with words here[1] and[edit] more[citation needed].",
    "[2] Leading citation line has five words.",
    "Trailing citation with five words. [3]",
    "A line that ends with an ellipsis and words...",
    'He said "stop here now." Then left.',
    "word " * 4 + "x" * 1001 + ".",
    "word " * 4 + "y" * 1000 + ".",
    "Five\u2003words\u00a0with odd spaces.",
    "",
    "   ",
    "no end mark in this line at all",
]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(LINE_PIECES), st.sampled_from(SEPARATORS)), max_size=12))
def test_clean_page_identical_on_generated_pages(parts):
    check_clean_page("".join(line + sep for line, sep in parts))


@FUZZ
@given(st.from_regex(punkt_fast._SIMPLE_CONTEXT, fullmatch=True))
def test_simple_context_words_are_nltk_word_tokens(context):
    assert punkt_fast.simple_context_words(context) == reference()._lang_vars.word_tokenize(context)
    assert FastPunkt(reference())._context_has_break(context) == (
        reference().text_contains_sentbreak(context)
    )
    assert punkt_fast.simple_context_words(context + ",") is None


def test_nltk_loads_without_scipy_stats_which_still_imports_later():
    """A fresh process: the splitter and the fingerprint load NLTK without SciPy's statistics
    (0.6 s of every clean run's start), sentences are NLTK's, and scipy.stats imports after."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from c4forge.rules import sentences\n"
        "print(sentences.split_sentences('It was 5 p.m. on Jan. 3. He left.'))\n"
        "print(sentences.punkt_fingerprint()['nltk_version'])\n"
        "print('scipy.stats' in sys.modules)\n"
        "import scipy.stats\n"
        "print(callable(scipy.stats.fisher_exact))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    reference = sentences.get_tokenizer().tokenize("It was 5 p.m. on Jan. 3. He left.")
    assert lines[0] == repr(reference)
    import importlib.metadata

    assert lines[1:] == [importlib.metadata.version("nltk"), "False", "True"]
