"""Lookup tables for the fast langdetect port, built once per process from langdetect's own data.

Everything here is derived from the installed ``langdetect`` package (its profile JSON files, its
``NGram`` constants, its Unicode block table), so the fast detector can never drift from the
library it reproduces.  Building takes ~1 s and ~45 MB (the profile matrix is 87,598 x 55
float64); it is cached per process.
"""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass

import numpy as np
from langdetect.detector_factory import PROFILES_DIRECTORY
from langdetect.utils import unicode_block as ub
from langdetect.utils.ngram import NGram

#: One past the largest code point; tables indexed by code point have this many entries.
N_CODEPOINTS = 0x110000
#: Bits per character in an n-gram key (code point + 1 < 2**21, so 3 characters fit in 63 bits).
CHAR_BITS = 21


@dataclass(frozen=True)
class Profiles:
    """langdetect's profiles as arrays: ``table[row]`` is ``word_lang_prob_map[word]``."""

    langlist: tuple[str, ...]
    table: np.ndarray  # float64 [n_words, n_langs]
    keys: np.ndarray  # uint64 [n_words], gram_key() of each row's word


def gram_key(word: str) -> int:
    """Integer key of a 1-3 character n-gram; must match the kernel's packing."""
    key = 0
    for ch in word:
        key = (key << CHAR_BITS) | (ord(ch) + 1)
    return key


def load_profiles(directory: str = PROFILES_DIRECTORY) -> Profiles:
    """Read the profile files exactly as ``DetectorFactory.load_profile`` does.

    Same file order (``os.listdir``, skipping dot files and non-files), same language index per
    file, same ``1.0 * freq / n_words[len - 1]`` arithmetic, so every matrix cell is the float
    the stock detector multiplies by.  Words longer than 3 characters get an all-zero row in the
    stock map but can never be looked up (n-grams are 1-3 characters), so they are left out.
    """
    paths = [
        os.path.join(directory, n)
        for n in os.listdir(directory)
        if not n.startswith(".") and os.path.isfile(os.path.join(directory, n))
    ]
    langlist: list[str] = []
    row_of: dict[str, int] = {}
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    for index, path in enumerate(paths):
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        langlist.append(data["name"])
        n_words = data["n_words"]
        for word, freq in data["freq"].items():
            length = len(word)
            if 1 <= length <= 3:
                rows.append(row_of.setdefault(word, len(row_of)))
                cols.append(index)
                vals.append(1.0 * freq / n_words[length - 1])
    if len(set(langlist)) != len(langlist):
        raise ValueError("duplicate language profile")  # stock raises DuplicateLangError
    # stock rows have one slot per directory entry; only the first len(langlist) are ever read
    table = np.zeros((len(row_of), len(langlist)), dtype=np.float64)
    table[np.array(rows), np.array(cols)] = np.array(vals, dtype=np.float64)
    keys = np.array([gram_key(w) for w in row_of], dtype=np.uint64)
    return Profiles(tuple(langlist), table, keys)


def hash_bits(n_keys: int) -> int:
    """log2 of the open-addressing table size (load factor <= 0.5)."""
    return max(4, int(n_keys * 2 - 1).bit_length())


