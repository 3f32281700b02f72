"""numba kernels for the fast langdetect port: n-gram extraction and one detection trial.

They replay langdetect 1.0.9's ``Detector`` step for step (see ``langdetect_fast`` for the
mapping); the float operations are the same IEEE operations in the same order (no fastmath, no
reassociation), so the probabilities come out bit-identical.  Importing this module requires
numba; ``langdetect_fast`` falls back to the stock detector when it is missing.
"""

from __future__ import annotations

import numba as nb
import numpy as np

_SPACE = 32
_LATIN_LO = 65  # 'A'
_LATIN_HI = 122  # 'z'
_NON_LATIN_FROM = 0x300
_CHAR_BITS = 21
_HASH_MULT = np.uint64(0x9E3779B97F4A7C15)

#: langdetect's Detector constants.
ITERATION_LIMIT = 1000
CONV_THRESHOLD = 0.99999


@nb.njit(cache=True, nogil=True)
def _lookup(key, hash_keys, hash_rows, shift, mask):
    slot = (key * _HASH_MULT) >> shift
    while True:
        k = hash_keys[slot]
        if k == key:
            return hash_rows[slot]
        if k == 0:
            return -1
        slot = (slot + np.uint64(1)) & mask


@nb.njit(cache=True, nogil=True)
def build_hash(keys, hash_bits):
    """Open-addressing table (linear probing) from n-gram key to profile row (0 = empty)."""
    size = 1 << hash_bits
    hash_keys = np.zeros(size, dtype=np.uint64)
    hash_rows = np.full(size, -1, dtype=np.int32)
    shift = np.uint64(64 - hash_bits)
    mask = np.uint64(size - 1)
    for row in range(keys.shape[0]):
        key = keys[row]
        slot = (key * _HASH_MULT) >> shift
        while hash_keys[slot] != 0:
            slot = (slot + np.uint64(1)) & mask
        hash_keys[slot] = key
        hash_rows[slot] = row
    return hash_keys, hash_rows


@nb.njit(cache=True, nogil=True)
def extract_rows(cps, norm, upper, hash_keys, hash_rows, hash_bits, out):
    """``Detector.cleaning_text`` + ``Detector._extract_ngrams``: profile rows of the n-grams.

    ``upper[c] > 0`` iff ``chr(c).isupper()`` (filled for every normalised char of ``cps``).
    ``cps`` is the appended text (URLs/e-mails removed, Vietnamese normalised, cut at 10,000
    characters, space runs collapsed) as code points; ``out`` needs room for ``3 * len(cps)``.
    Returns how many rows were written, in the stock order (so ``random.choice`` picks alike).
    """
    n = cps.shape[0]
    # cleaning_text: stock compares unicode_block(ch) (an int) with the string
    # 'Latin Extended Additional', which is never equal, so every char >= U+0300 that is not
    # in 'A'..'z' counts as non-Latin.  Reproduced as is.
    latin = 0
    non_latin = 0
    for i in range(n):
        c = cps[i]
        if _LATIN_LO <= c <= _LATIN_HI:
            latin += 1
        elif c >= _NON_LATIN_FROM:
            non_latin += 1
    drop_latin = latin * 2 < non_latin

    shift = np.uint64(64 - hash_bits)
    mask = np.uint64((1 << hash_bits) - 1)
    # NGram state: the last (up to 3) normalised chars g0 g1 g2 (g2 newest), length glen.
    g0 = np.uint64(0)
    g1 = np.uint64(0)
    g2 = np.uint64(_SPACE)
    glen = 1
    capital = False
    count = 0
    for i in range(n):
        raw = cps[i]
        if drop_latin and _LATIN_LO <= raw <= _LATIN_HI:
            continue
        ch = np.uint64(norm[raw])
        last = g2
        if last == _SPACE:
            g0 = np.uint64(0)
            g1 = np.uint64(0)
            glen = 1
            capital = False
            if ch == _SPACE:
                continue  # stock: add_char returns; the only n-gram would be ' ' (excluded)
        elif glen >= 3:
            glen = 2
        g0 = g1
        g1 = g2
        g2 = ch
        glen += 1
        if upper[ch] > 0:
            if upper[last] > 0:
                capital = True
        else:
            capital = False
        if capital:
            continue
        # n = 1 (never ' ': stock skips w == ' '), n = 2, n = 3 when the buffer is long enough
        if ch != _SPACE:
            row = _lookup(ch + np.uint64(1), hash_keys, hash_rows, shift, mask)
            if row >= 0:
                out[count] = row
                count += 1
        if glen >= 2:
            k2 = ((g1 + np.uint64(1)) << np.uint64(_CHAR_BITS)) | (ch + np.uint64(1))
            row = _lookup(k2, hash_keys, hash_rows, shift, mask)
            if row >= 0:
                out[count] = row
                count += 1
            if glen >= 3:
                k3 = ((g0 + np.uint64(1)) << np.uint64(2 * _CHAR_BITS)) | k2
                row = _lookup(k3, hash_keys, hash_rows, shift, mask)
                if row >= 0:
                    out[count] = row
                    count += 1
    return count


