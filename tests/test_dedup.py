"""Span and line dedup (c4_rules.md §8): the rules as pure functions, and the plan's dedup
stage run through the local engine's primitives (as the chunk passes run it), Punkt for real.

Pages are built from real-looking English lines whose kept copy is known from the rule:
the owner is the page whose URL has the smallest md5, not the alphabetically first one. The
URLs below are chosen so those two orders disagree (asserted, so the tests cannot pass by
accident with an alphabetical owner).
"""

from __future__ import annotations

import hashlib
import random

from clean_fixtures import corpus_stage, run_corpus_stage

from c4forge.corpus.counting import CounterBag
from c4forge.corpus.documents import Doc
from c4forge.dedup import exact as exact_dedup
from c4forge.rules.sentences import split_sentences

URL_A = "https://a.example.com/1"  # alphabetically first, largest md5 of the three
URL_B = "https://b.example.com/1"  # smallest md5: owns every shared span/line
URL_C = "https://c.example.com/1"


def md5(s: str) -> str:
    return hashlib.md5(s.encode("utf-8")).hexdigest()


def test_url_orders_disagree():
    assert md5(URL_B) < md5(URL_C) < md5(URL_A)
    assert URL_A < URL_B < URL_C


def sents(text: str) -> list[list[str]]:
    """CleanedPage.sentences for a text: Punkt sentences per line."""
    return [split_sentences(line) for line in text.split("\n")]


SHARED = (
    "The museum opens at nine in the morning on weekdays. "
    "Tickets can be bought at the front desk or online. "
    "Children under twelve enter for free with an adult."
)
LINE_A = "Our family visited the old town last summer and loved it."
LINE_B = "The river walk is the best way to see the bridges at dusk."
LINE_C = "We stayed in a small hotel near the main square for a week."
UNIQUE_3 = "I went home early. The rain had stopped by then. Dinner was ready at seven."


TS = "2019-04-18T00:00:00Z"


def _run(stage, docs: list[Doc]) -> tuple[dict[str, str | None], CounterBag]:
    """The plan's dedup stage over ``docs`` through the local engine: ``{url: text or None}``."""
    out, counts = run_corpus_stage(stage, docs)
    bag = CounterBag()
    bag.merge(counts)
    return {u: (d.text if d is not None else None) for u, d in out.items()}, bag


def spans_of(items: list[tuple[str, list[list[str]]]]) -> tuple[dict[str, str | None], CounterBag]:
    docs = [Doc(u, TS, u, "", s) for u, s in items]
    return _run(corpus_stage({"dedup": "spans"}, "dedup"), docs)


def run_spans(pages: dict[str, str]) -> tuple[dict[str, str | None], CounterBag]:
    return spans_of([(u, sents(t)) for u, t in pages.items()])


# --- spans ------------------------------------------------------------------------------------


def test_span_windows_short_lines_and_end_marks():
    assert list(exact_dedup.span_windows([])) == []
    assert list(exact_dedup.span_windows(["One."])) == [(0, ("one.",))]
    assert list(exact_dedup.span_windows(["A b.", "C d."])) == [(0, ("a b.", "c d."))]
    five = ["S1.", "S2.", "S3.", "S4.", "S5."]
    assert [j for j, _ in exact_dedup.span_windows(five)] == [0, 1, 2]
    # Punkt turns "! ! !" into lone marks; windows made only of them are not text.
    marks = split_sentences("Another sentence. . . ? ? ! ! !")
    windows = dict(exact_dedup.span_windows(marks))
    assert 0 in windows  # ("another sentence.", ".", ".") has text
    assert all(j == 0 for j in windows)


def test_span_key_is_md5_of_lowercased_window_joined_by_newline():
    ((_, window),) = exact_dedup.span_windows(["Hello There.", "Second One!"])
    assert exact_dedup.span_key(window) == hashlib.md5(b"hello there.\nsecond one!").digest()


def test_span_shared_across_pages_survives_once_on_smallest_md5_url():
    pages = {
        URL_A: "\n".join([LINE_A, SHARED, UNIQUE_3]),
        URL_B: "\n".join([SHARED, LINE_B, UNIQUE_3.replace("seven", "eight")]),
        URL_C: "\n".join([LINE_C, SHARED.upper(), "Nothing else. Really nothing. At all here."]),
    }
    out, bag = run_spans(pages)
    # B owns SHARED (case-insensitive match on C's upper-case copy): B keeps it, A and C lose it.
    assert SHARED in out[URL_B]
    assert SHARED not in out[URL_A] and "museum" not in out[URL_A].lower()
    assert "MUSEUM" not in out[URL_C]
    assert out[URL_A] == "\n".join([LINE_A, UNIQUE_3])
    assert bag.get("dedup", "duplicate_sentence") == 6  # 3 sentences on A, 3 on C
    assert bag.get("dedup", "passed") == 3


def test_span_repeated_within_one_page_keeps_first_occurrence():
    # c4 1.0.0 deleted every copy of a span repeated only inside one page; D1 keeps one.
    page = "\n".join([SHARED, LINE_A, SHARED, LINE_B])
    out, bag = run_spans({URL_A: page})
    assert out[URL_A] == "\n".join([SHARED, LINE_A, LINE_B])
    assert bag.get("dedup", "repeated_windows") == 1
    assert bag.get("dedup", "duplicate_sentence") == 3


