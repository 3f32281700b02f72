"""The mixture's row → source map and its rates (numpy only, no shards): every strategy's
realised rates over 10,000 rows, and the map as a pure function of (seed, row)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from c4forge.errors import ConfigError
from c4forge.trainers.mixture_map import BLOCK, MixtureMap, apportion
from c4forge.trainers.mixture_spec import MixtureSource, MixtureSpec, mixing_rates

ROWS = [5_000, 200_000, 30_000]  # train rows of three sources of very different sizes


def _spec(strategy: str, **kw) -> MixtureSpec:
    rates = kw.pop("rates", [None] * len(ROWS))
    return MixtureSpec(
        sources=tuple(MixtureSource(f"s{i}", f"/d{i}", r) for i, r in enumerate(rates)),
        strategy=strategy,
        **kw,
    )


def test_rates_follow_t5s_formulas():
    # examples-proportional: min(n, K) / Σ min(n, K)
    assert mixing_rates(_spec("proportional"), ROWS) == pytest.approx(
        [5 / 235, 200 / 235, 30 / 235]
    )
    assert mixing_rates(_spec("proportional", limit=30_000), ROWS) == pytest.approx(
        [5 / 65, 30 / 65, 30 / 65]
    )
    # temperature: min(n, K)^(1/T), normalised; T = 1 is proportional
    w = [5_000**0.5, 200_000**0.5, 30_000**0.5]
    assert mixing_rates(_spec("temperature", temperature=2.0), ROWS) == pytest.approx(
        [x / sum(w) for x in w]
    )
    assert mixing_rates(_spec("equal"), ROWS) == pytest.approx([1 / 3] * 3)
    assert mixing_rates(_spec("rates", rates=[2, 1, 1]), ROWS) == pytest.approx([0.5, 0.25, 0.25])


STRATEGY_CASES = [
    ("rates", {"rates": [0.6, 0.3, 0.1]}),
    ("rates", {"rates": [0.97, 0.02, 0.01]}),
    ("proportional", {}),
    ("proportional", {"limit": 20_000}),
    ("temperature", {"temperature": 2.0}),
    ("temperature", {"temperature": 8.0, "limit": 100_000}),
    ("equal", {}),
]


@pytest.mark.parametrize("strategy, kw", STRATEGY_CASES)
@pytest.mark.parametrize("seed", [0, 7])
@pytest.mark.parametrize("start", [0, 123_457])
def test_realised_rates_within_one_percent_over_10000_rows(strategy, kw, seed, start):
    rates = mixing_rates(_spec(strategy, **kw), ROWS)
    mix = MixtureMap.from_rates(rates, seed)
    source, _ = mix.locate(np.arange(start, start + 10_000))
    realised = np.bincount(source, minlength=3) / 10_000
    assert np.abs(realised - rates).max() <= 0.01, (realised, rates)
    # far tighter in fact: any run of rows holds its share within ± (sources + 1) rows
    assert np.abs(realised * 10_000 - np.asarray(rates) * 10_000).max() <= 4 + 1


def test_every_block_realises_the_apportioned_counts_and_each_source_reads_in_order():
    mix = MixtureMap.from_rates([0.5, 0.25, 0.25], seed=3)
    source, within = mix.locate(np.arange(2 * BLOCK))
    for k in range(3):
        rows = within[source == k]
        np.testing.assert_array_equal(rows, np.arange(2 * mix.counts[k]))  # 0, 1, 2, … no gap
    assert mix.source_counts(2 * BLOCK + 777) == list(
        np.bincount(mix.locate(np.arange(2 * BLOCK + 777))[0], minlength=3)
    )


def test_apportion_sums_and_keeps_tiny_sources():
    counts = apportion([1e-9, 0.5, 0.5], 1000)
    assert sum(counts) == 1000 and counts[0] == 1
    assert apportion([1, 1, 1], 10) == (4, 3, 3)  # ties go to the earlier source
    with pytest.raises(ConfigError, match="positive"):
        apportion([0.5, 0.0])


def test_a_single_source_map_is_the_identity():
    mix = MixtureMap.from_rates([1.0], seed=9)
    rows = np.arange(3 * BLOCK - 5, 3 * BLOCK + 5)
    source, within = mix.locate(rows)
    assert not source.any()
    np.testing.assert_array_equal(within, rows)


@settings(max_examples=40, deadline=None)
@given(
    weights=st.lists(st.floats(0.01, 10.0), min_size=2, max_size=5),
    seed=st.integers(0, 2**31),
    start=st.integers(0, 10**9),
    chunks=st.lists(st.integers(1, 700), min_size=1, max_size=6),
)
def test_map_is_a_pure_function_of_seed_and_row(weights, seed, start, chunks):
    """Asked in pieces of any size, each by a fresh map object: the same answer."""
    mix = MixtureMap.from_rates(weights, seed)
    rows = np.arange(start, start + sum(chunks))
    whole = mix.locate(rows)
    pieces, lo = [], 0
    for n in chunks:
        pieces.append(MixtureMap.from_rates(weights, seed).locate(rows[lo : lo + n]))
        lo += n
    got_s = np.concatenate([p[0] for p in pieces])
    got_w = np.concatenate([p[1] for p in pieces])
    np.testing.assert_array_equal(got_s, whole[0])
    np.testing.assert_array_equal(got_w, whole[1])
