"""A training mixture as asked for: its sources, the mixing strategy, and the rates it gives.

Torch- and Arrow-free (``c4forge train --help`` and ``c4forge experiment`` import it). Two ways
to ask: a small TOML file given in place of ``SHARDS``, or ``--mix DIR`` flags beside ``SHARDS``.

.. code-block:: toml

    strategy = "temperature"   # rates | proportional | temperature | equal
    temperature = 2.0          # temperature only
    limit = 65536              # K: proportional and temperature (rows; optional)
    pad = false                # allow sources with shorter rows (zero-padded to the longest)

    [sources.c4]
    shards = "c4/shards"       # relative paths are relative to this file's folder
    rate = 0.8                 # strategy "rates" only (any positive weights; normalised)

    [sources.realnews]
    shards = "realnews/shards"
    rate = 0.2

The strategies are T5's (§3.5.2, seqio ``mixing_rate_num_examples``): ``rates`` normalises the
given weights; ``proportional`` weighs a source by ``min(n, K)`` with ``n`` its train rows (a row
is what the mixture draws, so a packed task set counts packed rows); ``temperature`` by
``min(n, K)^(1/T)``; ``equal`` gives every source the same share. Every mistake is one
``ConfigError`` line naming the file and the key, raised before any data is opened.

A strategy is a rate function, as in seqio: a :class:`Strategy` in ``STRATEGIES`` maps one
source (and its train rows) to an unnormalised weight and names the keys it reads; validation,
the error lines and ``--mix-strategy`` follow from the registry. A new strategy is one
:func:`register_strategy` call.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from c4forge.errors import ConfigError

_TOP_KEYS = ("strategy", "temperature", "limit", "pad", "sources")
_SOURCE_KEYS = ("shards", "rate")


@dataclass(frozen=True)
class MixtureSource:
    """One shard set of a mixture: its name (metric keys), folder, and weight (``rates``)."""

    name: str
    shards: str
    rate: float | None = None


@dataclass(frozen=True)
class Strategy:
    """One mixing strategy: ``weight(spec, source, rows)`` is a source's unnormalised rate.

    ``uses`` names the optional keys it reads (``rate``, ``temperature``, ``limit``): a key it
    reads is required (``rate``, ``temperature``) or allowed (``limit``), any other is an error,
    so a stray key never silently does nothing. ``counts_rows``: the weight follows the train
    rows, so a source without any is an error rather than a zero rate."""

    name: str
    weight: Callable[[MixtureSpec, MixtureSource, int], float]
    uses: frozenset[str] = frozenset()
    counts_rows: bool = False


STRATEGIES: dict[str, Strategy] = {}


def register_strategy(strategy: Strategy) -> Strategy:
    """Add a strategy (its name becomes a valid ``strategy =`` value); returns it."""
    if strategy.name in STRATEGIES:
        raise ValueError(f"mixing strategy {strategy.name!r} is already registered")
    if not strategy.uses <= {"rate", "temperature", "limit"}:
        raise ValueError(f"strategy {strategy.name!r}: unknown keys in uses {set(strategy.uses)}")
    STRATEGIES[strategy.name] = strategy
    return strategy


def _capped(spec: MixtureSpec, rows: int) -> float:
    """``min(n, K)`` (``n`` without a limit): the examples-proportional weight."""
    return float(min(rows, spec.limit) if spec.limit else rows)


register_strategy(Strategy("rates", lambda spec, s, n: float(s.rate), frozenset({"rate"})))  # type: ignore[arg-type]
register_strategy(
    Strategy("proportional", lambda spec, s, n: _capped(spec, n) ** 1.0, frozenset({"limit"}), True)
)
register_strategy(
    Strategy(
        "temperature",
        lambda spec, s, n: _capped(spec, n) ** (1.0 / spec.temperature),  # type: ignore[operator]
        frozenset({"temperature", "limit"}),
        True,
    )
)
register_strategy(Strategy("equal", lambda spec, s, n: 1.0))


def _users(key: str) -> str:
    """``strategy 'a'`` / ``strategies 'a' and 'b'``: the strategies that read ``key``."""
    names = [repr(n) for n, st in STRATEGIES.items() if key in st.uses]
    if len(names) == 1:
        return f"strategy {names[0]}"
    return f"strategies {', '.join(names[:-1])} and {names[-1]}"


@dataclass(frozen=True)
class MixtureSpec:
    """A mixture as requested; :func:`mixing_rates` turns it into rates once row counts are
    known (they come from each shard set's index.json)."""

    sources: tuple[MixtureSource, ...]
    strategy: str = "rates"
    limit: int | None = None
    temperature: float | None = None
    pad: bool = False
    origin: str = "--mix"  # where it was written (error messages)

    def __post_init__(self) -> None:
        where = self.origin
        if self.strategy not in STRATEGIES:
            raise ConfigError(
                f"{where}: unknown strategy {self.strategy!r} (valid: {', '.join(STRATEGIES)})"
            )
        if len(self.sources) < 2:
            raise ConfigError(f"{where}: a mixture needs at least two sources")
        names = [s.name for s in self.sources]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ConfigError(f"{where}: two sources named {dup[0]!r}; give each its own name")
        for s in self.sources:
            if not s.name or not all(c.isalnum() or c in "-_." for c in s.name):
                raise ConfigError(
                    f"{where}: source name {s.name!r} must be letters, digits, '-', '_' or '.'"
                )
        strategy = STRATEGIES[self.strategy]
        rated = [s for s in self.sources if s.rate is not None]
        if "rate" in strategy.uses:
            missing = [s.name for s in self.sources if s.rate is None]
            if missing:
                raise ConfigError(
                    f"{where}: strategy {self.strategy!r} needs a rate for {missing[0]!r}"
                )
            for s in rated:
                if not (isinstance(s.rate, int | float) and math.isfinite(s.rate) and s.rate > 0):
                    raise ConfigError(
                        f"{where}: rate of {s.name!r} must be a positive number, got {s.rate!r}"
                    )
        elif rated:
            raise ConfigError(
                f"{where}: rate of {rated[0].name!r} is only used by {_users('rate')} "
                f"(this mixture is {self.strategy!r})"
            )
        if "temperature" in strategy.uses:
            t = self.temperature
            if t is None or not (isinstance(t, int | float) and math.isfinite(t) and t > 0):
                raise ConfigError(
                    f"{where}: strategy {self.strategy!r} needs a temperature > 0, got {t!r}"
                )
        elif self.temperature is not None:
            raise ConfigError(f"{where}: temperature is only used by {_users('temperature')}")
        if self.limit is not None:
            if "limit" not in strategy.uses:
                raise ConfigError(f"{where}: limit (K) is only used by {_users('limit')}")
            if isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1:
                raise ConfigError(
                    f"{where}: limit must be a positive row count, got {self.limit!r}"
                )

    @property
    def names(self) -> list[str]:
        return [s.name for s in self.sources]

    def describe(self) -> dict[str, Any]:
        """The request as recorded in a checkpoint (paths absolute)."""
        return {
            "strategy": self.strategy,
            "limit": self.limit,
            "temperature": self.temperature,
            "pad": self.pad,
            "sources": [
                {"name": s.name, "shards": os.path.abspath(s.shards), "rate": s.rate}
                for s in self.sources
            ],
        }


def mixing_rates(spec: MixtureSpec, rows: Sequence[int]) -> list[float]:
    """The normalised rate of each source, given each source's train rows."""
    if len(rows) != len(spec.sources):
        raise ValueError("one row count per source")
    strategy = STRATEGIES[spec.strategy]
    if strategy.counts_rows:
        for s, n in zip(spec.sources, rows):
            if n <= 0:
                raise ConfigError(f"mixture source {s.name!r} ({s.shards}) has no train rows")
    weights = [strategy.weight(spec, s, n) for s, n in zip(spec.sources, rows)]
    total = sum(weights)
    return [w / total for w in weights]


# ----------------------------------------------------------------------------- reading requests


def is_mixture_file(path: str) -> bool:
    """``SHARDS`` names a mixture file (rather than a shard folder)."""
    return path.endswith(".toml")


def load_mixture(path: str) -> MixtureSpec:
    """Parse a mixture TOML; any unknown key, wrong type or missing value is one line."""
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: mixture file not found")
    try:
        with open(path, "rb") as f:
            raw = tomllib.load(f)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{path}: not valid TOML ({err})") from None
    return spec_from_mapping(raw, origin=path, base=os.path.dirname(os.path.abspath(path)))


def _unknown(keys: Mapping[str, Any], valid: Sequence[str], where: str) -> None:
    bad = sorted(set(keys) - set(valid))
    if bad:
        raise ConfigError(f"{where}: unknown key {bad[0]!r} (valid: {', '.join(valid)})")


def spec_from_mapping(raw: Mapping[str, Any], *, origin: str, base: str = ".") -> MixtureSpec:
    """A mixture from its TOML (or ``c4forge experiment``) mapping; see the module docstring."""
    _unknown(raw, _TOP_KEYS, origin)
    sources = raw.get("sources")
    if not isinstance(sources, Mapping) or not sources:
        raise ConfigError(f"{origin}: no [sources.NAME] tables")
    out = []
    for name, table in sources.items():
        where = f"{origin}: [sources.{name}]"
        if not isinstance(table, Mapping):
            raise ConfigError(f'{where} must be a table with shards = "DIR"')
        _unknown(table, _SOURCE_KEYS, where)
        if not isinstance(table.get("shards"), str) or not table["shards"]:
            raise ConfigError(f'{where}: shards = "DIR" is required')
        folder = table["shards"]
        if not os.path.isabs(folder) and "://" not in folder:
            folder = os.path.normpath(os.path.join(base, folder))
        rate = table.get("rate")
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, int | float)):
            raise ConfigError(f"{where}: rate must be a number, got {rate!r}")
        out.append(MixtureSource(str(name), folder, None if rate is None else float(rate)))
    strategy = raw.get("strategy")
    if strategy is None:
        strategy = "rates" if all(s.rate is not None for s in out) else None
        if strategy is None:
            raise ConfigError(
                f'{origin}: strategy = "..." is required ({", ".join(STRATEGIES)}) unless '
                "every source has a rate"
            )
    pad = raw.get("pad", False)
    if not isinstance(pad, bool):
        raise ConfigError(f"{origin}: pad must be true or false, got {pad!r}")
    temperature = raw.get("temperature")
    if temperature is not None and (
        isinstance(temperature, bool) or not isinstance(temperature, int | float)
    ):
        raise ConfigError(f"{origin}: temperature must be a number, got {temperature!r}")
    return MixtureSpec(
        sources=tuple(out),
        strategy=str(strategy),
        limit=raw.get("limit"),
        temperature=None if temperature is None else float(temperature),
        pad=pad,
        origin=origin,
    )


