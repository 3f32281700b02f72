"""Exact-substring dedup (``--dedup-substrings``) against a brute-force oracle
(``substring_oracle``): random corpora over a tiny alphabet (repeats everywhere: overlapping,
periodic, across line breaks, multi-byte characters) and planted repeats in real C4 pages
(``c4forge/data/sample``), both keep modes; the stages run through the engine primitives."""

from __future__ import annotations

import functools
import random
from collections import Counter

import numpy as np
import pytest
from clean_fixtures import c4_docs, md5
from substring_oracle import oracle

from c4forge.clean.passes import _decisions_by_record, emit_located
from c4forge.corpus.counting import CounterBag
from c4forge.corpus.documents import Doc
from c4forge.dedup import substrings as sub
from c4forge.engines.local import LocalEngine
from c4forge.errors import ConfigError

TS = "2019-04-18T00:00:00Z"


def run_substrings(
    pages: list[tuple[str, str]], n: int, keep: str, engine=None, collect=list, hot=sub.HOT
) -> tuple[dict[str, str | None], dict[str, int]]:
    """Both passes of the stage over ``(url, text)`` pages, as the chunk passes run them:
    emit → ``decide`` on the engine → apply, the first pass's output the second's input.
    Returns ``({url: text or None}, substrings counters)``; ``hot``: the stage's limit of
    anchor-grouped occurrences (small: the per-window path too)."""
    engine = engine or LocalEngine()
    located = [((0, i), Doc(u, TS, u, t)) for i, (u, t) in enumerate(pages)]
    counts = CounterBag()
    for stage in sub.stages(n, keep, hot):
        emit = functools.partial(emit_located, stage=stage)
        emitted = engine.source(f"{stage.name}/docs", located, emit)
        chunked = collect(stage.decide(engine, emitted))  # as the chunk passes get them
        assert {chunk for chunk, _ in chunked} <= {0}
        of = _decisions_by_record([value for _, value in chunked], stage.codec)
        located = [
            (loc, out)
            for loc, doc in located
            for out in stage.apply(loc, doc, of(loc[1], ()), counts)
        ]
    counts.merge(engine.counters())
    kept = {d.url: d.text for _, d in located}
    return {u: kept.get(u) for u, _ in pages}, counts.counts.get(sub.STAGE, {})


def check_exact(pages: list[tuple[str, str]], n: int, keep: str, **kw) -> dict[str, str | None]:
    got, counts = run_substrings(pages, n, keep, **kw)
    want, struck = oracle(pages, n, keep)
    assert got == want
    assert counts.get("bytes_struck", 0) == struck
    outcomes = sum(counts.get(r, 0) for r in sub.FLOW.outcomes)
    assert outcomes == len(pages)  # every page leaves the stage once
    assert counts.get("empty", 0) == sum(v is None for v in want.values())
    windows = Counter(
        raw[s : s + n]
        for _, text in pages
        for raw in [text.encode()]
        for s in range(len(raw) - n + 1)
    )
    assert counts.get("repeated_windows", 0) == sum(c >= 2 for c in windows.values())
    return got


# --- the oracle, on corpora full of repeats ---------------------------------------------------

ALPHABET = ["a", "b", "a", "b", " ", "\n", "é", "日"]  # 1-, 2- and 3-byte characters


def random_corpus(rng: random.Random, docs: int, longest: int) -> list[tuple[str, str]]:
    pages = []
    for i in range(docs):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(1, longest)))
        pages.append((f"https://r.example/{i}", text))
    return pages


@pytest.mark.parametrize("hot", [sub.HOT, 2])
@pytest.mark.parametrize("keep", sub.KEEP_MODES)
@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 12])
def test_random_corpora_equal_the_oracle(n: int, keep: str, hot: int) -> None:
    """``hot=2``: hashes marked 3+ times take the per-window path, the others are grouped
    per anchor, in the same corpus."""
    rng = random.Random(n * 7 + len(keep))
    for _ in range(12):
        check_exact(random_corpus(rng, rng.randint(1, 6), 40), n, keep, hot=hot)


@pytest.mark.parametrize("keep", sub.KEEP_MODES)
def test_groups_decided_pairwise_or_as_classes_give_the_same(keep: str, monkeypatch) -> None:
    """A group of a few places is decided pair by pair on its bytes, a larger one as classes
    of its sorted contexts: every group forced one way, then the other, gives the oracle's
    documents and the same counters (a repeated window counted once, however many places)."""
    rng = random.Random(11 + len(keep))
    for _ in range(10):
        pages = random_corpus(rng, rng.randint(2, 8), 60)
        for n in (3, 7, 12):
            results = []
            for pairwise in (0, 10**6):
                monkeypatch.setattr(sub, "PAIRWISE", pairwise)
                check_exact(pages, n, keep)
                results.append(run_substrings(pages, n, keep))
            assert results[0] == results[1]


