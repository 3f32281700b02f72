"""Exact-substring dedup (Lee et al. 2022, "ExactSubstr") as two keys-only corpus stages.

The rule (``--dedup-substrings N``): a *repeated window* is any N-byte window of a document's
UTF-8 text whose bytes occur at least twice in the corpus (at two places of one document
too). ``--substrings-keep none`` (the reference tool's and the paper's semantics) strikes
every occurrence of every repeated window; ``first`` keeps the occurrence of smallest
``(md5(url), offset)`` (the document span dedup keeps, then its first place) and strikes the
others. The struck bytes of a document are the union of its struck windows; then

* **characters**: a character any of whose bytes is struck is removed whole (ranges widen to
  UTF-8 character boundaries, never split a character);
* **line breaks**: a ``\\n`` is never removed, so a struck range across a line break removes
  the bytes on both sides and lines never merge; every line that lost a character is
  ``str.strip``-ped and dropped when left empty; untouched lines keep every byte;
* a document left with no line is dropped (``empty``); one with nothing removed is passed on
  unchanged (byte-identical to the run without the stage).

Why two stages and not a suffix array: the reference tool builds a suffix array of the whole
corpus on one machine (96 cores, > 600 GB RAM for C4). Here only keys cross a shuffle and a
worker holds one document or one key's occurrences, on every engine:

1. ``substrings_fp`` (winnowing, Schleimer et al. 2003): per document, 64-bit hashes of every
   k-gram (k = ⌈N/3⌉), the minimum of every window of w = N − k + 1 consecutive k-grams (one
   window of k-grams per N-byte window), and the *marked* positions (a k-gram equal to the
   minimum of a window that contains it). Per distinct marked hash a row ``(hash, loc,
   count)``, shuffled in columnar batches keyed by the hash's top bits (a chunk's rows of one
   bucket packed together: one item per hash cost more than deciding them); a hash marked at
   ≥ 2 positions corpus-wide is a *candidate*, sent back to its documents in batches per chunk.
2. ``substrings``: per document, the N-byte windows whose minimum is a candidate; those
   anchored at one position (the leftmost minimum of each: consecutive starts) travel as one
   item keyed by the anchor's hash, with the bytes they span (at most w + N − 1: fewer than
   12-byte digests of their windows once an anchor has more than N/11 of them: ≈ 33 on
   average at 100k pages of the scale corpus, whose window shuffle is 2.65× smaller). A group
   decides on those bytes, aligned at the anchor, without hashing: a few places
   (``PAIRWISE``) pair by pair (``_decide_pairs``), more as classes of their sorted contexts
   before and after the anchor (``_decide_classes``). For a hot hash (marked more than
   ``HOT`` times), one item per window keyed by its blake2b-128. A window counted ≥ 2 times
   is repeated: its struck occurrences go back to their documents, which apply them.

Exactness: two occurrences of one N-byte window have the same k-gram hashes, hence the same
minimum m, and each has a marked position of hash m (the window's own leftmost minimum), at
distinct positions (distinct documents, or in one document offsets that differ by the
windows' offset). So m is counted ≥ 2 times, is a candidate (hot or not, the same for both)
in both documents, and both windows are emitted in step 2 under the same key (m, at the same
offset from their anchors; or the same digest): every occurrence of every repeated window is
counted there, and step 2 sees only whole occurrence lists. A k-gram hash collision only adds
candidates (work, never a wrong strike). Anchored windows are compared on their bytes, so
the one way to a wrong strike is two different hot windows with equal blake2b-128 digests:
≤ M²/2¹²⁹ for M distinct hot windows (< 2·10⁻¹⁵ for M = 10¹², more windows than C4 has
bytes).

Memory per worker: one document and a flush of fingerprint rows (``FP_FLUSH_ROWS``), one
bucket's distinct fingerprints (a 2**-``FP_BUCKET_BITS`` share of the corpus's: ≈ 8 MB at C4
scale), one hot window's occurrences (streamed) or one anchor's (≤ ``HOT`` × w windows).
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from c4forge.corpus import drop_samples as ds
from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.documents import Doc
from c4forge.corpus.stages import StageJob
from c4forge.errors import ConfigError

STAGE = "substrings"
FP_STAGE = "substrings_fp"  # the winnowing pass (its shuffle, its profile row)
KEEP_MODES = ("none", "first")
DIGEST_BYTES = 16  # blake2b-128: a hot window's key (collision bound in the module docstring)
# A candidate hash marked more often than this is *hot*: its windows are shuffled one per key
# (streamed) instead of grouped per anchor (a group holds ≤ HOT × w windows: ≈ 1.1 M at
# N = 100, ≈ 110 MB while decided). A hot window costs about 20× an anchored one (an item and
# a blake2b key each): at 1M pages of the scale corpus 16,384 took 9 % less CPU than 4,096 and
# a lower peak (benchmarks/RESULTS.md §25).
HOT = 16_384
FLOW = Flow(
    ("empty",),
    ("passed", "trimmed"),
    ("bytes_struck", "repeated_windows", "candidate_windows", "candidate_fingerprints"),
    title="exact substrings",
    detail="bytes/windows",
)

_PLACE = struct.Struct(">III")  # chunk, record, offset (or count): bytes order = tuple order
_U64 = np.uint64
_MAX = np.iinfo(np.uint64).max
_BASE = 0x9E3779B97F4A7C15  # odd, so invertible modulo 2**64
_BASE_INV = pow(_BASE, -1, 1 << 64)
_powers: dict[int, np.ndarray] = {}


def check_options(n: int, keep: str) -> None:
    """One-line errors for ``--dedup-substrings`` / ``--substrings-keep``."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError(f"--dedup-substrings must be an integer >= 0 (0: off), got {n!r}")
    if keep not in KEEP_MODES:
        raise ConfigError(f"--substrings-keep must be one of {', '.join(KEEP_MODES)}, got {keep!r}")


