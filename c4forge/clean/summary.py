"""The human-readable end-of-job summary of `c4forge clean`, built from stats.json alone.

One source (the counters) feeds the summary, the PNG funnel and stats.json, so they cannot
disagree. Wall time is passed in separately because stats.json deliberately has none. The
rows, their reasons and labels are the plan's (``Plan.accounts``: each stage's ``Flow``); a
stats.json read back is summarised with the plan its ``config`` describes (``recorded_plan``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from c4forge.corpus.counting import Accounts, Flow
from c4forge.corpus.stages import READ_STAGE
from c4forge.readers.warc_html import REASONS as WARC_REASONS


def _detail_reasons(flow: Flow) -> tuple[str, ...]:
    """Counters of a stage that are not a page leaving it: lines, sentences, pairs, groups,
    and kept pages by kind (bad words). The read's file counters go to the inputs line."""
    if flow.received:
        return ()
    known = flow.info + flow.kept
    return tuple(dict.fromkeys(r for r in known if r not in flow.drops and r != "passed"))


def accounts_of(config: Mapping | None) -> Accounts:
    """The stages of a run read back from stats.json: its recorded plan's, or, with no
    ``config``, every stage any plan has (``plan.all_accounts``)."""
    from c4forge.clean import plan

    if config is None:
        return plan.all_accounts()
    return plan.recorded_plan(config).accounts


def input_kinds(counters: Mapping[str, Mapping[str, int]], input_format: str) -> tuple[bool, bool]:
    """(WET read, WARC read). ``auto`` decides per file, so it is read off the counters: the
    WARC reasons are listed only when a WARC record was counted, and a WET file's ``warcinfo``
    record is ``non_conversion`` (a WARC's is ``non_response``)."""
    wet = counters.get(READ_STAGE, {})
    if input_format in ("wet", "warc"):
        return input_format == "wet", input_format == "warc"
    warc = any(r in wet for r in WARC_REASONS)
    return wet.get("non_conversion", 0) > 0 or not warc, warc


def wet_title(counters: Mapping[str, Mapping[str, int]], input_format: str = "auto") -> str:
    """The first row names what turned records into pages (crawl WARC: HTML → text)."""
    if input_format == "c4":
        return "clean documents → pages"
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
    detail_label: str = ""

    @property
    def dropped(self) -> int:
        return self.pages_in - self.pages_out


def funnel(
    counters: Mapping[str, Mapping[str, int]],
    input_format: str = "auto",
    accounts: Accounts | None = None,
) -> list[Step]:
    """The pages through each stage that ran, in order, with the reasons for every drop.

    ``accounts``: the run's ``(stage, Flow)`` pairs (``Plan.accounts``, what the
    conservation check reads; ``accounts_of(config)`` for a stats.json read back); by default
    every stage any plan has, those present in the counters shown. The last stage (``split``:
    documents written, no page dropped) is the summary's "written" row, not a funnel row."""

    def g(stage: str, reason: str) -> int:
        return counters.get(stage, {}).get(reason, 0)

    accounts = accounts if accounts is not None else accounts_of(None)
    steps: list[Step] = []
    current = 0
    for i, (stage, flow) in enumerate(accounts):
        if flow.received:
            current = g(stage, flow.received)
        if stage not in counters or i == len(accounts) - 1:
            continue
        drops = {r: g(stage, r) for r in flow.drops if g(stage, r)}
        detail = {r: g(stage, r) for r in _detail_reasons(flow) if g(stage, r)}
        if flow.breakdown:  # e.g. ignored_language:<code>: detail, not drops
            detail.update(
                {
                    r.split(":", 1)[1]: n
                    for r, n in counters[stage].items()
                    if r.startswith(flow.breakdown) and n
                }
            )
        title = wet_title(counters, input_format) if flow.received else flow.title or stage
        out = sum(g(stage, r) for r in flow.kept)
        steps.append(Step(stage, title, current, out, drops, detail, flow.detail))
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


def run_description(config: Mapping, counters: Mapping[str, Mapping[str, int]]) -> str:
    """One line: variant, input format (and how pages were made), dedup mode, near-dedup
    parameters."""
    wet, warc = input_kinds(counters, config.get("input_format", "auto"))
    kinds = [k for k, read in (("WET text", wet), ("WARC HTML → text (resiliparse)", warc)) if read]
    if config.get("input_format") == "c4":
        kinds = ["clean documents (c4-*.json.gz)"]
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
    substrings = config.get("dedup_substrings")
    if substrings:
        text += (
            f"; exact substrings: {substrings.get('bytes', '?')}-byte windows, "
            f"keep {substrings.get('keep', '?')}"
        )
    return text


def render(
    stats: Mapping,
    output: str,
    wall_s: float | None,
    runner: str = "",
    source: str = "",
    png: str | None = None,
    accounts: Accounts | None = None,
) -> str:
    """The end-of-job summary; ``accounts``: the plan's (``Plan.accounts``), by default the
    plan recorded in ``stats["config"]``."""
    c = stats["counters"]
    totals = stats["totals"]
    wet = c.get(READ_STAGE, {})
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
        + (
            f", {wet['damaged_member']} damaged gzip member(s) skipped"
            if wet.get("damaged_member")
            else ""
        )
    )
    lines.append(f"  {run_description(stats['config'], c)}")
    lines.append("")
    if accounts is None:
        accounts = accounts_of(stats["config"])
    steps = funnel(c, stats["config"].get("input_format", "auto"), accounts)
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
            lines.append(f"  {'':<{width}}{'':>28}  ({step.detail_label}: {_reasons(step.detail)})")
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
        return "\n".join(with_unreadable_note(lines, c, stats["inputs"]["count"]))
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
    return "\n".join(with_unreadable_note(lines, c, stats["inputs"]["count"]))


def with_unreadable_note(lines: list[str], counters: Mapping, inputs: int) -> list[str]:
    """``lines`` and, last, the note on inputs that gave nothing (``clean.unreadable``)."""
    from c4forge.clean.unreadable import unreadable_note

    note = unreadable_note(counters, inputs)
    return [*lines, note] if note else lines


def already_complete(stats: Mapping, output: str) -> str:
    """Message for a rerun on a finished output with the same config and inputs."""
    docs = stats.get("totals", {}).get("documents_out", "?")
    return (
        f"c4forge clean: {output} already holds a complete run of these inputs with this "
        f"configuration ({docs} documents); nothing recomputed. Pass --overwrite to redo it.\n"
        + render(stats, output, None)
    )
