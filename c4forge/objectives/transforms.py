"""inputs_fn / targets_fn of T5's denoising frame, vectorized (no per-token Python loops).

Each takes the piece `tokens` and a boolean `noise_mask` of the same length; sentinels count
down from `vocab_size − 1` (V, pieces + extra ids, never E).
"""

from __future__ import annotations

import numpy as np


class TooManySpans(ValueError):
    """More sentinels needed than the vocabulary has extra ids (the example is dropped, counted)."""


def _span_starts(mask: np.ndarray) -> np.ndarray:
    starts = mask.copy()
    starts[1:] &= ~mask[:-1]
    return starts


def noise_span_to_unique_sentinel(
    tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int, extra_ids: int = 100
) -> np.ndarray:
    """Each noise run → one sentinel (j-th run → V−1−j); the run's other tokens are deleted."""
    starts = _span_starts(noise_mask)
    num_spans = int(np.count_nonzero(starts))
    if num_spans > extra_ids:
        raise TooManySpans(f"{num_spans} spans need more than {extra_ids} sentinels")
    out = np.where(starts, vocab_size - np.cumsum(starts), tokens)
    return out[~noise_mask | starts]


def nonnoise_span_to_unique_sentinel(
    tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int, extra_ids: int = 100
) -> np.ndarray:
    return noise_span_to_unique_sentinel(tokens, ~noise_mask, vocab_size, extra_ids)


def drop_noise_tokens(tokens: np.ndarray, noise_mask: np.ndarray) -> np.ndarray:
    return tokens[~noise_mask]


def drop_nonnoise_tokens(tokens: np.ndarray, noise_mask: np.ndarray) -> np.ndarray:
    return tokens[noise_mask]


def noise_token_to_sentinel(
    tokens: np.ndarray, noise_mask: np.ndarray, vocab_size: int
) -> np.ndarray:
    """Every noise token → the single mask token V−1 (MASS-style)."""
    return np.where(noise_mask, vocab_size - 1, tokens)


def noise_token_to_random_token_or_sentinel(
    tokens: np.ndarray,
    noise_mask: np.ndarray,
    vocab_size: int,
    rng: np.random.Generator,
    random_prob: float = 0.1,
    num_special_tokens: int = 3,
) -> np.ndarray:
    """T5's BERT variant: noise → uniform id in [3, V) with p = 0.1, else V−1. No "keep" branch.

    As in T5 the random range includes the sentinels (quirk kept). Draw order: the random/sentinel
    choice for every position, then the random ids for every position.
    """
    use_random = rng.random(len(tokens)) < random_prob
    random_ids = rng.integers(num_special_tokens, vocab_size, size=len(tokens))
    replaced = np.where(use_random, random_ids, vocab_size - 1)
    return np.where(noise_mask, replaced, tokens)


def append_eos(tokens: np.ndarray, eos_id: int = 1) -> np.ndarray:
    out = np.empty(len(tokens) + 1, dtype=np.int32)
    out[:-1] = tokens
    out[-1] = eos_id
    return out
