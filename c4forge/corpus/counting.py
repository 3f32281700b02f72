"""The ``count`` callback every rule reports through, and the accounting a plan derives from
its stages' flows (c4_rules.md §13).

Rules never import an engine. They report each drop as ``count(stage, reason, n)``; the Beam
job binds that to ``Metrics.counter``, the Spark driver to accumulators, tests to a
``CounterBag``. This is how "nothing is lost silently" stays one mechanism on every engine.

There is no table of stages here: each stage of a clean plan carries its ``Flow`` (defined by
the module that counts it: ``c4forge.rules.paragraphs.FLOW``, ``minhash.FLOW`` …), and the
functions below take the plan's ``(stage, Flow)`` pairs in order (``Plan.accounts``): the
reasons stats.json lists, zeros included, and the conservation identities are read from them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Protocol


class Count(Protocol):
    """What every rule reports through: ``count(stage, reason, n)`` adds ``n`` to the counter
    ``stage.reason``. A plain function fits; the engines bind it to their counters."""

    def __call__(self, stage: str, reason: str, n: int = 1) -> None: ...


class SampleCount(Count, Protocol):
    """A ``Count`` that also keeps, per ``stage/reason``, the dropped items of smallest hash
    (``--keep-samples``; ``c4forge.corpus.drop_samples``): ``CounterBag``, the Beam engine's
    counter callback, ``drop_samples.WithUrl``. ``keep`` is how many per reason (0: none, and
    then nothing else is called); ``sample`` reports a dropped text, ``add_record`` a record
    already sampled elsewhere (a resumed chunk's). Rules call ``drop_samples.sample(count, …)``,
    which checks ``keep`` first, so a plain ``Count`` needs none of this."""

    keep: int

    def sample(self, stage: str, reason: str, text: str, url: str = "") -> None: ...

    def add_record(self, key: str, rec: tuple[str, str, str]) -> None: ...


class Flow(NamedTuple):
    """What a stage counts (§13): each page leaving it once, under a drop or a kept reason,
    plus information that is not a page outcome; and how its funnel row is labelled.

    ``info``: counted, listed in stats.json (zeros included), never a page (lines, pairs,
    list URLs, files). ``received``: the counter of what entered the stage, checked against
    its outcomes (the read step's ``records``); other stages receive what the stage before
    them kept. ``when_counted``: reasons listed only when one of them was counted (c4forge
    extensions such as the WARC record outcomes of crawl input). ``rare``: reasons each listed
    only when itself counted (damage that a healthy input never shows, so stats.json of a run
    on healthy input keeps exactly §13's list). ``title``: the funnel row's
    label; ``detail``: the label of its info counters; ``breakdown``: the prefix of
    ``reason:<name>`` counters shown as detail (``ignored_language:``)."""

    drops: tuple[str, ...]
    kept: tuple[str, ...]
    info: tuple[str, ...] = ()
    title: str = ""
    detail: str = ""
    breakdown: str = ""
    received: str = ""
    when_counted: tuple[str, ...] = ()
    rare: tuple[str, ...] = ()

    @property
    def outcomes(self) -> tuple[str, ...]:
        return self.drops + self.kept

    @property
    def listed(self) -> tuple[str, ...]:
        """Every reason stats.json lists for the stage (``when_counted`` ones included)."""
        return self.info + self.outcomes


Accounts = Sequence[tuple[str, Flow]]  # a plan's counting stages in order (``Plan.accounts``)


def listed_reasons(
    accounts: Accounts, counted: Mapping[str, Mapping[str, int]] | None = None
) -> dict[str, tuple[str, ...]]:
    """Per stage of ``accounts``, the reasons stats.json lists, zeros included; a stage's
    ``when_counted`` reasons only when ``counted`` holds one of them (a run on WET files gives
    exactly §13's list)."""
    out: dict[str, tuple[str, ...]] = {}
    for stage, flow in accounts:
        reasons = flow.listed
        if flow.when_counted:
            mine = (counted or {}).get(stage, {})
            if not any(mine.get(r, 0) for r in flow.when_counted):
                reasons = tuple(r for r in reasons if r not in flow.when_counted)
        if flow.rare:
            mine = (counted or {}).get(stage, {})
            reasons = tuple(r for r in reasons if r not in flow.rare or mine.get(r, 0))
        out[stage] = reasons
    return out


class CounterBag:
    """A plain ``{stage: {reason: n}}`` collector that is a ``SampleCount``: with ``keep > 0``
    it also keeps per reason the ``keep`` dropped items of smallest hash (``--keep-samples``,
    ``c4forge.corpus.drop_samples``)."""

    def __init__(self, keep: int = 0) -> None:
        self.counts: dict[str, dict[str, int]] = {}
        self.keep = keep
        self._samples: object | None = None

    def sample(self, stage: str, reason: str, text: str, url: str = "") -> None:
        if self.keep <= 0:
            return
        from c4forge.corpus import drop_samples as ds

        self.add_record(ds.key_of(stage, reason), ds.record(text, url))

    def add_record(self, key: str, rec: tuple[str, str, str]) -> None:
        if self.keep <= 0:
            return
        if self._samples is None:
            from c4forge.corpus import drop_samples as ds

            self._samples = ds.SampleBag(self.keep)
        self._samples.add(key, rec)  # type: ignore[attr-defined]

    @property
    def samples(self) -> dict[str, list[tuple[str, str, str]]]:
        """``{stage/reason: [(hash, text, url), …]}`` kept so far (empty without ``keep``)."""
        return {} if self._samples is None else self._samples.as_dict()  # type: ignore[attr-defined]

    def merge_samples(self, other: Mapping[str, Any]) -> None:
        if other and self.keep > 0:
            from c4forge.corpus import drop_samples as ds

            if self._samples is None:
                self._samples = ds.SampleBag(self.keep)
            self._samples.merge(other)  # type: ignore[attr-defined]

    def __call__(self, stage: str, reason: str, n: int = 1) -> None:
        bucket = self.counts.setdefault(stage, {})
        bucket[reason] = bucket.get(reason, 0) + n

    def get(self, stage: str, reason: str) -> int:
        return self.counts.get(stage, {}).get(reason, 0)

    def merge(self, other: Mapping[str, Mapping[str, int]]) -> None:
        for stage, reasons in other.items():
            for reason, n in reasons.items():
                self(stage, reason, n)

    def as_dict(self, accounts: Accounts | None = None) -> dict[str, dict[str, int]]:
        """The counters, sorted; with a plan's ``accounts`` every reason its stages list is
        present, zeros included (``full_counters``)."""
        if accounts is not None:
            return full_counters(self.counts, accounts)
        return {s: dict(sorted(r.items())) for s, r in sorted(self.counts.items())}


def full_counters(
    raw: Mapping[str, Mapping[str, int]], accounts: Accounts
) -> dict[str, dict[str, int]]:
    """Every reason of the plan's stages present, zeros included, sorted (stats.json's block).

    ``accounts``: the plan's ``(stage, Flow)`` pairs (``Plan.accounts``); a stage listed only
    when the plan runs it, extension reasons only when counted (``listed_reasons``)."""
    out: dict[str, dict[str, int]] = {
        stage: dict.fromkeys(reasons, 0) for stage, reasons in listed_reasons(accounts, raw).items()
    }
    for stage, reasons in raw.items():
        bucket = out.setdefault(stage, {})
        for reason, n in reasons.items():
            bucket[reason] = bucket.get(reason, 0) + n
    return {s: dict(sorted(r.items())) for s, r in sorted(out.items())}


def conservation_errors(c: Mapping[str, Mapping[str, int]], accounts: Accounts) -> list[str]:
    """The identities of c4_rules.md §13 along the plan's ``accounts``; an empty list means
    every page is accounted for. A stage with ``received`` (the read: ``records``) counts all
    it received among its outcomes; each later stage's pages in = the kept pages of the stage
    before it."""

    def g(stage: str, reason: str) -> int:
        return c.get(stage, {}).get(reason, 0)

    def total(stage: str, reasons: tuple[str, ...]) -> int:
        return sum(g(stage, r) for r in reasons)

    checks = [
        (
            f"{stage}.{flow.received}",
            g(stage, flow.received),
            f"{stage} outcomes",
            total(stage, flow.outcomes),
        )
        for stage, flow in accounts
        if flow.received
    ]
    for (before, flow_before), (stage, flow) in zip(accounts, accounts[1:]):
        kept = flow_before.kept
        name = f"{before}.{kept[0]}" if len(kept) == 1 else f"{before} kept"
        checks.append((name, total(before, kept), f"{stage} total", total(stage, flow.outcomes)))
    return [f"{name}: {a} != {what} {b}" for name, a, what, b in checks if a != b]