def kgram_size(n: int) -> int:
    """k = ⌈N/3⌉, so windows of w = N − k + 1 k-grams: about 2/(w + 1) marked positions per
    byte (the fingerprint shuffle) while a k-gram of a third of a window rarely repeats by
    chance (few candidates). Any k ≤ N is exact; this one was chosen by measurement
    (``benchmarks/RESULTS.md`` §23, 100k pages at N = 100: k = 34 took 5 % less CPU than
    k = 50, the fingerprint shuffle 23 % fewer bytes, the same output; on 1,000 real C4
    documents the candidate windows rose from 1.4 % to 2.5 % of the bytes)."""
    return (n + 2) // 3


# --- hashing: numpy, one vector pass per document ------------------------------------------


def _power_table(length: int, base: int) -> np.ndarray:
    """``base**i mod 2**64`` for i < length (cached per process, grown as needed)."""
    have = _powers.get(base)
    if have is None or len(have) < length:
        size = max(length, 2 * len(have) if have is not None else 4096)
        table = np.full(size, base, dtype=_U64)
        table[0] = 1
        with np.errstate(over="ignore"):
            have = np.cumprod(table, dtype=_U64)
        _powers[base] = have
    return have[:length]


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: the polynomial hash's bits spread evenly (winnowing's minima)."""
    with np.errstate(over="ignore"):
        z = z ^ (z >> _U64(30))
        z = z * _U64(0xBF58476D1CE4E5B9)
        z = z ^ (z >> _U64(27))
        z = z * _U64(0x94D049BB133111EB)
        return z ^ (z >> _U64(31))


def kgram_hashes(data: np.ndarray, k: int) -> np.ndarray:
    """64-bit hash of every k-gram of ``data`` (uint8): a polynomial hash modulo 2**64 from
    prefix sums (B odd, so B**-i exists), mixed. Equal k-grams give equal hashes, wherever
    they are; that is all exactness needs (collisions only add candidates)."""
    n = len(data)
    m = n - k + 1
    if m <= 0:
        return np.zeros(0, dtype=_U64)
    with np.errstate(over="ignore"):
        x = (data.astype(_U64) + _U64(1)) * _power_table(n, _BASE)
        prefix = np.zeros(n + 1, dtype=_U64)
        np.cumsum(x, out=prefix[1:])
        h = (prefix[k:] - prefix[:m]) * _power_table(m, _BASE_INV)
    return _mix(h)


def _sliding(a: np.ndarray, w: int, fn: Any, fill: Any) -> np.ndarray:
    """``fn`` (``np.minimum``/``np.maximum``) of every window of ``w`` (van Herk/Gil-Werman:
    prefix and suffix scans per block of ``w``, O(len) whatever ``w``)."""
    m = len(a)
    if w == 1:
        return a.copy()
    pad = (-m) % w
    blocks = np.concatenate([a, np.full(pad, fill, dtype=a.dtype)]).reshape(-1, w)
    pre = fn.accumulate(blocks, axis=1).ravel()
    suf = fn.accumulate(blocks[:, ::-1], axis=1)[:, ::-1].ravel()
    return fn(suf[: m - w + 1], pre[w - 1 : m])


def winnow(data: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(k-gram hashes, window minima)`` of a document's bytes: one minimum per N-byte
    window (``len(data) - n + 1`` of them); ``None`` for a document shorter than N."""
    if len(data) < n:
        return None
    k = kgram_size(n)
    h = kgram_hashes(data, k)
    return h, _sliding(h, n - k + 1, np.minimum, _MAX)


def marked_hashes(h: np.ndarray, minima: np.ndarray, w: int) -> np.ndarray:
    """The hashes at marked positions (equal to the minimum of a window that contains them),
    one entry per position."""
    zeros = np.zeros(w - 1, dtype=_U64)
    covering = _sliding(np.concatenate([zeros, minima, zeros]), w, np.maximum, 0)
    return h[covering == h]


def _rows(table: np.ndarray, size: int) -> list[bytes]:
    """``table``'s bytes cut every ``size`` bytes: one packed row per item, made per document
    in one numpy step instead of a ``struct.pack`` per item."""
    raw = table.tobytes()
    return [raw[i : i + size] for i in range(0, len(raw), size)]


def _u4_rows(length: int, *columns: Any) -> list[bytes]:
    """``length`` rows of big-endian uint32 columns (an int column repeats on every row):
    the bytes ``struct.pack(">I…", *row)`` gives, for a whole document at once."""
    table = np.empty((length, len(columns)), dtype=">u4")
    for j, column in enumerate(columns):
        table[:, j] = column
    return _rows(table, 4 * len(columns))