@pytest.mark.parametrize("keep", sub.KEEP_MODES)
def test_sparse_repeats_in_random_text_equal_the_oracle(keep: str) -> None:
    """A large alphabet: few chance repeats, so struck ranges have edges inside lines."""
    rng = random.Random(5)
    letters = [chr(c) for c in range(0x61, 0x7B)] + ["é", "ß", "日", "本", " ", "\n"]
    base = "".join(rng.choice(letters) for _ in range(400))
    pages = []
    for i in range(8):
        text = "".join(rng.choice(letters) for _ in range(rng.randint(20, 120)))
        a, b = sorted(rng.sample(range(len(base)), 2))
        cut = rng.randint(0, len(text))
        pages.append((f"https://s.example/{i}", text[:cut] + base[a : b + 1] + text[cut:]))
    for n in (5, 9, 16):
        for hot in (sub.HOT, 2):
            check_exact(pages, n, keep, hot=hot)


# --- planted repeats in real C4 pages ---------------------------------------------------------


@pytest.fixture(scope="module")
def real() -> list[tuple[str, str]]:
    """Real C4 pages (the bundled sample) with no 50-byte window repeated among them."""
    pages = [(d["url"], d["text"]) for d in c4_docs(0, 40) if len(d["text"]) > 600][:8]
    assert oracle(pages, 50, "none")[1] == 0
    return pages


def _plant(pages, i: int, fragment: str, at: int) -> list[tuple[str, str]]:
    url, text = pages[i]
    out = list(pages)
    out[i] = (url, text[:at] + fragment + text[at:])
    return out


def test_nothing_repeated_nothing_changes(real) -> None:
    got = check_exact(real, 50, "none")
    assert got == dict(real)


def test_repeat_inside_lines_both_copies_struck(real) -> None:
    fragment = real[7][1][100:180]  # 80 bytes of real text, ASCII
    assert fragment.isascii() and "\n" not in fragment
    pages = _plant(real[:7], 0, "[" + fragment + "]", real[0][1].index(" ") + 1)
    pages = _plant(pages, 1, "(" + fragment + ")", real[1][1].index(" ") + 1)
    got = check_exact(pages, 50, "none")
    for url, text in pages[:2]:
        assert got[url] == text.replace(fragment, "")
    assert got == {**dict(pages), **{u: got[u] for u, _ in pages[:2]}}  # the others untouched


def test_keep_first_keeps_the_smallest_md5_copy_of_three(real) -> None:
    fragment = real[7][1][200:300]
    pages = real[:7]
    for i in (2, 3, 4):
        pages = _plant(pages, i, fragment, len(pages[i][1]))
    owner = min((u for u, _ in pages[2:5]), key=md5)
    got = check_exact(pages, 50, "first")
    for url, _ in pages[2:5]:
        assert (fragment in got[url]) == (url == owner)
    none = check_exact(pages, 50, "none")
    assert all(fragment not in none[u] for u, _ in pages[2:5])