def source_name(path: str) -> str:
    """A source's default name: its folder's name, or the parent's when that is ``shards``."""
    parts = [p for p in path.rstrip("/").split("/") if p and p != "."]
    if not parts:
        return "shards"
    if parts[-1] == "shards" and len(parts) > 1:
        return parts[-2]
    return parts[-1]


def spec_from_flags(
    shards: str,
    mix: Sequence[str],
    *,
    rates: str | None,
    strategy: str | None,
    limit: int | None,
    temperature: float | None,
    pad: bool,
) -> MixtureSpec:
    """``SHARDS --mix DIR … [--mix-rates a,b,…] [--mix-strategy S] …`` as a mixture.

    A ``--mix`` value may be ``NAME=DIR`` to name the source; otherwise it is named after its
    folder (:func:`source_name`)."""
    folders = [shards, *mix]
    named = []
    for f in folders:
        name, sep, rest = f.partition("=")
        if sep and "/" not in name and "://" not in f.split("=", 1)[0]:
            named.append((name, rest))
        else:
            named.append((source_name(f), f))
    weights: list[float | None] = [None] * len(folders)
    if rates is not None:
        parts = [p.strip() for p in rates.split(",")]
        if len(parts) != len(folders):
            raise ConfigError(
                f"--mix-rates gives {len(parts)} rates for {len(folders)} sources "
                "(SHARDS and each --mix)"
            )
        try:
            weights = [float(p) for p in parts]
        except ValueError:
            raise ConfigError(
                f"--mix-rates must be numbers separated by commas, got {rates!r}"
            ) from None
        if strategy not in (None, "rates"):
            raise ConfigError(f"--mix-rates is used by --mix-strategy rates, not {strategy}")
        strategy = "rates"
    if strategy is None:
        others = ", ".join(n for n, st in STRATEGIES.items() if "rate" not in st.uses)
        raise ConfigError(f"--mix needs --mix-rates or --mix-strategy ({others})")
    return MixtureSpec(
        sources=tuple(MixtureSource(n, f, w) for (n, f), w in zip(named, weights)),
        strategy=strategy,
        limit=limit,
        temperature=temperature,
        pad=pad,
        origin="--mix",
    )
