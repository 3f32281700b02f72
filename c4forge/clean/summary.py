"""The human-readable end-of-job summary of `c4forge clean`, built from stats.json alone.

One source (the counters) feeds the summary, the PNG funnel and stats.json, so they cannot
disagree. Wall time is passed in separately because stats.json deliberately has none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from c4forge.filters.counting import FLOW, REASONS, WARC_REASONS

# The page-level stages of the funnel (the ``split`` stage is the "written" row).
STAGES: tuple[str, ...] = tuple(s for s in FLOW if s != "split")
DETAIL_LABEL = {
    "clean": "lines",
    "dedup": "lines/sentences",
    "url_dedup": "groups",
    "near_dedup": "pairs",
    "langid": "by language",
    "webtext": "list",
    "badwords": "kept",
    "decontaminate": "by benchmark",
}
# Per-stage reason prefixes whose ``:<name>`` breakdowns the funnel shows as detail.
BREAKDOWNS = {"langid": "ignored_language:", "decontaminate": "contaminated:"}
TITLES = {
    "wet": "records → pages",  # named after the input format by ``wet_title``
    "length": "length ≤ 190,000 chars",
    "realnews": "RealNews domains",
    "url_dedup": "URL dedup",
    "webtext": "URL list (WebText-like)",
    "paragraph": "≥ 3 paragraphs of ≥ 200 chars",
    "clean": "line & page rules",
    "dedup": "dedup",
    "near_dedup": "near-dedup (MinHash)",
    "decontaminate": "decontamination (eval n-grams)",
    "langid": "langdetect en ≥ 0.99",
    "badwords": "bad words",
}


def _detail_reasons(stage: str) -> tuple[str, ...]:
    """Counters of a stage that are not a page leaving it: lines, sentences, pairs, groups,
    and kept pages by kind (bad words). ``wet``'s file counters go to the inputs line."""
    if stage == "wet":
        return ()
    if stage == "dedup":
        known = REASONS["dedup_spans"] + REASONS["dedup_lines"]
    elif stage == "langid":
        known = REASONS["langid"] + REASONS["langid_cld3"]
    else:
        known = REASONS[stage]
    flow = FLOW[stage]
    return tuple(dict.fromkeys(r for r in known if r not in flow.drops and r != "passed"))


def input_kinds(counters: Mapping[str, Mapping[str, int]], input_format: str) -> tuple[bool, bool]:
    """(WET read, WARC read). ``auto`` decides per file, so it is read off the counters: the
    WARC reasons are listed only when a WARC record was counted, and a WET file's ``warcinfo``
    record is ``non_conversion`` (a WARC's is ``non_response``)."""
    wet = counters.get("wet", {})
    if input_format in ("wet", "warc"):
        return input_format == "wet", input_format == "warc"
    warc = any(r in wet for r in WARC_REASONS)
    return wet.get("non_conversion", 0) > 0 or not warc, warc


def wet_title(counters: Mapping[str, Mapping[str, int]], input_format: str = "auto") -> str:
    """The first row names what turned records into pages (crawl WARC: HTML → text)."""
    wet, warc = input_kinds(counters, input_format)
    if wet and warc:
        return "WET/WARC records → pages (HTML → text)"
    return "WARC records → pages (HTML → text)" if warc else "WET records → pages"


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