@pytest.mark.parametrize("pairwise", [sub.PAIRWISE, 0])
@pytest.mark.parametrize("keep", sub.KEEP_MODES)
def test_many_copies_beside_a_variant(real, keep: str, pairwise: int, monkeypatch) -> None:
    """Five pages hold a fragment, two more a variant of it (one character changed in its
    middle), one page holds it twice: its anchors' groups mix many identical places with a few
    different ones (decided pairwise or as classes)."""
    monkeypatch.setattr(sub, "PAIRWISE", pairwise)
    fragment = real[7][1][100:400]
    variant = fragment[:150] + ("X" if fragment[150] != "X" else "Y") + fragment[151:]
    pages = real[:7] + [("https://twice.example/", fragment + "\n" + fragment)]
    for i in (0, 1, 2, 3, 4):
        pages = _plant(pages, i, fragment, len(pages[i][1]) // 2)
    for i in (5, 6):
        pages = _plant(pages, i, variant, 10)
    got = check_exact(pages, 50, keep)
    assert sum(fragment in (got[u] or "") for u, _ in pages) == (keep == "first")


def test_repeat_across_a_line_break_keeps_the_break(real) -> None:
    fragment = "alpha beta gamma delta epsilon\nzeta eta theta iota kappa lambda"
    pages = _plant(real[:3], 0, fragment + "\n", real[0][1].index("\n") + 1)
    pages = _plant(pages, 1, "(" + fragment + ")", 0)
    got = check_exact(pages, 50, "none")
    assert got[pages[0][0]] == real[0][1]  # its two lines left empty are gone
    assert got[pages[1][0]].startswith("(\n)")  # the break is kept, the lines do not merge
    assert "alpha" not in got[pages[1][0]] and "lambda" not in got[pages[1][0]]


def test_overlapping_and_in_one_document(real) -> None:
    a = real[6][1][0:70]
    b = real[6][1][40:120]  # overlaps ``a`` by 30 bytes
    pages = _plant(real[:4], 0, a, 10)
    pages = _plant(pages, 1, b, 10)
    pages = _plant(pages, 2, a + " … " + a, 5)  # twice in one document
    for keep in sub.KEEP_MODES:
        check_exact(pages, 25, keep)
        check_exact(pages, 25, keep, hot=2)
    got = check_exact(pages, 25, "first")
    assert got[pages[2][0]].count(a[:25]) <= 1 + (pages[2][0] == min(u for u, _ in pages[:3]))


def test_multibyte_characters_at_the_boundaries(real) -> None:
    fragment = "ü日本語のテキスト — naïve café résumé ✓ ünïcödé 🙂🙂"  # ends and starts mid-window
    pages = _plant(real[:3], 0, "é" + fragment + "本", 30)
    pages = _plant(pages, 1, "日" + fragment + "ß", 30)
    for n in (7, 8, 9, 10, 11):
        for keep in sub.KEEP_MODES:
            got = check_exact(pages, n, keep)
            for text in got.values():
                assert text is None or text.encode("utf-8").decode("utf-8") == text


def test_n_larger_than_any_document(real) -> None:
    longest = max(len(t.encode()) for _, t in real)
    doubled = real + [(u + "?copy", t) for u, t in real]
    got, counts = run_substrings(doubled, longest + 1, "none")
    assert got == dict(doubled) and counts.get("passed") == len(doubled)
    assert counts.get("candidate_fingerprints", 0) == 0


def test_whole_copies_are_dropped_or_kept_once(real) -> None:
    pages = real[:3] + [("https://copy.example/x", real[0][1])]
    got = check_exact(pages, 50, "none")
    assert got[real[0][0]] is None and got["https://copy.example/x"] is None
    got = check_exact(pages, 50, "first")
    owner = min((real[0][0], "https://copy.example/x"), key=md5)
    assert got[owner] == real[0][1]
    assert [u for u, t in got.items() if t is None] == [
        u for u in (real[0][0], "https://copy.example/x") if u != owner
    ]


# --- the pieces --------------------------------------------------------------------------------


def test_anchors_are_the_leftmost_minima() -> None:
    rng = np.random.default_rng(2)
    data = rng.integers(0, 3, 500).astype(np.uint8)
    for n in (2, 6, 21):
        h, minima = sub.winnow(data, n)
        w = n - sub.kgram_size(n) + 1
        starts = np.arange(len(minima))
        want = [s + int(np.argmin(h[s : s + w])) for s in starts]
        assert sub.anchor_positions(h, minima, starts).tolist() == want


def test_winnow_window_minima_and_marked_positions() -> None:
    rng = np.random.default_rng(1)
    data = rng.integers(0, 4, 300).astype(np.uint8)
    for n in (1, 2, 5, 11, 40):
        k = sub.kgram_size(n)
        h, minima = sub.winnow(data, n)
        w = n - k + 1
        assert list(minima) == [h[s : s + w].min() for s in range(len(data) - n + 1)]
        marked = [
            h[i]
            for i in range(len(h))
            if any(h[i] == minima[s] for s in range(max(0, i - w + 1), min(i, len(minima) - 1) + 1))
        ]
        assert sorted(sub.marked_hashes(h, minima, w)) == sorted(marked)
        equal = [
            (i, j)
            for i in range(len(h))
            for j in range(i)
            if bytes(data[i : i + k]) == bytes(data[j : j + k])
        ]
        assert all(h[i] == h[j] for i, j in equal)


def test_class_ids_are_equal_exactly_for_strings_sharing_the_needed_prefix() -> None:
    """Against brute force: strings over a tiny alphabet (many shared prefixes, a prefix of
    another, empty ones, duplicates) get one id per need, equal exactly when both strings are
    that long and share that many leading bytes."""
    rng = random.Random(9)
    for _ in range(50):
        strings = [
            bytes(rng.choice(b"ab\x00") for _ in range(rng.randint(0, 8)))
            for _ in range(rng.randint(1, 12))
        ]
        needs = np.arange(0, 10, dtype=np.int64)
        ids = sub._class_ids(strings, needs)
        assert ids.shape == (len(needs), len(strings))
        for t, need in enumerate(needs.tolist()):
            for i, a in enumerate(strings):
                for j, b in enumerate(strings):
                    same = len(a) >= need and len(b) >= need and a[:need] == b[:need]
                    assert (ids[t, i] == ids[t, j]) == (same or i == j), (strings, need, i, j)


def test_the_thue_morse_pair_is_told_apart_where_every_polynomial_hash_collides() -> None:
    """A Thue–Morse string and its complement (2,048 bytes) collide under every polynomial hash
    modulo 2**64 (the k-gram hash here too): planted as repeats, a group compares their
    windows on their bytes and strikes exactly what the oracle does."""
    bits = [0]
    while len(bits) < 2048:
        bits += [1 - b for b in bits]
    a = np.array([ord("a") + b for b in bits], dtype=np.uint8)
    b = np.array([ord("b") - b for b in bits], dtype=np.uint8)
    assert sub.kgram_hashes(a, 2048).tolist() == sub.kgram_hashes(b, 2048).tolist()
    ta, tb = a.tobytes().decode(), b.tobytes().decode()
    pages = [(f"https://t.example/{i}", t) for i, t in enumerate([ta, tb, ta + "!", "x" + tb])]
    for keep in ("none", "first"):
        check_exact(pages, 2048, keep)


@pytest.mark.parametrize(("n", "keep"), [(-1, "none"), (True, "none"), (10, "all")])
def test_bad_options_are_config_errors(n, keep) -> None:
    from c4forge.clean.config import CleanJob

    with pytest.raises(ConfigError):
        CleanJob(("in",), "out", dedup_substrings=n, substrings_keep=keep)


def test_the_plan_places_the_stage_last_before_the_split() -> None:
    from c4forge.clean.config import CleanJob
    from c4forge.clean.plan import build_plan, recorded_plan

    off = CleanJob(("in",), "out")
    assert off.record().get("dedup_substrings") is None
    assert sub.STAGE not in [s.name for s in build_plan(off).doc_stages]
    job = off.replace(dedup_substrings=100, substrings_keep="first")
    names = [s.name for s in build_plan(job).doc_stages]
    assert names[-3:] == [sub.FP_STAGE, sub.STAGE, "split"]
    assert job.record()["dedup_substrings"] == {"bytes": 100, "keep": "first"}
    assert recorded_plan(job.record()).funnel == build_plan(job).funnel
    assert sub.STAGE in build_plan(job).funnel and sub.FP_STAGE not in build_plan(job).funnel


def test_the_strike_pass_reads_the_documents_the_winnowing_pass_read() -> None:
    """The winnowing pass changes no document, so the pass after it rewrites none: it and the
    strike pass read the file written before the winnowing pass (one scratch copy of the
    corpus saved); every other pass reads the one before it."""
    from c4forge.clean.config import CleanJob
    from c4forge.clean.passes import docs_written_by
    from c4forge.clean.plan import build_plan

    job = CleanJob(("in",), "out").replace(dedup_substrings=100)
    segments = build_plan(job).segments()
    names = [corpus.name if corpus else None for _maps, corpus in segments]
    fp = names.index(sub.FP_STAGE)
    assert names[fp + 1] == sub.STAGE
    written = [docs_written_by(segments, k) for k in range(len(segments))]
    assert written == [k if k != fp + 1 else fp for k in range(len(segments))]
    plain = build_plan(CleanJob(("in",), "out")).segments()
    assert [docs_written_by(plain, k) for k in range(len(plain))] == list(range(len(plain)))


def test_decisions_travel_back_packed_and_are_found_per_record() -> None:
    """The stage's decisions route back packed: candidate marks as batches of rows per chunk
    (looked up per record, in any order), strikes as bytes led by the record (walked sorted,
    asked in file order; records without a document are passed over)."""
    from c4forge.corpus.stages import RouteCodec

    marks = [(3, 0, 7), (1, 1, 2**64 - 1), (2, 0, 2**63), (1, 0, 0), (3, 1, 8), (9, 0, 4)]
    batches = [np.array(marks[:4], dtype=sub.MARK_ROW).tobytes()]
    batches.append(np.array(marks[4:], dtype=sub.MARK_ROW).tobytes())
    find = _decisions_by_record(batches, sub.stages(100, "none")[0].codec)
    got = {r: sorted(map(tuple, find(r, ()).tolist())) for r in (1, 3, 9)}
    assert got == {1: [(1, 0, 0), (1, 1, 2**64 - 1)], 3: [(3, 0, 7), (3, 1, 8)], 9: [(9, 0, 4)]}
    assert find(0, ()) == () and find(4, ()) == ()
    strikes = RouteCodec(sub.pack_strikes, sub.unpack_strikes)
    packed = [sub.pack_strikes(r, bytes([r % 256, 1])) for r in (5, 2, 300, 2)]
    find = _decisions_by_record(packed, strikes)
    assert [find(r, ()) for r in (2, 5, 300)] == [
        [b"\x02\x01", b"\x02\x01"],
        [b"\x05\x01"],
        [b",\x01"],
    ]
    plain = _decisions_by_record([(2, "a"), (1, "b"), (2, "c")], None)
    assert plain(2, ()) == ["a", "c"] and plain(7, ()) == ()