def normalization_table() -> np.ndarray:
    """``NGram.normalize`` for every code point, vectorised over langdetect's block table."""
    cp = np.arange(N_CODEPOINTS, dtype=np.uint32)
    block = np.zeros(N_CODEPOINTS, dtype=np.int32)  # 0 = no block: the char is kept
    for name, start, end in ub._unicode_blocks:
        block[start : end + 1] = name
    block[:0x80] = ub.UNICODE_BASIC_LATIN  # unicode_block's own fast path
    out = cp.copy()
    space = ord(" ")

    basic = block == ub.UNICODE_BASIC_LATIN
    letter = ((cp >= ord("A")) & (cp <= ord("Z"))) | ((cp >= ord("a")) & (cp <= ord("z")))
    out[basic & ~letter] = space
    for ch in NGram.LATIN1_EXCLUDED:
        if block[ord(ch)] == ub.UNICODE_LATIN_1_SUPPLEMENT:
            out[ord(ch)] = space
    out[0x0219] = 0x015F  # Romanian comma-below -> cedilla (Latin Extended-B)
    out[0x021B] = 0x0163
    out[block == ub.UNICODE_GENERAL_PUNCTUATION] = space
    out[0x06CC] = 0x064A  # Farsi yeh -> Arabic yeh
    out[(block == ub.UNICODE_LATIN_EXTENDED_ADDITIONAL) & (cp >= 0x1EA0)] = 0x1EC3
    out[block == ub.UNICODE_HIRAGANA] = 0x3042
    out[block == ub.UNICODE_KATAKANA] = 0x30A2
    out[(block == ub.UNICODE_BOPOMOFO) | (block == ub.UNICODE_BOPOMOFO_EXTENDED)] = 0x3105
    for ch, rep in NGram.CJK_MAP.items():
        if block[ord(ch)] == ub.UNICODE_CJK_UNIFIED_IDEOGRAPHS:
            out[ord(ch)] = ord(rep)
    out[block == ub.UNICODE_HANGUL_SYLLABLES] = 0xAC00
    return out


def isupper_table(limit: int = 0x10000) -> np.ndarray:
    """``chr(cp).isupper()`` (Python's own Unicode database) for code points below ``limit``.

    The full table is a 1.1M-iteration loop (~0.3-0.8 s); the BMP takes ~20 ms, so the caller
    fills supplementary-plane entries only when a text contains such characters (-1 = unknown).
    """
    table = np.full(N_CODEPOINTS, -1, dtype=np.int8)
    table[:limit] = np.fromiter((chr(i).isupper() for i in range(limit)), np.int8, count=limit)
    return table


def fill_isupper(table: np.ndarray, codepoints: np.ndarray) -> None:
    """Fill the unknown (-1) entries of ``table`` for ``codepoints``."""
    for cp in np.unique(codepoints[table[codepoints] < 0]).tolist():
        table[cp] = chr(cp).isupper()


def mt_words(
    seed: int, count: int, rng: random.Random | None = None
) -> tuple[np.ndarray, random.Random]:
    """The first ``count`` 32-bit outputs of ``random.Random(seed)`` (or continue ``rng``).

    ``getrandbits(32)`` returns exactly one raw MT19937 word, and every call langdetect makes
    (``random()``: 2 words, ``choice`` via ``getrandbits(k <= 32)``: 1 word per draw) is a pure
    function of that word stream, so the kernel can replay it from this array.
    """
    if rng is None:
        rng = random.Random(seed)
    words = np.fromiter((rng.getrandbits(32) for _ in range(count)), dtype=np.uint32, count=count)
    return words, rng


def gauss_alphas(words: np.ndarray, alpha: float, width: float) -> tuple[np.ndarray, np.ndarray]:
    """The two alphas ``alpha + random.gauss(0.0, 1.0) * width`` yields from MT word ``p`` on.

    ``gauss`` draws ``random()`` twice (two words each: ``(a >> 5) * 2**26 + (b >> 6)`` over
    ``2**53``) and returns ``cos`` now and caches ``sin`` for the next call; the same stdlib
    formula and ``math`` functions are used here, so the values are the interpreter's own.
    Entry ``p`` is NaN where fewer than 4 words follow ``p``.
    """
    w = words.tolist()
    n = len(w)
    first = np.full(n, np.nan)
    second = np.full(n, np.nan)
    twopi = 2.0 * math.pi
    rnd = [
        ((w[i] >> 5) * 67108864.0 + (w[i + 1] >> 6)) * (1.0 / 9007199254740992.0)
        for i in range(n - 1)
    ]
    cos, sin, log, sqrt = math.cos, math.sin, math.log, math.sqrt
    for p in range(n - 3):
        x2pi = rnd[p] * twopi
        g2rad = sqrt(-2.0 * log(1.0 - rnd[p + 2]))
        first[p] = alpha + (0.0 + cos(x2pi) * g2rad * 1.0) * width
        second[p] = alpha + (0.0 + sin(x2pi) * g2rad * 1.0) * width
    return first, second
