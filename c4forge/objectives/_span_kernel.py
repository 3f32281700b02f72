"""numba kernel of span corruption for equal-length pieces, from their uniforms.

Why: after the draws, ``functions.span_corruption_batch`` makes about ten numpy passes over
each piece; one pass per piece here costs about a third as much (benchmarks/RESULTS.md §14.4).
Same rule, same output: in each split (noise: the first n−1 draws, kept: the other k−1),
the s−1 smallest draws are the cut gaps, ties going to the lower index; a test compares the
kernel with the numpy code. Importing this module requires numba.
"""

from __future__ import annotations

import numba as nb
import numpy as np


@nb.njit(cache=True, nogil=True)
def _run_starts(u, lo, m, count, cand, starts):
    """starts[0:count+1] = 0 then, ascending, 1 + each gap among the ``count`` smallest draws
    of u[lo:lo+m] (ties to the lower index, as a stable sort would take them).

    Only the ``count``-th smallest value is needed: draws under a generous bound (expected
    count + 6σ + 8) are its only candidates, about a seventh of them for T5's shapes; one
    partition of the candidates gives it. Fewer candidates than ``count`` (a ~1e-9 event):
    every draw is one.
    """
    starts[0] = 0
    if count <= 0:
        return
    bound = (count + 6.0 * np.sqrt(count) + 8.0) / m
    nc = 0
    for i in range(m):
        x = u[lo + i]
        if x < bound:
            cand[nc] = x
            nc += 1
    if nc < count:
        nc = m
        cand[:m] = u[lo : lo + m]
    kth = np.partition(cand[:nc], count - 1)[count - 1]
    below = 0
    for i in range(nc):
        if cand[i] < kth:
            below += 1
    ties = count - below  # draws equal to kth that are taken, lowest index first
    t = 1
    for i in range(m):
        x = u[lo + i]
        if x < kth or (x == kth and ties > 0):
            if x == kth:
                ties -= 1
            starts[t] = i + 1
            t += 1
            if t > count:
                break


@nb.njit(cache=True, nogil=True)
def span_corrupt_rows(pieces, u, n, k, s, vocab_size, eos_id):
    """(inputs (P, k+s+1), targets (P, n+s+1)) of P pieces (P, n+k) with their draws u
    (P, n−1+k−1): inputs keep₀ S₀ keep₁ S₁ … EOS, targets S₀ noise₀ S₁ noise₁ … EOS."""
    rows = pieces.shape[0]
    inputs = np.empty((rows, k + s + 1), dtype=np.int32)
    targets = np.empty((rows, n + s + 1), dtype=np.int32)
    noise_at = np.empty(s + 1, dtype=np.int64)
    keep_at = np.empty(s + 1, dtype=np.int64)
    cand = np.empty(max(n, k), dtype=np.float64)
    for r in range(rows):
        _run_starts(u[r], 0, n - 1, s - 1, cand, noise_at)
        _run_starts(u[r], n - 1, k - 1, s - 1, cand, keep_at)
        noise_at[s] = n
        keep_at[s] = k
        piece = pieces[r]
        out_in = inputs[r]
        out_tg = targets[r]
        pos = 0
        ii = 0
        ti = 0
        for j in range(s):
            run = keep_at[j + 1] - keep_at[j]
            out_in[ii : ii + run] = piece[pos : pos + run]
            ii += run
            pos += run
            sentinel = vocab_size - 1 - j
            out_in[ii] = sentinel
            ii += 1
            out_tg[ti] = sentinel
            ti += 1
            run = noise_at[j + 1] - noise_at[j]
            out_tg[ti : ti + run] = piece[pos : pos + run]
            ti += run
            pos += run
        out_in[ii] = eos_id
        out_tg[ti] = eos_id
    return inputs, targets