def _bytes_of(text: str) -> tuple[bytes, np.ndarray]:
    raw = text.encode("utf-8")
    return raw, np.frombuffer(raw, dtype=np.uint8)


def _url_md5(url: str) -> bytes:
    return hashlib.md5(url.encode("utf-8")).digest()  # byte order = hex order


# --- pass 1: winnowing fingerprints → candidates, in columnar batches -----------------------
#
# A document marks about 2/(w + 1) of its positions: tens of millions of (document, hash)
# pairs at 1M pages of the scale corpus, almost all of them the only mark of their hash. One
# item per marked hash cost more in pickling, bucketing and grouping than the decisions did, so
# the marks travel in batches: a chunk pass buffers its documents' ``FP_ROW``s, and every
# ``FP_FLUSH_ROWS`` rows yields one packed batch per *bucket* (the top ``FP_BUCKET_BITS`` bits
# of the hash: the shuffle key). A bucket's group sums each hash's marks over its batches, and
# sends the candidates back to their chunk as packed ``MARK_ROW`` batches, already routed.
# Memory: a flush buffer (``FP_FLUSH_ROWS`` × 20 bytes) per chunk pass; per group, one batch
# and the bucket's distinct hashes (its share 2**-FP_BUCKET_BITS of the corpus's: ≈ 3,000 at
# 1M pages, ≈ 500,000 (8 MB) for C4), however often one hash is marked.

FP_ROW = np.dtype([("hash", "<u8"), ("chunk", "<u4"), ("record", "<u4"), ("count", "<u4")])
MARK_ROW = np.dtype([("record", "<u4"), ("hot", "<u4"), ("hash", "<u8")])  # a candidate mark
FP_BUCKET_BITS = 14  # 16,384 buckets: the fingerprint shuffle's keys
FP_FLUSH_ROWS = 1 << 19  # rows a chunk pass buffers before it yields its batches (10 MB)
_COMPACT_ROWS = 1 << 20  # a group sums its hashes' marks again past this many held


def _fp_rows(loc: tuple, doc: Doc, n: int) -> np.ndarray | None:
    """The document's ``FP_ROW``s: one per distinct marked hash, with its count."""
    _raw, data = _bytes_of(doc.text)
    won = winnow(data, n)
    if won is None:
        return None
    h, minima = won
    values, counts = np.unique(marked_hashes(h, minima, n - kgram_size(n) + 1), return_counts=True)
    rows = np.empty(len(values), dtype=FP_ROW)
    rows["hash"] = values
    rows["chunk"], rows["record"] = loc
    rows["count"] = counts
    return rows


def _equal_runs(keys: np.ndarray) -> tuple[list[int], list[int]]:
    """``(lows, highs)``: the ``[lo, hi)`` bounds of each run of equal consecutive keys."""
    cuts = (np.flatnonzero(keys[1:] != keys[:-1]) + 1).tolist()
    return [0, *cuts], [*cuts, len(keys)]


def _fp_batches(tables: list[np.ndarray], bits: int) -> Iterator[tuple[int, bytes]]:
    """Buffered rows (``tables``, emptied) → ``(bucket, packed rows)`` per bucket they fall
    in, one bucket's bytes copied at a time (a flush's transient memory: about three times
    its rows)."""
    rows = np.concatenate(tables)
    tables.clear()
    bucket = rows["hash"] >> _U64(64 - bits)
    order = np.argsort(bucket, kind="stable")
    rows, bucket = rows[order], bucket[order]
    for lo, hi in zip(*_equal_runs(bucket), strict=True):
        yield int(bucket[lo]), rows[lo:hi].tobytes()


def emit_fingerprint_batches(
    docs: Iterable[tuple[tuple, Doc]],
    count: Count,
    *,
    n: int,
    bits: int = FP_BUCKET_BITS,
    flush: int = FP_FLUSH_ROWS,
) -> Iterator[tuple[int, bytes]]:
    """A chunk's ``(loc, doc)`` stream → ``(bucket, packed FP_ROWs)`` batches, one per bucket
    per ``flush`` rows buffered."""
    pending: list[np.ndarray] = []
    held = 0
    for loc, doc in docs:
        rows = _fp_rows(loc, doc, n)
        if rows is None or not len(rows):
            continue
        pending.append(rows)
        held += len(rows)
        if held >= flush:
            yield from _fp_batches(pending, bits)
            held = 0
    if pending:
        yield from _fp_batches(pending, bits)


def emit_fingerprints(loc: tuple, doc: Doc, count: Count, *, n: int) -> Iterator[tuple]:
    """``emit_fingerprint_batches`` of one document."""
    return emit_fingerprint_batches([(loc, doc)], count, n=n)