def funnel(
    counters: Mapping[str, Mapping[str, int]],
    input_format: str = "auto",
    stages: Sequence[str] | None = None,
    language_id: str = "langdetect",
) -> list[Step]:
    """The pages through each stage that ran, in order, with the reasons for every drop.

    ``stages``: the run's page-flow stages (a clean plan's ``funnel``, the list the
    conservation check reads); by default the stages of ``counting.FLOW`` present in the
    counters (a stats.json read back, with no plan at hand). ``language_id``: ``cld3`` for
    ``--variant multilingual`` (its langid row's title)."""

    def g(stage: str, reason: str) -> int:
        return counters.get(stage, {}).get(reason, 0)

    steps: list[Step] = []
    current = g("wet", "records")
    for stage in stages if stages is not None else STAGES:
        if stage not in counters or stage == "split":
            continue
        flow = FLOW[stage]
        drops = {r: g(stage, r) for r in flow.drops if g(stage, r)}
        detail = {r: g(stage, r) for r in _detail_reasons(stage) if g(stage, r)}
        if stage in BREAKDOWNS:  # e.g. ignored_language:<code>: detail, not drops
            prefix = BREAKDOWNS[stage]
            detail.update(
                {
                    r.split(":", 1)[1]: n
                    for r, n in counters[stage].items()
                    if r.startswith(prefix) and n
                }
            )
        title = wet_title(counters, input_format) if stage == "wet" else TITLES[stage]
        if stage == "langid" and language_id == "cld3":
            title = "CLD3 p ≥ 0.95 (else und)"
        out = sum(g(stage, r) for r in flow.kept)
        steps.append(Step(stage, title, current, out, drops, detail))
        current = out
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


def language_id(config: Mapping) -> str:
    """``langdetect`` or ``cld3`` (``--variant multilingual``), from stats.json's config."""
    return config.get("variant", {}).get("language_id", "langdetect")


def run_description(config: Mapping, counters: Mapping[str, Mapping[str, int]]) -> str:
    """One line: variant, input format (and how pages were made), dedup mode, near-dedup
    parameters."""
    wet, warc = input_kinds(counters, config.get("input_format", "auto"))
    kinds = [k for k, read in (("WET text", wet), ("WARC HTML → text (resiliparse)", warc)) if read]
    text = f"input: {' + '.join(kinds)}; dedup: {config.get('dedup', '?')}"
    variant = config.get("variant", {}).get("name", "en")
    if variant != "en":
        text = f"variant: {variant}; {text}"
    near = config.get("near_dedup", "none")
    if near != "none":
        p = config.get("near_dedup_params", {})
        text += (
            f"; near-dedup: {near} ({p.get('ngram', '?')}-grams, {p.get('num_perm', '?')}"
            f" permutations, Jaccard ≥ {p.get('threshold', '?')})"
        )
    return text


def render(
    stats: Mapping,
    output: str,
    wall_s: float | None,
    runner: str = "",
    source: str = "",
    png: str | None = None,
    stages: Sequence[str] | None = None,
) -> str:
    """The end-of-job summary; ``stages``: the plan's funnel (see ``funnel``)."""
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
    lines.append(f"  {run_description(stats['config'], c)}")
    lines.append("")
    steps = funnel(
        c, stats["config"].get("input_format", "auto"), stages, language_id(stats["config"])
    )
    width = max([26, *(len(step.title) + 2 for step in steps)])
    lines.append(f"  {'stage':<{width}}{'in':>10}{'out':>10}{'kept':>8}  dropped by")
    first = None
    for step in steps:
        first = step.pages_in if first is None else first
        lines.append(
            f"  {step.title:<{width}}{step.pages_in:>10,}{step.pages_out:>10,}"
            f"{_pct(step.pages_out, step.pages_in):>8}  {_reasons(step.drops) or '–'}"
        )
        if step.detail:
            label = DETAIL_LABEL.get(step.stage, "")
            lines.append(f"  {'':<{width}}{'':>28}  ({label}: {_reasons(step.detail)})")
    split = c.get("split", {})
    docs = totals["documents_out"]
    lines.append(
        f"  {'written':<{width}}{'':>10}{docs:>10,}{_pct(docs, first or 0):>8}  "
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
    languages = stats.get("languages")
    if languages:
        ranked = sorted(languages.items(), key=lambda kv: (-kv[1]["documents"], kv[0]))
        lines.append(
            f"    {len(languages)} language(s), c4-{{lang}}.… and c4-{{lang}}-validation.… each: "
            + ", ".join(f"{lang} {v['documents']:,}" for lang, v in ranked)
        )
        lines.append("    stats.json (every counter, per-language counts, checksums)")
        if png:
            lines.append(f"    {png.rsplit('/', 1)[-1]} (funnel chart)")
        return "\n".join(lines)
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