def test_span_one_sentence_line_only_matches_identical_line():
    # LINE_A as a whole line on A; inside a longer line on B: different windows, nothing removed.
    pages = {URL_A: "\n".join([LINE_A, UNIQUE_3]), URL_B: f"{LINE_A} {LINE_B} {LINE_C}\n{UNIQUE_3}"}
    out, bag = run_spans(pages)
    assert LINE_A in out[URL_B]
    # UNIQUE_3 (a 3-sentence line) is shared: B (smaller md5) keeps it, A drops to one sentence.
    assert out[URL_A] is None
    assert bag.get("dedup", "too_few_sentences") == 1


def test_span_page_emptied_and_rebuilt_with_single_spaces():
    spaced = "First  sentence here.   Second one follows!  Third is last?"
    pages = {URL_B: "\n".join([spaced, LINE_A]), URL_A: spaced}
    out, bag = run_spans(pages)
    assert out[URL_A] is None and bag.get("dedup", "empty") == 1
    # Every line is rebuilt from its sentences joined by one space: the runs *between*
    # sentences collapse, whitespace inside a sentence stays.
    assert out[URL_B] == "First  sentence here. Second one follows! Third is last?\n" + LINE_A


def test_span_overlap_caveat_keeps_first_sentence_only():
    s = "This exact sentence repeats many times."
    out, _ = run_spans({URL_A: f"{s} {s} {s} {s}\n{UNIQUE_3}"})
    assert out[URL_A] == f"{s}\n{UNIQUE_3}"


def test_span_result_independent_of_page_order():
    pages = {
        URL_A: "\n".join([SHARED, LINE_A, UNIQUE_3]),
        URL_B: "\n".join([LINE_B, SHARED, SHARED]),
        URL_C: "\n".join([UNIQUE_3, SHARED, LINE_C]),
    }
    items = [(u, sents(t)) for u, t in pages.items()]
    results = set()
    rng = random.Random(0)
    for _ in range(5):
        rng.shuffle(items)
        out, bag = spans_of(items)
        results.add((tuple(sorted(out.items(), key=str)), repr(bag.as_dict())))
    assert len(results) == 1
    ((out_items, _),) = results
    out = dict(out_items)
    # B owns SHARED (its first copy); UNIQUE_3 is on A and C, and md5(C) < md5(A): C keeps it.
    assert out[URL_B] == "\n".join([LINE_B, SHARED])
    assert out[URL_C] == "\n".join([UNIQUE_3, LINE_C])
    assert out[URL_A] is None  # only LINE_A (1 sentence) left


def test_span_removals_owner_tuple_order():
    # (md5(url), loc, line, j, length): the owner is the smallest md5, then its first window
    occ = [
        (md5(URL_A), (0, 0), 0, 0, 3),
        (md5(URL_B), (0, 1), 4, 1, 3),
        (md5(URL_B), (0, 1), 2, 5, 3),
    ]
    removals = list(exact_dedup.iter_span_removals(occ))
    assert sorted(removals) == sorted(
        [((0, 0), exact_dedup.SpanRemoval(0, 0, 3)), ((0, 1), exact_dedup.SpanRemoval(4, 1, 3))]
    )
    assert list(exact_dedup.iter_span_removals(occ[:1])) == []


# --- lines ------------------------------------------------------------------------------------


def run_lines(pages: dict[str, str]) -> tuple[dict[str, str | None], CounterBag]:
    docs = [Doc(u, TS, u, t) for u, t in pages.items()]
    return _run(corpus_stage({"dedup": "lines"}, "dedup"), docs)


def test_lines_owner_is_smallest_md5_url_and_first_occurrence_in_page():
    pages = {
        URL_A: "\n".join([SHARED, LINE_A, UNIQUE_3]),
        URL_B: "\n".join([LINE_B, "  " + SHARED.lower() + " ", LINE_B, UNIQUE_3]),
    }
    out, bag = run_lines(pages)
    # B owns SHARED (its stripped, lowercased copy) and UNIQUE_3; A keeps only LINE_A.
    assert out[URL_A] is None  # LINE_A alone: 1 sentence
    assert out[URL_B] == "\n".join([LINE_B, "  " + SHARED.lower() + " ", UNIQUE_3])  # unchanged
    assert bag.get("dedup", "global_duplicate") == 2
    assert bag.get("dedup", "local_duplicate") == 1
    assert bag.get("dedup", "line_passed") == 4
    assert bag.get("dedup", "too_few_sentences") == 1


def test_lines_punkt_on_joined_text_can_drop_an_untouched_page():
    # A line ending in '"' (no period) is one sentence on its own, but Punkt on the joined
    # text merges it with the next line: 3 sentences per line, 2 joined -> dropped, although
    # no line was removed (reference behaviour, §8.2 step 5).
    text = 'The sign read "Closed for the season"\nWe turned around and drove back home.\nThen it ended.'
    assert sum(len(split_sentences(x)) for x in text.split("\n")) == 3
    assert len(split_sentences(text)) == 2
    out, bag = run_lines({URL_A: text})
    assert out[URL_A] is None
    assert bag.get("dedup", "line_passed") == 3 and bag.get("dedup", "too_few_sentences") == 1


def test_lines_empty_page():
    bag = CounterBag()
    assert exact_dedup.apply_line_dedup("x\ny", [], bag, split_sentences) is None
    assert bag.get("dedup", "empty") == 1 and bag.get("dedup", "global_duplicate") == 2


def test_line_occurrences_once_per_distinct_key():
    keys = list(exact_dedup.line_keys("Same line.\nsame LINE.\nOther."))
    assert keys == [md5("same line."), md5("other.")]
    assert exact_dedup.line_owner([(md5(URL_A), (0, 0)), (md5(URL_B), (1, 0))]) == (
        md5(URL_B),
        (1, 0),
    )
