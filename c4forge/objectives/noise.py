"""Noise masks (objectives.md §3.1, §4): which positions of a token piece get corrupted.

Every mask is a pure function of (length, rng, parameters): token values never matter, so a
mask depends only on (L, seed). Arithmetic is Python float64 with round-half-to-even in both the
mask and the lengths helper, so the two always agree (T5 mixed float32 and float64, §3.4).
"""

from __future__ import annotations

import numpy as np


def num_noise_tokens(length: int, noise_density: float) -> int:
    """`n = round(L·d)` (half to even), clamped to [1, L−1] as T5's mask does."""
    return min(max(round(length * noise_density), 1), length - 1)


def num_noise_spans(n: int, mean_noise_span_length: float) -> int:
    """`s = max(1, round(n / m))`."""
    return max(1, round(n / mean_noise_span_length))


def span_shape(
    length: int, noise_density: float, mean_noise_span_length: float
) -> tuple[int, int, int]:
    """(n noise tokens, s spans, k kept tokens) of a piece of `length` ≥ 2 (§3.1 steps 3–4)."""
    n = num_noise_tokens(length, noise_density)
    s = num_noise_spans(n, mean_noise_span_length)
    k = length - n
    return n, min(s, n, k), k  # min(): only bites with m < 1 or d near 1; configs reject those


def smallest_gaps(u: np.ndarray, count: int) -> np.ndarray:
    """Sorted indices of the `count` smallest draws on the last axis of `u` (any batch shape).

    Ties go to the lower index (as a stable sort would; equal doubles from `random()` have
    probability ~ N²·2⁻⁵⁴). Why not argpartition + sort: one `partition` finds each row's
    `count`-th smallest value, and a comparison marks the set in index order, which costs about
    a third of argpartition's index shuffling on 500-wide rows.
    """
    batch, width = u.shape[:-1], u.shape[-1]
    if count <= 0:
        return np.empty(batch + (0,), dtype=np.int64)
    rows = u if u.ndim == 2 else u.reshape(-1, width)  # a 2-D column slice is not copied
    kth = np.partition(rows, count - 1, axis=-1)[:, count - 1 : count]
    below = rows <= kth
    if np.count_nonzero(below) == rows.shape[0] * count:
        return np.nonzero(below)[1].reshape(batch + (count,))
    # A tie at some row's threshold: take the lowest indices among equal draws.
    order = np.argsort(rows, axis=-1, kind="stable")[:, :count]
    return np.sort(order, axis=-1).reshape(batch + (count,))


def composition_from_uniforms(u: np.ndarray, total: int, parts: int) -> np.ndarray:
    """Uniform random composition(s) of `total` into `parts` positive runs, from `total − 1`
    i.i.d. U(0,1) draws on the last axis (any leading batch shape).

    The `parts − 1` smallest draws mark the cut gaps; the ranks of i.i.d. uniforms are a uniform
    permutation, so the cut set is a uniform subset of the `total − 1` gaps, and every ordered
    decomposition is equally likely: P(run = j) = C(N−j−1, s−2) / C(N−1, s−1).
    """
    batch = u.shape[:-1]
    if parts <= 1:
        return np.full(batch + (1,), total, dtype=np.int64)
    if parts > total:
        raise ValueError(f"cannot split {total} tokens into {parts} non-empty runs")
    cuts = smallest_gaps(u, parts - 1) + 1
    bounds = np.empty(batch + (parts + 1,), dtype=np.int64)
    bounds[..., 0] = 0
    bounds[..., -1] = total
    bounds[..., 1:-1] = cuts
    return np.diff(bounds, axis=-1)


def span_uniforms(length: int, noise_density: float, mean_noise_span_length: float) -> int:
    """How many U(0,1) draws one piece consumes: (n − 1) for the noise split + (k − 1) for the kept."""
    n, _, k = span_shape(length, noise_density, mean_noise_span_length)
    return n - 1 + k - 1


def span_runs_from_uniforms(
    u: np.ndarray, length: int, noise_density: float = 0.15, mean_noise_span_length: float = 3.0
) -> tuple[np.ndarray, np.ndarray]:
    """(kept runs, noise runs), each (…, s): the noise split from u[…, :n−1], the kept split
    from u[…, n−1:] — two independent uniform compositions."""
    n, s, k = span_shape(length, noise_density, mean_noise_span_length)
    noise = composition_from_uniforms(u[..., : n - 1], n, s)
    keep = composition_from_uniforms(u[..., n - 1 :], k, s)
    return keep, noise


def span_runs(
    length: int,
    rng: np.random.Generator,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
) -> tuple[np.ndarray, np.ndarray]:
    """(kept run lengths, noise run lengths) of §3.1 for `length ≥ 2`; one `rng.random` call."""
    u = rng.random(span_uniforms(length, noise_density, mean_noise_span_length))
    return span_runs_from_uniforms(u, length, noise_density, mean_noise_span_length)


def random_spans_noise_mask(
    length: int,
    rng: np.random.Generator,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
) -> np.ndarray:
    """§3.1: keep₀ noise₀ keep₁ noise₁ … ; position 0 never noise, position L−1 always (L ≥ 2).

    No random roll (T5's optional roll can put noise first and then mis-pairs sentinels).
    """
    if noise_density == 0 or length == 0:
        return np.zeros(length, dtype=bool)
    orig = length
    length = max(length, 2)
    keep, noise = span_runs(length, rng, noise_density, mean_noise_span_length)
    runs = np.empty(2 * len(keep), dtype=np.int64)
    runs[0::2] = keep
    runs[1::2] = noise
    pattern = np.zeros(len(runs), dtype=bool)
    pattern[1::2] = True
    return np.repeat(pattern, runs)[:orig]


def regular_noise_mask(
    length: int,
    rng: np.random.Generator,
    noise_density: float = 0.15,
    min_span_length: int = 1,
    max_span_length: int = 5,
) -> np.ndarray:
    """T5's `regular_noise_mask`: equally spaced spans of one random length in [1, 5].

    period = round(span / d); a random offset in [0, period) shifts the pattern, so position 0
    may be noise (the sentinel encoders handle that).
    """
    span = int(rng.integers(min_span_length, max_span_length + 1))
    period = max(1, round(span / noise_density))
    offset = int(rng.integers(0, period))
    return (np.arange(length) + offset) % period < span


def iid_noise_mask(
    length: int, rng: np.random.Generator, noise_density: float = 0.15
) -> np.ndarray:
    """Each position noisy independently iff U(0, 1) < d (T5's `iid_noise_mask`)."""
    return rng.random(length) < noise_density


def random_prefix_noise_mask(
    length: int, rng: np.random.Generator, noise_density: float = 0.5
) -> np.ndarray:
    """T5's `random_prefix_noise_mask`: positions ≥ k are noise, k uniform on [lo, L−1].

    lo = min(L−1, max(1, round((1 − 2d)(L−1)))); for d = 0.5 that is {1, …, L−1}, and k = 0 for L = 1.
    """
    if noise_density > 0.5:
        raise ValueError("prefix noise needs noise_density <= 0.5")
    hi = length - 1
    lo = min(hi, max(1, round((1 - 2 * noise_density) * hi)))
    k = int(rng.integers(lo, hi + 1)) if hi > 0 else 0
    return np.arange(length) >= k
