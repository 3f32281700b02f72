"""Extension points are registries: a strategy or a head registered from outside the package
(here, this test module) is picked up by the code that uses it, with no other module edited."""

from __future__ import annotations

import math

import pytest

from c4forge.errors import ConfigError
from c4forge.trainers import mixture_spec
from c4forge.trainers.mixture_spec import (
    STRATEGIES,
    Strategy,
    mixing_rates,
    register_strategy,
    spec_from_mapping,
)


@pytest.fixture
def sqrt_strategy():
    """A toy strategy: a source weighs the square root of its rows, capped at K."""
    st = register_strategy(
        Strategy(
            "sqrt",
            lambda spec, s, n: math.sqrt(min(n, spec.limit) if spec.limit else n),
            frozenset({"limit"}),
            counts_rows=True,
        )
    )
    yield st
    del STRATEGIES[st.name]


def _mapping(**top):
    return {**top, "sources": {"a": {"shards": "x"}, "b": {"shards": "y"}}}


def test_registered_strategy_is_validated_and_rated(sqrt_strategy):
    spec = spec_from_mapping(_mapping(strategy="sqrt", limit=100), origin="mix.toml")
    assert mixing_rates(spec, [400, 25]) == pytest.approx([10 / 15, 5 / 15])
    with pytest.raises(ConfigError, match="temperature is only used by strategy 'temperature'"):
        spec_from_mapping(_mapping(strategy="sqrt", temperature=2.0), origin="mix.toml")
    with pytest.raises(ConfigError, match="has no train rows"):
        mixing_rates(spec, [400, 0])
    # the key's users now include the new strategy
    assert "'sqrt'" in mixture_spec._users("limit")


def test_unregistered_strategy_is_one_line_error():
    with pytest.raises(ConfigError, match="unknown strategy 'sqrt'"):
        spec_from_mapping(_mapping(strategy="sqrt"), origin="mix.toml")


def test_strategy_names_are_unique():
    with pytest.raises(ValueError, match="already registered"):
        register_strategy(Strategy("equal", lambda spec, s, n: 1.0))
