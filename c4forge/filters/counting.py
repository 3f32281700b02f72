"""Counter names (c4_rules.md §13) and the `count` callback every rule reports through.

Rules never import an engine. They report each drop as ``count(stage, reason, n)``; the Beam
job binds that to ``Metrics.counter``, the Spark driver to accumulators, tests to a
``CounterBag``. This is how "nothing is lost silently" stays one mechanism on every engine.

This module is the one list of reason names (``REASONS``) and of the page flow between stages
(``FLOW``, from which the conservation identities and the end-of-job funnel are read), for
§13's stages and for c4forge's extensions (crawl WARC input, MinHash near-dedup).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

Count = Callable[..., None]  # count(stage: str, reason: str, n: int = 1) -> None

# c4forge extensions of §13 (issue 5), listed in stats.json only when they apply.
# Crawl WARC input (``warc_html``): record reasons of stage ``wet``, each a record outcome.
WARC_REASONS: tuple[str, ...] = (
    "non_response",
    "bad_http_header",
    "http_status",
    "non_html",
    "undecodable",
)
# MinHash near-dedup (``minhash``, ``--near-dedup minhash``): a stage between dedup and langid.
NEAR_DEDUP_STAGE = "near_dedup"
NEAR_DEDUP_REASONS: tuple[str, ...] = (
    "candidates",
    "true_pairs",
    "removed",
    "passed",
    "unconverged",
)


class Flow(NamedTuple):
    """How pages leave a stage: each counted once, under a drop or a kept reason (§13)."""

    drops: tuple[str, ...]
    kept: tuple[str, ...]

    @property
    def outcomes(self) -> tuple[str, ...]:
        return self.drops + self.kept


# The page funnel in stage order; ``dedup`` stands for ``dedup_<mode>``. The conservation
# identities, the end-of-job summary and the funnel chart are all read from this one table.
FLOW: dict[str, Flow] = {
    "wet": Flow(
        (
            "non_conversion",
            *WARC_REASONS,
            "record_too_large",
            "malformed_record",
            "incomplete_record",
            "invalid_utf8",
            "no_url",
            "no_content",
            "no_timestamp",
        ),
        ("pages",),
    ),
    "length": Flow(("too_long_page",), ("passed",)),
    "realnews": Flow(("bad_domain", "bad_subdomain"), ("passed",)),  # --variant realnewslike
    "url_dedup": Flow(("duplicate_url",), ("passed",)),
    "clean": Flow(("loremipsum", "squigglybracket", "too_few_sentences"), ("passed",)),
    "webtext": Flow(("not_in_list",), ("passed",)),  # --variant webtextlike
    "paragraph": Flow(("too_few_paragraphs",), ("passed",)),  # --variant multilingual
    "dedup": Flow(("empty", "too_few_sentences"), ("passed",)),
    NEAR_DEDUP_STAGE: Flow(("removed",), ("passed",)),
    # --decontaminate (issue 17); `contaminated:<benchmark>` breakdowns are added dynamically
    "decontaminate": Flow(("contaminated",), ("passed",)),
    "langid": Flow(
        ("langdetect_exception", "no_predictions", "low_confidence", "ignored_language"),
        ("passed",),
    ),
    "badwords": Flow(("contains_badword",), ("soft_passed", "no_list", "passed")),
    "split": Flow((), ("train", "validation")),
}

# Every reason of c4_rules.md §13 and of the extensions above, per stage, in funnel order.
# stats.json lists all of them, zeros included (extensions only when they apply, see
# ``stage_reasons``). `ignored_language:<code>` breakdowns are added dynamically.
REASONS: dict[str, tuple[str, ...]] = {
    "wet": (
        "files",
        "empty_file",
        "truncated_file",
        "malformed_file",
        "records",
        *FLOW["wet"].outcomes,
    ),
    "length": ("too_long_page", "passed"),
    "realnews": FLOW["realnews"].outcomes,
    "url_dedup": ("duplicate_url", "passed", "tie_text_md5"),
    # the list side of the join: URLs read, blank lines, listed URLs without a page (info)
    "webtext": (*FLOW["webtext"].outcomes, "list_urls", "blank_lines", "missing_page"),
    "paragraph": FLOW["paragraph"].outcomes,
    "clean": (
        "too_long_word",
        "no_endmark",
        "too_short",
        "javascript",
        "policy",
        "line_passed",
        "loremipsum",
        "squigglybracket",
        "too_few_sentences",
        "passed",
    ),
    "dedup_spans": (
        "repeated_windows",
        "duplicate_sentence",
        "empty",
        "too_few_sentences",
        "passed",
    ),
    "dedup_lines": (
        "global_duplicate",
        "local_duplicate",
        "line_passed",
        "empty",
        "too_few_sentences",
        "passed",
    ),
    NEAR_DEDUP_STAGE: NEAR_DEDUP_REASONS,
    "decontaminate": FLOW["decontaminate"].outcomes,
    "langid": FLOW["langid"].outcomes,
    # CLD3 (--variant multilingual): only ignored_language drops a page; und_* pages are kept
    # (as `und`, counted in passed too). `passed:<code>` breakdowns are added dynamically.
    "langid_cld3": ("und_not_reliable", "und_low_confidence", "ignored_language", "passed"),
    "badwords": FLOW["badwords"].outcomes,
    "split": FLOW["split"].outcomes,
}


# Stages only some corpus variants run (issue 10): never part of a run unless its plan lists them.
VARIANT_STAGES: frozenset[str] = frozenset({"realnews", "webtext", "paragraph"})
# Stages a run has only when an option asks for them (or its variant runs them).
OPTIONAL_STAGES: frozenset[str] = VARIANT_STAGES | {"decontaminate"}


def stage_reasons(
    dedup: str,
    *,
    warc: bool = False,
    near_dedup: bool = False,
    stages: Sequence[str] | None = None,
    language_id: str = "langdetect",
) -> dict[str, tuple[str, ...]]:
    """The stages present for a run; the exact-dedup namespace is always called ``dedup``.

    Without ``warc`` / ``near_dedup`` this is exactly §13's list (the extensions are left out).
    ``stages``: the run's counter stages (a clean plan's ``counter_stages``; ``wet`` is always
    there), for corpus variants; by default the ``en`` job's. ``language_id="cld3"`` lists the
    CLD3 reasons under ``langid``.
    """
    out: dict[str, tuple[str, ...]] = {}
    for stage, reasons in REASONS.items():
        if stage.startswith("dedup_"):
            if stage == f"dedup_{dedup}" and (stages is None or "dedup" in stages):
                out["dedup"] = reasons
            continue
        if stage.startswith("langid"):
            if stage != ("langid_cld3" if language_id == "cld3" else "langid"):
                continue
            if stages is None or "langid" in stages:
                out["langid"] = reasons
            continue
        if stages is None:
            if stage in OPTIONAL_STAGES:
                continue
        elif stage != "wet" and stage not in stages:
            continue
        if stage == NEAR_DEDUP_STAGE and not near_dedup:
            continue
        if stage == "wet" and not warc:
            reasons = tuple(r for r in reasons if r not in WARC_REASONS)
        out[stage] = reasons
    return out


class CounterBag:
    """A plain ``{stage: {reason: n}}`` collector that is also a ``Count`` callback; with
    ``keep > 0`` it also keeps per reason the ``keep`` dropped items of smallest hash
    (``--keep-samples``, ``c4forge.filters.drop_samples``)."""

    def __init__(self, keep: int = 0) -> None:
        self.counts: dict[str, dict[str, int]] = {}
        self.keep = keep
        self._samples: object | None = None

    def sample(self, stage: str, reason: str, text: str, url: str = "") -> None:
        if self.keep <= 0:
            return
        from c4forge.filters import drop_samples as ds

        if self._samples is None:
            self._samples = ds.SampleBag(self.keep)
        self._samples.add(ds.key_of(stage, reason), ds.record(text, url))  # type: ignore[attr-defined]

    @property
    def samples(self) -> dict[str, list[tuple[str, str, str]]]:
        """``{stage/reason: [(hash, text, url), …]}`` kept so far (empty without ``keep``)."""
        return {} if self._samples is None else self._samples.as_dict()  # type: ignore[attr-defined]

    def merge_samples(self, other: Mapping[str, Any]) -> None:
        if other and self.keep > 0:
            from c4forge.filters import drop_samples as ds

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

    def as_dict(self, dedup: str | None = None) -> dict[str, dict[str, int]]:
        """Counters with every known reason present (zeros included) when ``dedup`` is given."""
        out: dict[str, dict[str, int]] = {}
        if dedup is not None:
            for stage, reasons in stage_reasons(dedup).items():
                out[stage] = {r: 0 for r in reasons}
        for stage, reasons in self.counts.items():
            out.setdefault(stage, {}).update(reasons)
        return {s: dict(sorted(r.items())) for s, r in sorted(out.items())}


def full_counters(
    raw: Mapping[str, Mapping[str, int]],
    dedup: str,
    near_dedup: bool = False,
    stages: Sequence[str] | None = None,
    language_id: str = "langdetect",
) -> dict[str, dict[str, int]]:
    """Every reason of the run's stages present, zeros included, sorted (stats.json's block).

    The ``dedup`` stage only when dedup runs; the WARC reasons when any WARC record was counted
    (a run on WET files gives exactly §13's list); the ``near_dedup`` stage when MinHash ran;
    ``stages`` / ``language_id`` as in ``stage_reasons`` (corpus variants).
    """
    wet = raw.get("wet", {})
    warc = any(wet.get(r, 0) for r in WARC_REASONS)
    reasons_of = stage_reasons(
        dedup, warc=warc, near_dedup=near_dedup, stages=stages, language_id=language_id
    )
    out: dict[str, dict[str, int]] = {
        stage: dict.fromkeys(reasons, 0) for stage, reasons in reasons_of.items()
    }
    for stage, reasons in raw.items():
        bucket = out.setdefault(stage, {})
        for reason, n in reasons.items():
            bucket[reason] = bucket.get(reason, 0) + n
    return {s: dict(sorted(r.items())) for s, r in sorted(out.items())}


def conservation_errors(
    c: Mapping[str, Mapping[str, int]],
    dedup: str,
    near_dedup: bool | None = None,
    chain: Sequence[str] | None = None,
) -> list[str]:
    """The identities of c4_rules.md §13 along ``FLOW``; an empty list means every page is
    accounted for. Each stage's pages in = the kept pages of the stage before it.

    ``near_dedup=None`` infers it from the counters (a ``near_dedup`` stage is present).
    ``chain``: the page-flow stages of the run in order (a clean plan's ``funnel``); by default
    ``FLOW``'s stages that the dedup mode and near-dedup keep.
    """

    def g(stage: str, reason: str) -> int:
        return c.get(stage, {}).get(reason, 0)

    def total(stage: str, reasons: tuple[str, ...]) -> int:
        return sum(g(stage, r) for r in reasons)

    if chain is None:
        if near_dedup is None:
            near_dedup = NEAR_DEDUP_STAGE in c
        chain = [
            s for s in FLOW if (s != "dedup" or dedup != "none") and s not in OPTIONAL_STAGES
        ]
        if not near_dedup:
            chain.remove(NEAR_DEDUP_STAGE)
    checks = [
        ("wet.records", g("wet", "records"), "wet outcomes", total("wet", FLOW["wet"].outcomes))
    ]
    for before, stage in zip(chain, chain[1:]):
        kept = FLOW[before].kept
        name = f"{before}.{kept[0]}" if len(kept) == 1 else f"{before} kept"
        checks.append(
            (name, total(before, kept), f"{stage} total", total(stage, FLOW[stage].outcomes))
        )
    return [f"{name}: {a} != {what} {b}" for name, a, what, b in checks if a != b]
