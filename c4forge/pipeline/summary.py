"""The human-readable end-of-job summary of `c4forge clean`, built from stats.json alone.

One source (the counters) feeds the summary, the PNG funnel and stats.json, so they cannot
disagree. Wall time is passed in separately because stats.json deliberately has none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

PAGE_DROPS: dict[str, tuple[str, ...]] = {
    "wet": (
        "non_conversion",
        "record_too_large",
        "malformed_record",
        "incomplete_record",
        "invalid_utf8",
        "no_url",
        "no_content",
        "no_timestamp",
        # WARC input (--input-format warc/auto, c4forge.filters.warc_html.REASONS)
        "non_response",
        "bad_http_header",
        "http_status",
        "non_html",
        "undecodable",
    ),
    "length": ("too_long_page",),
    "url_dedup": ("duplicate_url",),
    "clean": ("loremipsum", "squigglybracket", "too_few_sentences"),
    "dedup": ("empty", "too_few_sentences"),
    "near_dedup": ("removed",),
    "langid": ("langdetect_exception", "no_predictions", "low_confidence", "ignored_language"),
    "badwords": ("contains_badword",),
}
# Line/sentence-level counters: they change text, not the page count.
DETAIL: dict[str, tuple[str, ...]] = {
    "clean": ("line_passed", "too_long_word", "no_endmark", "too_short", "javascript", "policy"),
    "dedup": (
        "line_passed",
        "global_duplicate",
        "local_duplicate",
        "duplicate_sentence",
        "repeated_windows",
    ),
    "url_dedup": ("tie_text_md5",),
    "near_dedup": ("candidates", "true_pairs", "unconverged"),
    "badwords": ("soft_passed", "no_list"),
}
DETAIL_LABEL = {
    "clean": "lines",
    "dedup": "lines/sentences",
    "url_dedup": "groups",
    "near_dedup": "pairs",
    "langid": "by language",
    "badwords": "kept",
}
TITLES = {
    "wet": "wet (records → pages)",
    "length": "length ≤ 190,000 chars",
    "url_dedup": "URL dedup",
    "clean": "line & page rules",
    "dedup": "dedup",
    "near_dedup": "near-dedup (MinHash)",
    "langid": "langdetect en ≥ 0.99",
    "badwords": "bad words",
}


@dataclass
class Step:
    stage: str
    title: str
    pages_in: int
    pages_out: int
    drops: dict[str, int] = field(default_factory=dict)
    detail: dict[str, int] = field(default_factory=dict)

    @property
    def dropped(self) -> int:
        return self.pages_in - self.pages_out


def funnel(counters: Mapping[str, Mapping[str, int]]) -> list[Step]:
    """The pages through each stage, in order, with the reasons for every drop."""

    def g(stage: str, reason: str) -> int:
        return counters.get(stage, {}).get(reason, 0)

    steps: list[Step] = []
    current = g("wet", "records")
    outs = {
        "wet": g("wet", "pages"),
        "length": g("length", "passed"),
        "url_dedup": g("url_dedup", "passed"),
        "clean": g("clean", "passed"),
        "dedup": g("dedup", "passed"),
        "near_dedup": g("near_dedup", "passed"),
        "langid": g("langid", "passed"),
        "badwords": g("badwords", "passed")
        + g("badwords", "soft_passed")
        + g("badwords", "no_list"),
    }
    for stage, reasons in PAGE_DROPS.items():
        if stage not in counters:
            continue
        drops = {r: g(stage, r) for r in reasons if g(stage, r)}
        detail = {r: g(stage, r) for r in DETAIL.get(stage, ()) if g(stage, r)}
        if stage == "langid":  # the ignored_language:<code> breakdown is detail, not drops
            detail.update(
                {
                    r.split(":", 1)[1]: n
                    for r, n in counters["langid"].items()
                    if r.startswith("ignored_language:") and n
                }
            )
        steps.append(Step(stage, TITLES[stage], current, outs[stage], drops, detail))
        current = outs[stage]
    return steps


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:5.1f}%" if whole else "    –"


def _reasons(d: Mapping[str, int], limit: int = 6) -> str:
    items = sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{k} {v:,}" for k, v in items[:limit])
    if len(items) > limit:
        text += f", … (+{len(items) - limit})"
    return text


def render(
    stats: Mapping,
    output: str,
    wall_s: float | None,
    runner: str = "",
    source: str = "",
    png: str | None = None,
) -> str:
    c = stats["counters"]
    totals = stats["totals"]
    wet = c.get("wet", {})
    lines = [""]
    head = "c4forge clean: done"
    if wall_s is not None:
        head += f" in {wall_s:.1f} s"
    if runner:
        head += f" on {runner}"
    lines.append(head)
    lines.append(
        f"  inputs: {stats['inputs']['count']} file(s), {human_bytes(totals['bytes_in'])}; "
        f"{wet.get('files', 0)} opened, {wet.get('empty_file', 0)} empty, "
        f"{wet.get('truncated_file', 0)} truncated, {wet.get('malformed_file', 0)} malformed"
    )
    lines.append(f"  dedup mode: {stats['config']['dedup']}")
    lines.append("")
    lines.append(f"  {'stage':<26}{'in':>10}{'out':>10}{'kept':>8}  dropped by")
    first = None
    for step in funnel(c):
        first = step.pages_in if first is None else first
        lines.append(
            f"  {step.title:<26}{step.pages_in:>10,}{step.pages_out:>10,}"
            f"{_pct(step.pages_out, step.pages_in):>8}  {_reasons(step.drops) or '–'}"
        )
        if step.detail:
            label = DETAIL_LABEL.get(step.stage, "")
            lines.append(f"  {'':<26}{'':>28}  ({label}: {_reasons(step.detail)})")
    split = c.get("split", {})
    docs = totals["documents_out"]
    lines.append(
        f"  {'written':<26}{'':>10}{docs:>10,}{_pct(docs, first or 0):>8}  "
        f"train {split.get('train', 0):,}, validation {split.get('validation', 0):,}"
        "   (kept % of records read)"
    )
    lines.append("")
    pages_in = totals["pages_in"]
    rate = ""
    if wall_s:
        rate = (
            f"; {pages_in / wall_s:,.1f} pages/s, {totals['bytes_in'] / wall_s / 1e6:,.2f} MB/s in"
        )
    lines.append(
        f"  totals: {pages_in:,} pages / {human_bytes(totals['bytes_in'])} in → {docs:,} documents,"
        f" {totals['characters_out']:,} characters, {human_bytes(totals['bytes_out'])} out{rate}"
    )
    errors = stats.get("conservation_errors", [])
    check = "OK (every page accounted for)" if not errors else "FAILED: " + "; ".join(errors)
    counters_src = f", {source} counters" if source else ""
    lines.append(f"  conservation check: {check}{counters_src}")
    lines.append(f"  output: {output}")
    for split_name, o in stats["outputs"].items():
        files = o["files"]
        pattern = (
            files[0]["file"] if len(files) == 1 else f"{files[0]['file']} … {files[-1]['file']}"
        )
        lines.append(
            f"    {split_name}: {o['documents']:,} docs in {len(files)} shard(s): {pattern}"
        )
    lines.append("    stats.json (every counter, checksums)")
    if png:
        lines.append(f"    {png.rsplit('/', 1)[-1]} (funnel chart)")
    return "\n".join(lines)


def already_complete(stats: Mapping, output: str) -> str:
    """Message for a rerun on a finished output with the same config and inputs."""
    docs = stats.get("totals", {}).get("documents_out", "?")
    return (
        f"c4forge clean: {output} already holds a complete run of these inputs with this "
        f"configuration ({docs} documents); nothing recomputed. Pass --overwrite to redo it.\n"
        + render(stats, output, None)
    )