def _summed(hashes: list[np.ndarray], counts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Distinct hashes (sorted) and their summed counts."""
    values, inverse = np.unique(np.concatenate(hashes), return_inverse=True)
    totals = np.bincount(inverse, weights=np.concatenate(counts), minlength=len(values))
    return values, totals.astype(np.int64)


def decide_fingerprints(
    key: int, batches: Iterable[bytes], count: Count, *, hot: int = HOT
) -> Iterator[tuple[int, bytes]]:
    """One bucket's batches → ``(chunk, packed MARK_ROWs)``: each hash marked at ≥ 2
    positions corpus-wide is a candidate, marked back to each of its documents, *hot* when
    marked more than ``hot`` times (its windows take the per-window path of pass 2, streamed,
    so no worker holds a hot anchor's windows). Reads the grouped batches twice (re-iterable
    on every engine): first the marks summed per hash, then the candidates' rows."""
    hashes: list[np.ndarray] = []
    counts: list[np.ndarray] = []
    held = 0
    for batch in batches:
        rows = np.frombuffer(batch, dtype=FP_ROW)
        hashes.append(rows["hash"].copy())
        counts.append(rows["count"].astype(np.int64))
        held += len(rows)
        if held > _COMPACT_ROWS:  # a hash marked in many batches is held once
            values, totals = _summed(hashes, counts)
            hashes, counts, held = [values], [totals], len(values)
    if not hashes:
        return
    values, totals = _summed(hashes, counts)
    chosen = totals >= 2
    if not chosen.any():  # the usual case on a crawl: one document marks a hash once
        return
    candidates, is_hot = values[chosen], totals[chosen] > hot
    count(STAGE, "candidate_fingerprints", len(candidates))
    for batch in batches:
        rows = np.frombuffer(batch, dtype=FP_ROW)
        at = np.minimum(np.searchsorted(candidates, rows["hash"]), len(candidates) - 1)
        found = candidates[at] == rows["hash"]
        if not found.any():
            continue
        rows, at = rows[found], at[found]
        marks = np.empty(len(rows), dtype=MARK_ROW)
        marks["record"], marks["hot"], marks["hash"] = rows["record"], is_hot[at], rows["hash"]
        chunks = rows["chunk"]
        if (chunks == chunks[0]).all():  # a batch comes from one chunk pass
            yield int(chunks[0]), marks.tobytes()
            continue
        for chunk in np.unique(chunks).tolist():
            yield chunk, marks[chunks == chunk].tobytes()


def mark_lookup(batches: Iterable[bytes]) -> Any:
    """A chunk's candidate mark batches (a list is emptied: its bytes are copied once) →
    ``of(record, default)``: the record's ``MARK_ROW``s (a slice of the chunk's, sorted by
    record). Each record's slice is indexed once: a search per document in the strided
    record column copied the whole column every time (measured: 630 CPU-s more at 1M pages,
    1.25 million marks per chunk)."""
    joined = b"".join(batches)
    if isinstance(batches, list):  # as ``RouteCodec.lookup`` sorts its list in place
        batches.clear()
    marks = np.frombuffer(joined, dtype=MARK_ROW)
    marks = marks[np.argsort(marks["record"], kind="stable")]
    del joined
    where: dict[int, tuple[int, int]] = {}
    if len(marks):
        records = np.ascontiguousarray(marks["record"])
        lows, highs = _equal_runs(records)
        where = dict(zip(records[lows].tolist(), zip(lows, highs), strict=True))

    def of(record: int, default: Any = ()) -> Any:
        span = where.get(record)
        return default if span is None else marks[span[0] : span[1]]

    return of


def mark_candidates(loc: tuple, doc: Doc, marks: Any, count: Count) -> Iterator[Doc]:
    """The candidate marks ride on the document to the next stage's ``emit`` (same pass; the
    chunk's scratch file does not keep them), as ``(candidate hashes, hot hashes)``, sorted."""
    if not len(marks):
        yield doc
        return
    hashes = marks["hash"]
    yield doc._replace(marks=(np.unique(hashes), np.unique(hashes[marks["hot"] != 0])))


# --- pass 2: candidate windows → repeated windows → struck ranges ---------------------------
#
# Keys: a window's anchor is the leftmost position of its minimum k-gram hash. Windows whose
# anchor hash is a (not hot) candidate travel per anchor occurrence, ``A`` + the hash as key
# and the bytes spanned by every window anchored there in one value (≈ w/2 windows per item,
# so the shuffle has that many times fewer items); equal windows have equal anchor hashes and
# equal offsets from their anchors, so one anchor's group compares them all. A hot anchor's windows
# travel one per key (their blake2b-128 digest), a group streamed without a copy.

_ANCHOR = struct.Struct(">IIII")  # chunk, record, anchor position, first window's start
_OFFSET = np.dtype(">u4")  # a decision: ranges [lo, hi) of struck windows' starts, packed in pairs
_PAIR = struct.Struct(">II")  # one range of ``_OFFSET``s, packed as numpy packs them
_MD5 = 16  # bytes of md5(url), the owner prefix of a place with keep=first
# A group of at most this many places (not all copies) is decided pair by pair on its bytes
# (``_decide_pairs``), a larger one as classes of its sorted contexts (``_decide_classes``):
# both exact. Measured on the 143,313 groups of 100k pages of the scale corpus: 4–6 places
# 19 µs pair by pair against 52 µs as classes, 7–12 places 60 against 56.
PAIRWISE = 8


def anchor_positions(
    h: np.ndarray, minima: np.ndarray, starts: np.ndarray, values: np.ndarray | None = None
) -> np.ndarray:
    """The anchor of each window in ``starts``: the first position ≥ its start whose hash is
    its minimum. ``values``: sorted hashes that include every such minimum (default: those
    minima); only positions holding one of them are sorted, as ``rank(hash) · (n + 1) +
    position``, and searched."""
    n = len(h)
    if values is None:
        values = np.unique(minima[starts])
    rank = np.searchsorted(values, h)
    pos = np.flatnonzero(values[np.minimum(rank, len(values) - 1)] == h)
    combined = np.sort(rank[pos].astype(np.int64) * (n + 1) + pos)
    wanted = np.searchsorted(values, minima[starts]).astype(np.int64) * (n + 1) + starts
    return combined[np.searchsorted(combined, wanted)] % (n + 1)


def _candidate_starts(
    minima: np.ndarray, marks: tuple[np.ndarray, np.ndarray]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(grouped starts, hot starts, sorted candidate hashes)``: the windows whose minimum is
    a candidate (not hot / hot), found by one search among the marks per run of equal minima
    (consecutive windows mostly share their minimum: a run is about w/2 windows long)."""
    values, hot = marks
    firsts = np.flatnonzero(np.concatenate([[True], minima[1:] != minima[:-1]]))
    lengths = np.diff(np.append(firsts, len(minima)))
    run_minima = minima[firsts]
    at = np.minimum(np.searchsorted(values, run_minima), len(values) - 1)
    found = values[at] == run_minima
    if not len(hot):
        return np.flatnonzero(np.repeat(found, lengths)), np.zeros(0, dtype=np.int64), values
    is_hot = found & np.isin(values, hot)[at]
    return (
        np.flatnonzero(np.repeat(found & ~is_hot, lengths)),
        np.flatnonzero(np.repeat(is_hot, lengths)),
        values,
    )


def emit_windows(loc: tuple, doc: Doc, count: Count, *, n: int, keep: str) -> Iterator[tuple]:
    """The document's candidate windows (every occurrence of a repeated window is one): per
    anchor of a candidate hash ``(b"A" + hash, owner + chunk, record, anchor, first start +
    the bytes from the first window's start to the last one's end)``; per window of a hot
    hash ``(digest, owner + chunk, record, start)``. ``owner``: md5(url) with ``first``, else
    empty. Packed bytes, not tuples: this is the stage's largest shuffle, and bytes pickle
    several times faster."""
    if doc.marks is None:
        return
    raw, data = _bytes_of(doc.text)
    won = winnow(data, n)
    if won is None:
        return
    h, minima = won
    grouped, hot, values = _candidate_starts(minima, doc.marks)
    single = hot.tolist()
    if not len(grouped) and not single:
        return
    count(STAGE, "candidate_windows", len(grouped) + len(single))
    owner = _url_md5(doc.url) if keep == "first" else b""
    chunk, record = loc
    view = memoryview(raw)
    blake = hashlib.blake2b
    for s in single:
        key = blake(view[s : s + n], digest_size=DIGEST_BYTES).digest()
        yield key, owner + _PLACE.pack(chunk, record, s)
    if not len(grouped):
        return
    anchors = anchor_positions(h, minima, grouped, values)
    cuts = np.concatenate([[0], np.flatnonzero(np.diff(anchors)) + 1, [len(grouped)]])
    lows = cuts[:-1]
    heads = _u4_rows(len(lows), chunk, record, anchors[lows], grouped[lows])  # _ANCHOR
    keys = _rows(h[anchors[lows]].astype(">u8"), 8)
    firsts = grouped[lows].tolist()
    ends = (grouped[cuts[1:] - 1] + n).tolist()  # an anchor's windows are consecutive starts
    for key, head, lo, hi in zip(keys, heads, firsts, ends, strict=True):
        yield b"A" + key, owner + head + raw[lo:hi]


def decide_window(
    key: bytes, places: Iterable[bytes], count: Count, *, n: int, keep: str
) -> Iterator:
    """One key's occurrences → ``(loc, struck start ranges)`` per document with struck
    windows: all occurrences of a repeated window (``none``) or all but the smallest
    ``(md5(url), loc, offset)`` (``first``; packed places compare in that order)."""
    if len(key) == DIGEST_BYTES:
        yield from _decide_single(places, count, keep)
    else:
        yield from _decide_anchor(places, count, n, keep)


def _decide_single(places: Iterable[bytes], count: Count, keep: str) -> Iterator:
    it = iter(places)
    if next(it, None) is None or next(it, None) is None:
        return
    count(STAGE, "repeated_windows")
    owner = min(places) if keep == "first" else None
    skip = _MD5 if keep == "first" else 0
    for place in places:
        if place != owner:
            chunk, record, offset = _PLACE.unpack_from(place, skip)
            yield (chunk, record), _PAIR.pack(offset, offset + 1)


def _decide_anchor(places: Iterable[bytes], count: Count, n: int, keep: str) -> Iterator:
    """All windows anchored at one (not hot) hash: copies of one stretch at once, a few places
    pair by pair (``_decide_pairs``), else as classes of equal windows per distance to the
    anchor (``_decide_classes``): a class of ≥ 2 windows is a repeated window, all of it
    struck (``none``) or all but its first in ``(md5(url), chunk, record)`` order
    (``first``). At most ``HOT`` occurrences of at most w windows each: the memory bound of a
    group (``_decide_classes`` holds a few ``w × places`` arrays). Vectorised per group, not
    per window: a group holds ≈ w/2 windows per place."""
    skip = _MD5 if keep == "first" else 0
    places = list(places)
    heads = [_ANCHOR.unpack_from(place, skip) for place in places]  # chunk, record, p, first
    bodies = [place[skip + _ANCHOR.size :] for place in places]
    if _copies(heads, bodies):
        yield from _decide_copies(places, heads, len(bodies[0]) - n + 1, count, skip)
        return
    if len(places) <= PAIRWISE:
        yield from _decide_pairs(places, heads, bodies, count, n, skip)
        return
    yield from _decide_classes(places, heads, bodies, count, n, skip)


def _class_ids(strings: list[bytes], needs: np.ndarray) -> np.ndarray:
    """``ids[t, i]``: equal for two strings exactly when they share their first ``needs[t]``
    bytes (both at least that long: a shorter string is alone in its class), as a
    ``(len(needs), len(strings))`` array. In byte order such strings are consecutive, each
    sharing ≥ ``needs[t]`` bytes with the one before it: a class is a run without a break."""
    order = sorted(range(len(strings)), key=strings.__getitem__)
    ranked = [strings[i] for i in order]
    lengths = np.fromiter(map(len, ranked), dtype=np.int64, count=len(ranked))
    width = int(lengths.max(initial=0))
    shared = np.zeros(len(ranked), dtype=np.int64)  # bytes shared with the one before, capped
    if width and len(ranked) > 1:  # by its own length (a short string breaks its run)
        grid = np.zeros((len(ranked), width), dtype=np.uint8)
        grid[np.arange(width) < lengths[:, None]] = np.frombuffer(b"".join(ranked), np.uint8)
        differ = grid[1:] != grid[:-1]
        first = np.where(differ.any(axis=1), differ.argmax(axis=1), width)
        shared[1:] = np.minimum(first, np.minimum(lengths[1:], lengths[:-1]))
    breaks = np.minimum(shared, lengths)[None, :] < needs[:, None]
    ids = np.empty(breaks.shape, dtype=np.int64)
    ids[:, order] = np.cumsum(breaks, axis=1)
    return ids


def _decide_classes(
    places: list[bytes], heads: list[tuple], bodies: list[bytes], count: Count, n: int, skip: int
) -> Iterator:
    """A group decided on its bytes as classes of equal windows, without hashing. Every window
    contains its anchor, so a place's window at distance d from it is the d bytes before the
    anchor and the N − d bytes from it: two places' windows at d are equal exactly when their
    *left* contexts (the bytes before the anchor, read backwards) share d bytes and their
    *right* ones (from the anchor) share N − d. Sorting each context once gives, for every d,
    each place's class of left and of right contexts (``_class_ids``); a window's class is the
    pair, and a class of ≥ 2 places at one d is a repeated window: all of it struck
    (``none``) or all but its first in ``(md5(url), chunk, record)`` order (``first``: the
    places are put in that order, and each distance's classes sorted stably). A place
    without a window at d has a context shorter than it needs there: alone in its class."""
    g = len(places)
    if skip:
        ranked = sorted(range(g), key=lambda i: (places[i][:skip], heads[i][:2]))
        heads, bodies = [heads[i] for i in ranked], [bodies[i] for i in ranked]
    at = [head[2] - head[3] for head in heads]  # the anchor's index in each span
    sizes = np.fromiter(map(len, bodies), dtype=np.int64, count=g)
    anchors = np.array(at, dtype=np.int64)
    d_lo, d_hi = int((anchors - (sizes - n)).min()), int(anchors.max())
    distances = np.arange(d_lo, d_hi + 1, dtype=np.int64)
    left = _class_ids([body[:a][::-1] for body, a in zip(bodies, at, strict=True)], distances)
    right = _class_ids([body[a:] for body, a in zip(bodies, at, strict=True)], n - distances)
    pairs = left * (g + 1) + right  # (distance, place) → its window's class at that distance
    order = np.argsort(pairs, axis=1, kind="stable")
    ranked_pairs = np.take_along_axis(pairs, order, axis=1)
    same = ranked_pairs[:, 1:] == ranked_pairs[:, :-1]
    hit = np.zeros(pairs.shape, dtype=bool)
    hit[:, 1:] = same
    hit[:, :-1] |= same
    repeated = int(np.count_nonzero(hit[:, 1:] & ~same) + np.count_nonzero(hit[:, 0]))
    if not repeated:
        return
    count(STAGE, "repeated_windows", repeated)
    if skip:  # the first of each class keeps its window
        hit[:, 1:] &= same
        hit[:, 0] = False
    row, column = np.nonzero(hit)
    which = order[row, column]
    starts = np.array([head[2] for head in heads], dtype=np.int64)[which] - distances[row]
    by_place = np.lexsort((starts, which))
    yield from _ranges_by_place(heads, which[by_place], starts[by_place])


def _ranges_by_place(heads: list[tuple], which: np.ndarray, starts: np.ndarray) -> Iterator:
    """Struck window starts, place by place (each place's ascending) → ``(loc, packed
    ranges)`` per place: runs of consecutive starts become one range (a copy's windows are
    one run)."""
    if not len(starts):
        return
    brk = np.ones(len(starts), dtype=bool)
    brk[1:] = (which[1:] != which[:-1]) | (starts[1:] != starts[:-1] + 1)
    firsts_at = np.flatnonzero(brk)
    lasts_at = np.concatenate([firsts_at[1:] - 1, [len(starts) - 1]])
    ranges = np.empty((len(firsts_at), 2), dtype=_OFFSET)
    ranges[:, 0] = starts[firsts_at]
    ranges[:, 1] = starts[lasts_at] + 1
    owner_of = which[firsts_at]
    cuts = np.flatnonzero(owner_of[1:] != owner_of[:-1]) + 1
    data = ranges.tobytes()
    pair = 2 * _OFFSET.itemsize
    bounds = [0, *(cuts * pair).tolist(), len(data)]
    owners = owner_of[np.concatenate([[0], cuts])].tolist()
    for i, lo, hi in zip(owners, bounds[:-1], bounds[1:], strict=True):
        yield heads[i][:2], data[lo:hi]


def _decide_pairs(
    places: list[bytes], heads: list[tuple], bodies: list[bytes], count: Count, n: int, skip: int
) -> Iterator:
    """A small group decided on its bytes, pair by pair. Every window contains its anchor, so
    two places' windows at one distance d from the anchor are equal iff the window lies in
    the run of equal bytes around the anchor when the two spans are aligned there: the L
    bytes before it and the R bytes from it (d ≤ L and d ≥ N − R). A place's window at d is
    struck when it equals another place's there (``none``), or one ranked before it
    (``first``: equality is transitive, so the owner of its window is such a place); a
    repeated window is counted once, at the first place of its class. Distances are < w, so
    each place's sets of distances are bit masks. For a few places cheaper than the classes
    (``PAIRWISE``)."""
    g = len(places)
    # the anchor's index in each span = the distance of its first window (the largest);
    # ``low``: the distance of its last window (the smallest)
    at = [head[2] - head[3] for head in heads]
    low = [a - (len(body) - n) for a, body in zip(at, bodies, strict=True)]
    if skip:  # ``first``: the rank of each place, (md5(url), chunk, record) then arrival
        order = sorted(range(g), key=lambda i: (places[i][:skip], heads[i][:2]))
        rank = [0] * g
        for r, i in enumerate(order):
            rank[i] = r
    struck = [0] * g
    above = [0] * g  # distances where a place equals one after it
    below = [0] * g  # … one before it
    for i in range(g):
        for j in range(i + 1, g):
            lo, hi = max(low[i], low[j], 0), min(at[i], at[j])
            if lo > hi:
                continue
            a, b, ai, aj = bodies[i], bodies[j], at[i], at[j]
            right = _common_prefix(a[ai : ai + n - lo], b[aj : aj + n - lo])
            lo = max(lo, n - right)
            if lo > hi:
                continue
            hi = min(hi, _common_prefix(a[ai - hi : ai][::-1], b[aj - hi : aj][::-1]))
            if lo > hi:
                continue
            mask = ((1 << (hi - lo + 1)) - 1) << lo
            above[i] |= mask
            below[j] |= mask
            if not skip:
                struck[i] |= mask
                struck[j] |= mask
            else:
                struck[j if rank[i] < rank[j] else i] |= mask
    repeated = sum((above[i] & ~below[i]).bit_count() for i in range(g))
    if not repeated:
        return
    count(STAGE, "repeated_windows", repeated)
    for i, mask in enumerate(struck):
        if mask:
            yield (
                heads[i][:2],
                b"".join(
                    _PAIR.pack(heads[i][2] - d_hi, heads[i][2] - d_lo + 1)
                    for d_lo, d_hi in _bit_runs(mask)
                ),
            )


def _common_prefix(a: bytes, b: bytes) -> int:
    """How many leading bytes ``a`` and ``b`` share (a binary search of slice comparisons:
    each a C ``memcmp``, about log₂ of the length of them)."""
    m = min(len(a), len(b))
    if a[:m] == b[:m]:
        return m
    lo, hi = 0, m  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def _bit_runs(mask: int) -> Iterator[tuple[int, int]]:
    """The runs of set bits of ``mask``, as ``(first, last)`` bit positions, lowest first."""
    while mask:
        first = (mask & -mask).bit_length() - 1
        rest = mask >> first
        length = ((rest ^ (rest + 1)) >> 1).bit_length()
        yield first, first + length - 1
        mask &= ~(((1 << length) - 1) << first)


def _copies(heads: list[tuple], bodies: list[bytes]) -> bool:
    """Whether the group is ≥ 2 copies of one anchored stretch (the same distance from the
    first window to the anchor, the same bytes): about a quarter of the groups on repeated
    text, decided without comparing windows."""
    if len(heads) < 2:
        return False
    gap = heads[0][2] - heads[0][3]
    return all(h[2] - h[3] == gap for h in heads) and bodies.count(bodies[0]) == len(bodies)


def _decide_copies(
    places: list[bytes], heads: list[tuple], windows: int, count: Count, skip: int
) -> Iterator:
    """Every window of a copy is repeated: all struck (``none``), or all but those of the copy
    of smallest ``(md5(url), chunk, record, start)`` (``first``: the same copy owns every
    window, their starts being ``first + j`` in every copy)."""
    count(STAGE, "repeated_windows", windows)
    owner = (
        min(range(len(places)), key=lambda i: (places[i][:skip], heads[i][:2], heads[i][3]))
        if skip
        else -1
    )
    for i, head in enumerate(heads):
        if i != owner:
            yield head[:2], _PAIR.pack(head[3], head[3] + windows)


def strike(text: str, ranges: np.ndarray, n: int) -> tuple[str | None, int]:
    """The document after striking ``[s, s + n)`` (bytes) for each window start ``s`` in the
    ranges ``[lo, hi)`` of ``ranges`` (an ``(r, 2)`` array), by the module's character and
    line rules; ``(None, …)`` when no line is left. Also returns the bytes struck (of the
    removed characters, after widening; line breaks never count)."""
    raw, data = _bytes_of(text)
    ranges = np.asarray(ranges, dtype=np.int64).reshape(-1, 2)  # overlaps add up in ``diff``
    size = len(raw) + 1
    diff = np.bincount(ranges[:, 0], minlength=size) - np.bincount(
        np.minimum(ranges[:, 1] - 1 + n, len(raw)), minlength=size
    )
    struck = np.cumsum(diff[:-1]) > 0
    char_of = np.cumsum((data & 0xC0) != 0x80) - 1  # the character of each byte
    removed = np.zeros(len(text), dtype=bool)
    removed[char_of[struck]] = True
    removed[char_of[data == 0x0A]] = False  # a line break is never removed
    struck_bytes = int(np.count_nonzero(removed[char_of]))
    if not struck_bytes:
        return text, 0
    # The kept characters in one vector step (code points as UTF-32), then per line: a line
    # that lost a character (its line breaks are all kept, so the lines stay aligned) is
    # stripped and dropped when left empty.
    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    breaks = codes == 0x0A
    touched = np.zeros(int(np.count_nonzero(breaks)) + 1, dtype=bool)
    touched[(np.cumsum(breaks) - breaks)[removed]] = True
    kept = codes[~removed].tobytes().decode("utf-32-le").split("\n")
    lines = [
        line.strip() if hit else line for line, hit in zip(kept, touched.tolist(), strict=True)
    ]
    lines = [line for line, hit in zip(lines, touched.tolist(), strict=True) if line or not hit]
    return ("\n".join(lines) if any(lines) else None), struck_bytes


def apply_strikes(
    loc: tuple, doc: Doc, decisions: Iterable[bytes], count: Count, *, n: int
) -> Iterator[Doc]:
    """The document with its struck windows removed (``decisions``: packed start ranges)."""
    found = b"".join(decisions)
    doc = doc._replace(marks=None)
    text, struck_bytes = (
        strike(doc.text, np.frombuffer(found, dtype=_OFFSET).reshape(-1, 2), n)
        if found
        else (doc.text, 0)
    )
    if not struck_bytes:
        count(STAGE, "passed")
        yield doc
        return
    count(STAGE, "bytes_struck", struck_bytes)
    if text is None:
        count(STAGE, "empty")
        ds.sample(count, STAGE, "empty", doc.text, doc.url)
        return
    count(STAGE, "trimmed")
    yield doc._replace(text=text)


# --- strikes routed back packed (``RouteCodec``): bytes per decision ----------------------


def pack_strikes(record: int, ranges: bytes) -> bytes:
    """``(record, packed start ranges)`` → the record's 4 big-endian bytes, then the ranges."""
    return record.to_bytes(4, "big") + ranges


def unpack_strikes(value: bytes) -> tuple[int, bytes]:
    return int.from_bytes(value[:4], "big"), value[4:]


# --- the plan's stages ----------------------------------------------------------------------


def stages(n: int, keep: str, hot: int = HOT) -> tuple[Any, Any]:
    """The winnowing pass (counts under ``substrings``, no funnel row) and the strike pass,
    each a ``JoinStage``: ``emit`` per document, one group per key, ``apply`` per document."""
    from c4forge.corpus.stages import BatchCodec, JoinStage, RouteCodec

    return (
        JoinStage(
            FP_STAGE,
            functools.partial(emit_fingerprints, n=n),
            functools.partial(decide_fingerprints, hot=hot),
            mark_candidates,
            f"bucket of 64-bit winnowing fingerprints (top {FP_BUCKET_BITS} bits), in batches",
            codec=BatchCodec(mark_lookup),
            keeps_documents=True,  # candidate marks ride on the document, never written
            emit_chunk=functools.partial(emit_fingerprint_batches, n=n),
        ),
        JoinStage(
            STAGE,
            functools.partial(emit_windows, n=n, keep=keep),
            functools.partial(decide_window, n=n, keep=keep),
            functools.partial(apply_strikes, n=n),
            f"64-bit anchor fingerprint, or blake2b-128 of a {n}-byte window",
            flow=FLOW,
            codec=RouteCodec(pack_strikes, unpack_strikes),
        ),
    )


def stage(job: StageJob) -> tuple[Any, ...]:
    """``--dedup-substrings N`` (> 0): after every other filter, before the split."""
    n = job.dedup_substrings or 0
    if n <= 0:
        return ()
    return stages(n, job.substrings_keep)