@nb.njit(cache=True, nogil=True)
def run_trial(prob, rows, n_rows, table, words, pos, weight, neumaier):
    """One trial of ``Detector._detect_block`` from MT word ``pos``; returns the next position.

    ``random.choice(ngrams)`` is ``_randbelow(n)``: draw ``getrandbits(k)`` (one MT word shifted
    right by ``32 - k``, ``k = n.bit_length()``) until it is below ``n``.  Returns -1 when the
    word buffer runs out (the caller extends it and starts over).  ``neumaier`` selects the
    ``sum()`` of the running Python (sequential before 3.12, Neumaier-compensated from 3.12).
    """
    n_langs = prob.shape[0]
    k = 0
    m = n_rows
    while m:
        k += 1
        m >>= 1
    rshift = np.uint32(32 - k)
    n_words = words.shape[0]
    i = 0
    while True:
        while True:
            if pos >= n_words:
                return -1
            r = np.int64(words[pos] >> rshift)
            pos += 1
            if r < n_rows:
                break
        row = rows[r]
        for j in range(n_langs):
            prob[j] *= weight + table[row, j]
        if i % 5 == 0:
            # _normalize_prob: sump = sum(prob) exactly as the interpreter's sum() adds floats
            s = 0.0
            if neumaier:
                c = 0.0
                for j in range(n_langs):
                    x = prob[j]
                    t = s + x
                    if abs(s) >= abs(x):
                        c += (s - t) + x
                    else:
                        c += (x - t) + s
                    s = t
                if c != 0.0 and np.isfinite(c):
                    s += c
            else:
                for j in range(n_langs):
                    s += prob[j]
            maxp = 0.0
            for j in range(n_langs):
                p = prob[j] / s
                if maxp < p:
                    maxp = p
                prob[j] = p
            if maxp > CONV_THRESHOLD or i >= ITERATION_LIMIT:
                break
        i += 1
    return pos


@nb.njit(cache=True, nogil=True)
def python_sum(values, neumaier):
    """The kernel's ``sum()``; checked against the interpreter's at start-up."""
    s = 0.0
    if neumaier:
        c = 0.0
        for j in range(values.shape[0]):
            x = values[j]
            t = s + x
            if abs(s) >= abs(x):
                c += (s - t) + x
            else:
                c += (x - t) + s
            s = t
        if c != 0.0 and np.isfinite(c):
            s += c
    else:
        for j in range(values.shape[0]):
            s += values[j]
    return s


@nb.njit(cache=True, nogil=True)
def detect_block(
    cps,
    norm,
    upper,
    hash_keys,
    hash_rows,
    hash_bits,
    table,
    words,
    alpha_z,
    alpha_next,
    neumaier,
    rows,
    langprob,
):
    """``Detector._detect_block`` for one prepared text, seed 0, all 7 trials in one call.

    ``alpha_z[p]`` / ``alpha_next[p]`` are the alphas that ``random.gauss`` yields when an
    even trial starts at MT word ``p`` (its first value, then the cached second one; computed in
    Python with ``math``).  Fills ``langprob`` and returns the number of n-grams (0: the caller
    raises "No features in text."), or -1 when the MT word buffer ran out.
    """
    n_rows = extract_rows(cps, norm, upper, hash_keys, hash_rows, hash_bits, rows)
    if n_rows == 0:
        return 0
    n_langs = langprob.shape[0]
    prob = np.empty(n_langs, dtype=np.float64)
    for j in range(n_langs):
        langprob[j] = 0.0
    pos = 0
    gauss_pos = 0
    for t in range(7):
        for j in range(n_langs):
            prob[j] = 1.0 / n_langs
        if t % 2 == 0:
            if pos + 4 > words.shape[0]:
                return -1
            gauss_pos = pos
            alpha = alpha_z[pos]
            pos += 4
        else:
            alpha = alpha_next[gauss_pos]
        pos = run_trial(prob, rows, n_rows, table, words, pos, alpha / 10000.0, neumaier)
        if pos < 0:
            return -1
        for j in range(n_langs):
            langprob[j] += prob[j] / 7
    return n_rows
