"""Inputs that gave nothing: a run that read no page is refused, a run that lost some inputs
says so where a person looks last.

Why: a wrong glob, a README passed as input or a folder of WARC index files reads as zero
pages; the job then wrote an empty corpus and exited 0, with the cause only in the funnel's
file counters (``wet.empty_file``, ``wet.malformed_file``). An empty corpus is never the
product, so no page at all is an ``InputError`` (nothing written is kept); a corpus built
from some of its inputs is a result, with a note after the summary naming how many inputs
gave nothing and why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from c4forge.corpus.stages import READ_STAGE
from c4forge.errors import InputError

SHOWN_NAMES = 3  # input names an error lists before "…"


def _wet(counters: Mapping[str, Mapping[str, int]]) -> Mapping[str, int]:
    return counters.get(READ_STAGE, {})


def file_reasons(counters: Mapping[str, Mapping[str, int]]) -> str:
    """``1 empty, 1 malformed (not WET/WARC), 0 truncated`` of the read step's file counters."""
    wet = _wet(counters)
    return (
        f"{wet.get('empty_file', 0)} empty, {wet.get('malformed_file', 0)} malformed "
        f"(not WET/WARC), {wet.get('truncated_file', 0)} truncated"
    )


def check_some_page(counters: Mapping[str, Mapping[str, int]], names: Sequence[str]) -> None:
    """Refuse a run whose inputs (``names``) gave no page: what each file was, one line."""
    wet = _wet(counters)
    if wet.get("pages", 0) > 0:
        return
    shown = ", ".join(names[:SHOWN_NAMES]) + (", …" if len(names) > SHOWN_NAMES else "")
    records = wet.get("records", 0)
    what = f"{records:,} record(s), none a page with text" if records else "no record"
    raise InputError(
        f"no page read from {len(names)} input file(s) ({shown}): {what}; "
        f"{file_reasons(counters)}; nothing written (are these WET files? --input-format)"
    )


def unreadable_note(counters: Mapping[str, Mapping[str, int]], inputs: int) -> str | None:
    """The summary's last line when some inputs gave no record or broke off; None when every
    input was read whole."""
    wet = _wet(counters)
    empty, malformed = wet.get("empty_file", 0), wet.get("malformed_file", 0)
    truncated, damaged = wet.get("truncated_file", 0), wet.get("damaged_member", 0)
    if not (empty or malformed or truncated or damaged):
        return None
    skipped = f", {damaged} damaged gzip member(s) skipped" if damaged else ""
    return (
        f"  warning: not every input was read whole: of {inputs} input file(s), "
        f"{file_reasons(counters)}{skipped} (counted in stats.json under wet)"
    )
