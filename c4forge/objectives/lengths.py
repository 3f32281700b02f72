"""`random_spans_helper` (objectives.md §3.3): the piece length whose corruption fills inputs exactly."""

from __future__ import annotations

from c4forge.errors import ConfigError


def _lengths_of(
    tokens_length: int,
    noise_density: float,
    mean_noise_span_length: float,
    extra_in: int = 1,
    extra_tg: int = 1,
) -> tuple[int, int, int, int]:
    """(inputs, targets, noise, spans) of a T-token piece: float64, round half even.

    DECISION: clamped like the mask (n in [1, T−1], s ≥ 1). objectives.md §3.3 says "no clamp"
    (T5's helper), but then inputs_length 8 and 9 give pieces (n = 1, s = 0) whose real
    corruption is one token longer than inputs_length; clamping changes nothing from 10 up.
    """
    n = min(max(round(tokens_length * noise_density), 1), max(tokens_length - 1, 1))
    s = max(1, round(n / mean_noise_span_length))
    return tokens_length - n + s * extra_in + 1, n + s * extra_tg + 1, n, s


def random_spans_helper(
    inputs_length: int,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
    extra_tokens_per_span_inputs: int = 1,
    extra_tokens_per_span_targets: int = 1,
) -> tuple[int, int]:
    """(tokens_length, targets_length): the largest piece whose inputs fit, T5's d = 0.5 hack included."""
    if inputs_length < 2:
        raise ConfigError(f"inputs_length must be >= 2, got {inputs_length}")

    def lengths(t: int) -> tuple[int, int, int, int]:
        return _lengths_of(
            t,
            noise_density,
            mean_noise_span_length,
            extra_tokens_per_span_inputs,
            extra_tokens_per_span_targets,
        )

    tokens_length = inputs_length - 1
    while lengths(tokens_length + 1)[0] <= inputs_length:
        tokens_length += 1
    targets_length = lengths(tokens_length)[1]
    # T5's "minor hack" so that at d = 0.5 the targets fit within inputs_length.
    if noise_density == 0.5 and targets_length > inputs_length:
        tokens_length -= 1
        targets_length -= 1
    return tokens_length, targets_length


def span_corruption_lengths(
    inputs_length: int,
    noise_density: float = 0.15,
    mean_noise_span_length: float = 3.0,
    extra_ids: int = 100,
) -> tuple[int, int]:
    """`random_spans_helper` plus the 100-sentinel ceiling, checked up front (§3.4).

    T5 silently emitted ids below V − 100 (real wordpieces) when a piece needed more spans than
    extra ids; we refuse the configuration before any work.
    """
    if not 0.0 < noise_density < 1.0:
        raise ConfigError(f"noise density must be in (0, 1), got {noise_density}")
    if mean_noise_span_length < 1.0:
        raise ConfigError(f"mean noise span length must be >= 1, got {mean_noise_span_length}")
    tokens_length, targets_length = random_spans_helper(
        inputs_length, noise_density, mean_noise_span_length
    )
    n = min(max(round(tokens_length * noise_density), 1), tokens_length - 1)
    spans = max(1, round(n / mean_noise_span_length))
    if spans > extra_ids:
        limit = max_inputs_length(noise_density, mean_noise_span_length, extra_ids)
        raise ConfigError(
            f"inputs_length {inputs_length} needs {spans} noise spans per example (pieces of "
            f"{tokens_length} tokens at density {noise_density}, mean span {mean_noise_span_length}) but "
            f"the vocabulary has only {extra_ids} sentinels; use --inputs-length {limit} or less, or a "
            f"longer --mean-noise-span-length"
        )
    return tokens_length, targets_length


def max_inputs_length(
    noise_density: float, mean_noise_span_length: float, extra_ids: int = 100
) -> int:
    """The largest inputs_length whose full pieces need at most `extra_ids` sentinels (1809 for T5).

    Spans grow monotonically with inputs_length, so a binary search over [2, hi] suffices, hi
    being a length whose piece surely needs more: T ≥ (extra_ids + 2)·m/d.
    """

    def spans(inputs_length: int) -> int:
        t, _ = random_spans_helper(inputs_length, noise_density, mean_noise_span_length)
        n = min(max(round(t * noise_density), 1), t - 1)
        return max(1, round(n / mean_noise_span_length))

    lo, hi = 2, int((extra_ids + 2) * mean_noise_span_length / noise_density) + 2
    if spans(lo) > extra_ids:
        return 1
    while lo < hi:  # invariant: spans(lo) <= extra_ids < spans(hi)
        mid = (lo + hi + 1) // 2
        if spans(mid) <= extra_ids:
            lo = mid
        else:
            hi = mid - 1
    return lo
