"""Counter names (c4_rules.md §13) and the `count` callback every rule reports through.

Rules never import an engine. They report each drop as ``count(stage, reason, n)``; the Beam
job binds that to ``Metrics.counter``, the Spark driver to accumulators, tests to a
``CounterBag``. This is how "nothing is lost silently" stays one mechanism on every engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

Count = Callable[..., None]  # count(stage: str, reason: str, n: int = 1) -> None

# Every reason of c4_rules.md §13, per stage, in funnel order. stats.json lists all of them,
# zeros included. `ignored_language:<code>` breakdowns are added dynamically.
REASONS: dict[str, tuple[str, ...]] = {
    "wet": (
        "files",
        "empty_file",
        "truncated_file",
        "malformed_file",
        "records",
        "non_conversion",
        "record_too_large",
        "malformed_record",
        "incomplete_record",
        "invalid_utf8",
        "no_url",
        "no_content",
        "no_timestamp",
        "pages",
    ),
    "length": ("too_long_page", "passed"),
    "url_dedup": ("duplicate_url", "passed", "tie_text_md5"),
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
    "langid": (
        "langdetect_exception",
        "no_predictions",
        "low_confidence",
        "ignored_language",
        "passed",
    ),
    "badwords": ("contains_badword", "soft_passed", "no_list", "passed"),
    "split": ("train", "validation"),
}


def stage_reasons(dedup: str) -> dict[str, tuple[str, ...]]:
    """The stages present for a dedup mode; the namespace is always called ``dedup``."""
    out: dict[str, tuple[str, ...]] = {}
    for stage, reasons in REASONS.items():
        if stage.startswith("dedup_"):
            if stage == f"dedup_{dedup}":
                out["dedup"] = reasons
            continue
        out[stage] = reasons
    return out


class CounterBag:
    """A plain ``{stage: {reason: n}}`` collector that is also a ``Count`` callback."""

    def __init__(self) -> None:
        self.counts: dict[str, dict[str, int]] = {}

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


def conservation_errors(c: Mapping[str, Mapping[str, int]], dedup: str) -> list[str]:
    """The identities of c4_rules.md §13; an empty list means every page is accounted for."""

    def g(stage: str, reason: str) -> int:
        return c.get(stage, {}).get(reason, 0)

    def total(stage: str, reasons: tuple[str, ...]) -> int:
        return sum(g(stage, r) for r in reasons)

    checks: list[tuple[str, int, int]] = [
        (
            "wet.records",
            g("wet", "records"),
            total(
                "wet",
                (
                    "non_conversion",
                    "record_too_large",
                    "malformed_record",
                    "incomplete_record",
                    "invalid_utf8",
                    "no_url",
                    "no_content",
                    "no_timestamp",
                    "pages",
                ),
            ),
        ),
        ("wet.pages", g("wet", "pages"), total("length", ("too_long_page", "passed"))),
        ("length.passed", g("length", "passed"), total("url_dedup", ("duplicate_url", "passed"))),
        (
            "url_dedup.passed",
            g("url_dedup", "passed"),
            total("clean", ("loremipsum", "squigglybracket", "too_few_sentences", "passed")),
        ),
    ]
    after_clean = g("clean", "passed")
    if dedup != "none":
        checks.append(
            ("clean.passed", after_clean, total("dedup", ("empty", "too_few_sentences", "passed")))
        )
        after_clean = g("dedup", "passed")
    checks += [
        (
            "langid total",
            after_clean,
            total(
                "langid",
                (
                    "langdetect_exception",
                    "no_predictions",
                    "low_confidence",
                    "ignored_language",
                    "passed",
                ),
            ),
        ),
        (
            "langid.passed",
            g("langid", "passed"),
            total("badwords", ("contains_badword", "soft_passed", "no_list", "passed")),
        ),
        (
            "kept pages",
            g("badwords", "soft_passed") + g("badwords", "no_list") + g("badwords", "passed"),
            total("split", ("train", "validation")),
        ),
    ]
    return [f"{name}: {a} != {b}" for name, a, b in checks if a != b]
