"""URL normalization and dedup choice (§4), split (§11), language ID (§9), fingerprints."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from pathlib import Path

import pytest

from c4forge.clean.resources import constants, resource_fingerprints
from c4forge.corpus.counting import CounterBag
from c4forge.corpus.urls import normalize_url
from c4forge.dedup.urls import choose_url_copy
from c4forge.langid import langdetect_filter as langid
from c4forge.readers.wet import Page, read_wet
from c4forge.rules.badwords import badwords_filter
from c4forge.rules.lines import clean_page
from c4forge.rules.split import split_of

ROOT = Path(__file__).resolve().parents[1]
C4_SAMPLE = ROOT / "c4forge" / "data" / "sample" / "c4-sample.00000-of-00001.json.gz"
DERIVED = ROOT / "c4forge" / "data" / "sample" / "real-warc-html-to-wet.resiliparse.warc.wet.gz"
PEER = ROOT / "tests" / "data" / "peer" / "datatrove-0.10.1"


# --------------------------------------------------------------------------- §4.1


@pytest.mark.parametrize(
    "url,expected",
    [
        ("http://x.com/https://www.y.com/z", "x.com/y.com/z"),
        ("https://www.example.com/", "example.com"),
        ("HTTPS://WWW.Example.com/", "HTTPS://WWW.Example.com"),
        ("http://www.www.example.com", "www.example.com"),
        ("http://example.com/a?reference=1", "example.com/a"),
        ("http://example.com/a?refresh=1", "example.com/a"),
        ("http://example.com/a?utm_source=x#frag", "example.com/a"),
        ("http://example.com/a?feed=rss", "example.com/a"),
        ("http://example.com/a?x=1&utm_source=y", "example.com/a?x=1&utm_source=y"),
        ("http://example.com/a?x=1?ref=2", "example.com/a?x=1"),
        ("http://example.com/a///", "example.com/a"),
        ("ftp://example.com/", "ftp://example.com"),
        ("http://Example.COM/Path#frag", "Example.COM/Path#frag"),
        ("http://example.com/a?Ref=1", "example.com/a?Ref=1"),
        ("//", ""),
    ],
)
def test_normalize_url(url, expected):
    assert normalize_url(url) == expected


# --------------------------------------------------------------------------- §4.2


def mk(url: str, ts: str, text: str) -> Page:
    return Page(url=url, timestamp=ts, text=text, normalized_url=normalize_url(url))


def md5(s: str) -> str:
    return hashlib.md5(s.encode()).hexdigest()


def test_choose_newest_timestamp():
    a = mk("http://a.com/x", "2019-04-18T10:00:00Z", "old")
    b = mk("https://www.a.com/x/", "2019-04-20T10:00:00Z", "new")
    assert choose_url_copy([a, b]) == (b, False)
    assert choose_url_copy([b, a]) == (b, False)


def test_tie_broken_by_smallest_text_md5_d3():
    t = "2019-04-18T10:00:00Z"
    pages = [mk("http://a.com/x", t, f"text {i}") for i in range(5)]
    best = min(pages, key=lambda p: md5(p.text))
    for order in (pages, pages[::-1], pages[2:] + pages[:2]):
        assert choose_url_copy(order) == (best, True)


def test_tie_same_text_broken_by_url_not_md5():
    t = "2019-04-18T10:00:00Z"
    a, b = mk("https://a.com/x", t, "same"), mk("http://a.com/x", t, "same")
    assert choose_url_copy([a, b]) == (b, False)  # md5 equal: the url decided
    assert choose_url_copy([a]) == (a, False)
    with pytest.raises(ValueError):
        choose_url_copy([])


# --------------------------------------------------------------------------- §11


@pytest.mark.parametrize(
    "url",
    [
        "https://news.example.com/story-151",
        "http://www.news.example.com/story-151/",
        "http://example.com/articles/668?utm_campaign=x",
    ],
)
def test_split_spec_examples(url):
    assert split_of(normalize_url(url)) == "validation"


def test_split_rate_and_definition():
    urls = [f"example.com/page/{i}" for i in range(20000)]
    val = [u for u in urls if split_of(u) == "validation"]
    assert val == [u for u in urls if int(hashlib.md5(u.encode()).hexdigest(), 16) % 1000 == 0]
    assert 5 <= len(val) <= 40
    assert split_of("news.example.com/story-150") == "train"


# --------------------------------------------------------------------------- §9


def test_langid_counters():
    bag = CounterBag()
    english = (
        "The committee met on Tuesday to discuss the new budget, and most members "
        "agreed that the plan should be approved before the end of the month."
    )
    german = (
        "Der Ausschuss traf sich am Dienstag, um den neuen Haushalt zu besprechen, und "
        "die meisten Mitglieder waren sich einig, dass der Plan genehmigt werden sollte."
    )
    assert langid.langid_filter(english, bag)
    assert not langid.langid_filter(german, bag)
    assert not langid.langid_filter("", bag)
    assert not langid.langid_filter("12345 67890", bag)
    assert not langid.langid_filter("http://example.com/ a@b.com", bag)
    assert bag.counts["langid"] == {
        "passed": 1,
        "ignored_language": 1,
        "ignored_language:de": 1,
        "langdetect_exception": 3,
    }


def test_langid_low_confidence_and_no_predictions(monkeypatch):
    bag = CounterBag()
    monkeypatch.setattr(langid, "_detect_langs", lambda text: [("en", 0.98), ("fr", 0.02)])
    assert not langid.langid_filter("x", bag)
    monkeypatch.setattr(langid, "_detect_langs", lambda text: [("en", 0.99)])
    assert langid.langid_filter("x", bag)  # >= 0.99 passes
    monkeypatch.setattr(langid, "_detect_langs", lambda text: [])
    assert not langid.langid_filter("x", bag)
    assert bag.counts["langid"] == {"low_confidence": 1, "passed": 1, "no_predictions": 1}


@pytest.mark.parametrize("backend", ["fast", "stock"])
def test_langid_deterministic_with_seed_under_lock(monkeypatch, backend):
    # A short mixed text is where langdetect's sampling shows; seed 0 makes it repeatable, and
    # both backends (numba replay and langdetect itself) must give the very same floats.
    monkeypatch.setattr(langid, "_BACKEND", backend)
    text = "Bonjour tout le monde, hello world, hola a todos los amigos."
    first = langid._detect_langs(text)
    assert all(langid._detect_langs(text) == first for _ in range(5))
    monkeypatch.setattr(langid, "_BACKEND", "stock" if backend == "fast" else "fast")
    assert langid._detect_langs(text) == first
    if backend == "stock":
        from langdetect import DetectorFactory

        assert DetectorFactory.seed == 0


def test_real_c4_pages_are_english():
    """Released C4 passed this very rule; a deterministic quarter of the sample keeps the
    test short (langdetect costs ~5 ms a page)."""
    with gzip.open(C4_SAMPLE, "rt", encoding="utf-8") as f:
        docs = [json.loads(line) for line in f][::4]
    bag = CounterBag()
    assert all(langid.langid_filter(d["text"], bag) for d in docs)
    assert bag.counts["langid"] == {"passed": 250}


def test_langdetect_fingerprint():
    fp = langid.langdetect_fingerprint()
    assert fp["version"] == "1.0.9" and fp["profiles"] == 55 and len(fp["profiles_sha256"]) == 64


def test_fingerprints_block():
    fp = resource_fingerprints("en")
    assert fp["badwords"]["entries"] == 377
    assert fp["punkt"]["ortho_context"] == 20366
    assert fp["langdetect"]["version"] == "1.0.9" and fp["versions"]["nltk"]
    c = constants()
    assert (
        c["min_words_per_line"],
        c["min_sentences_per_page"],
        c["max_word_length"],
        c["max_page_chars"],
        c["validation_modulus"],
        c["span_window"],
    ) == (5, 3, 1000, 190000, 1000, 3)
    assert c["end_marks"] == [".", "?", "!", '"'] and len(c["policy_substrings"]) == 6
    json.dumps(fp)  # serialisable as stats.json config


# --------------------------------------------------------------------------- peer agreement


def test_agreement_with_datatrove_peer_output():
    """datatrove 0.10.1's C4QualityFilter + C4BadWordsFilter on the derived WET kept 73 docs.
    Its defaults differ from C4 in known ways (min 5 sentences instead of 3, min 3 words per
    line instead of 5, `'` is an end mark), so the comparison is: every page it kept, we keep
    too; our lines are a subset of its lines; its extra lines are short or end in `'`; and
    every page we keep that it dropped has fewer than 5 sentences."""
    with gzip.open(PEER / "out4" / "kept" / "00000.jsonl.gz", "rt", encoding="utf-8") as f:
        peer = [json.loads(line) for line in f]
    assert len(peer) == 73
    bag = CounterBag()
    ours: dict[str, list] = {}
    for p in read_wet(io.BytesIO(DERIVED.read_bytes()), "derived", bag):
        c = clean_page(p.text, bag)
        if c is not None and badwords_filter(c.text, "en", p.normalized_url, bag):
            ours.setdefault(p.url, []).append(c)
    assert bag.get("clean", "passed") == 96 and bag.get("badwords", "passed") == 89
    identical = 0
    for doc in peer:
        copies = ours[doc["metadata"]["url"]]
        peer_lines = doc["text"].split("\n")
        ok = []
        for c in copies:
            lines = c.text.split("\n")
            extra = [x for x in peer_lines if x not in lines]
            ok.append(
                all(x in peer_lines for x in lines)
                and all(len(x.split()) < 5 or x.endswith("'") for x in extra)
            )
        identical += any(c.text == doc["text"] for c in copies)
        assert any(ok), doc["metadata"]["url"]
    peer_urls = {d["metadata"]["url"] for d in peer}
    extra_pages = [cs[0] for u, cs in ours.items() if u not in peer_urls]
    assert all(sum(len(s) for s in c.sentences) < 5 for c in extra_pages)
    assert identical == 53 and len(extra_pages) == 16  # measured, see the report
    # out1: genuine CC WETs (whirlwind + CC-MAIN-2014-35): datatrove kept only the Wikipedia page.
    with gzip.open(PEER / "out1" / "kept" / "00000.jsonl.gz", "rt", encoding="utf-8") as f:
        assert [json.loads(x)["metadata"]["url"] for x in f] == [
            "https://an.wikipedia.org/wiki/Escopete"
        ]


def test_filter_funnel_conserves_every_page():
    """All filters in stage order (§1, dedup none) over real WETs: the identities of §13 hold
    (checked with the lead's conservation_errors), nothing is lost between stages."""
    from c4forge.clean.config import CleanJob
    from c4forge.clean.plan import build_plan
    from c4forge.corpus.counting import conservation_errors
    from c4forge.rules.lines import length_filter

    bag = CounterBag()
    pages = []
    for path in (DERIVED, ROOT / "tests" / "data" / "wet" / "whirlwind.warc.wet.gz"):
        pages += [p for p in read_wet(io.BytesIO(path.read_bytes()), str(path), bag)]
    groups: dict[str, list[Page]] = {}
    for p in pages:
        if length_filter(p.text, bag):
            groups.setdefault(p.normalized_url, []).append(p)
    docs = []
    for group in groups.values():
        kept, by_md5 = choose_url_copy(group)
        bag("url_dedup", "duplicate_url", len(group) - 1)
        bag("url_dedup", "passed")
        if by_md5:
            bag("url_dedup", "tie_text_md5")
        cleaned = clean_page(kept.text, bag)
        if cleaned is None:
            continue
        if not langid.langid_filter(cleaned.text, bag):
            continue
        if badwords_filter(cleaned.text, "en", kept.normalized_url, bag):
            bag("split", split_of(kept.normalized_url))
            docs.append(kept.url)
    accounts = build_plan(CleanJob((str(DERIVED),), "unused", dedup="none")).accounts
    counters = bag.as_dict(accounts)
    assert conservation_errors(counters, accounts) == []
    assert counters["wet"]["pages"] == 192 and counters["length"]["too_long_page"] == 2
    # http/https and www. variants of the same page collapse (e.g. allenai.org ×3).
    assert counters["url_dedup"]["duplicate_url"] == counters["length"]["passed"] - len(groups) > 0
    assert counters["split"]["train"] + counters["split"]["validation"] == len(docs) > 50
