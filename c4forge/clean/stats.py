"""stats.json of a clean run (c4_rules.md §12, formats.md §1): config, inputs, counters, outputs.

stats.json is written last, so its presence marks a finished output; it holds no wall-clock
value, so two runs on the same inputs give byte-identical files on any runner or worker count.
Timings go to the end-of-job summary instead.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

import c4forge
from c4forge.clean import counting
from c4forge.errors import OutputExistsError, VerificationError
from c4forge.formats.clean_docs import CLEAN_STATS_FORMAT, STATS_NAME
from c4forge.io.storage import check_format, dumps_pretty

FORMAT_VERSION = 1
# stats.json's inputs: per input file, its name and the sha256 of the bytes the run read
# (``clean.input_digests``); not part of the cheap same-inputs check, verified after it.
INPUT_FILES_KEY = "files"


def constants() -> dict[str, Any]:
    """c4_rules.md §2 as the rules actually use them (read from their modules, so stats.json
    records the rules a corpus was built with, not a copy that could drift), plus the two
    constants the pipeline adds."""
    from c4forge.clean.output import DOCS_PER_SHARD
    from c4forge.clean.resources import constants as rule_constants
    from c4forge.dedup import exact as exact_dedup

    return {
        **rule_constants(),
        "dedup_min_sentences": exact_dedup.MIN_SENTENCES,
        "docs_per_shard_auto": DOCS_PER_SHARD,
    }


def outputs_block(shards: list[dict], counts: Mapping[str, int]) -> dict[str, Any]:
    """Per split: documents, characters, shard list (sorted by index)."""
    out: dict[str, Any] = {}
    for split, n in counts.items():
        mine = sorted((s for s in shards if s["split"] == split), key=lambda s: s["index"])
        if len(mine) != n:
            raise VerificationError(
                f"{split}: expected {n} shard files, writer reported {len(mine)}"
            )
        out[split] = {
            "shards": n,
            "documents": sum(s["documents"] for s in mine),
            "characters": sum(s["characters"] for s in mine),
            "files": [
                {
                    k: s[k]
                    for k in (
                        "file",
                        "documents",
                        "characters",
                        "bytes",
                        "sha256",
                        "content_sha256",
                    )
                }
                for s in mine
            ],
        }
    return out


def totals_block(
    counters: Mapping[str, Mapping[str, int]], inputs: Mapping, outputs: Mapping
) -> dict:
    """Pages and bytes in and out (no time: that goes to the summary)."""
    return {
        "pages_in": counters.get("wet", {}).get("pages", 0),
        "records_in": counters.get("wet", {}).get("records", 0),
        "bytes_in": inputs["bytes"],
        "documents_out": sum(o["documents"] for o in outputs.values()),
        "characters_out": sum(o["characters"] for o in outputs.values()),
        "bytes_out": sum(f["bytes"] for o in outputs.values() for f in o["files"]),
    }


def languages_block(counters: Mapping[str, Mapping[str, int]], outputs: Mapping) -> dict:
    """Per language (``--variant multilingual``): pages CLD3 gave it, bad-words outcomes,
    documents written per split. Read from the counters' ``:<code>`` breakdowns."""
    langid = counters.get("langid", {})
    bad = counters.get("badwords", {})
    out = {}
    for lang in sorted(r.split(":", 1)[1] for r in langid if r.startswith("passed:")):
        train = outputs.get(lang, {}).get("documents", 0)
        validation = outputs.get(f"{lang}-validation", {}).get("documents", 0)
        out[lang] = {
            "identified": langid[f"passed:{lang}"],
            "badwords_dropped": bad.get(f"contains_badword:{lang}", 0),
            "badwords_soft_passed": bad.get(f"soft_passed:{lang}", 0),
            "train": train,
            "validation": validation,
            "documents": train + validation,
        }
    return out


def make_stats(
    config: dict,
    inputs: dict,
    counters: dict,
    outputs: dict,
    accounts: counting.Accounts,
    by_language: bool = False,
) -> dict[str, Any]:
    """stats.json; ``accounts``: the plan's ``(stage, Flow)`` pairs (``Plan.accounts``: the
    conservation identities); ``by_language``: add the per-language block (mC4)."""
    errors = counting.conservation_errors(counters, accounts)
    written = sum(o["documents"] for o in outputs.values())
    split_total = sum(n for r, n in counters.get("split", {}).items() if ":" not in r)
    if written != split_total:
        errors.append(f"documents written: {written} != split total {split_total}")
    stats = {
        "format": CLEAN_STATS_FORMAT,
        "format_version": FORMAT_VERSION,
        "c4forge_version": c4forge.__version__,
        "config": config,
        "inputs": inputs,
        "counters": counters,
        "outputs": outputs,
        "totals": totals_block(counters, inputs, outputs),
        "conservation_errors": errors,
    }
    if by_language:
        stats["languages"] = languages_block(counters, outputs)
    return stats


def stats_text(stats: dict) -> str:
    return dumps_pretty(stats)


def normalized(obj: Any) -> Any:
    """JSON round trip, so tuples/ints compare like what was read back from disk."""
    import json

    return json.loads(json.dumps(obj))


def read_existing(path: str) -> dict | None:
    """The ``stats.json`` of an earlier run at ``path`` (local or remote), or None when it is
    confirmed absent. A failed read propagates: a transient error must not make a finished
    output look unfinished (it would be overwritten without --overwrite)."""
    from c4forge.io import storage

    try:
        return storage.read_json_if_exists(path)
    except json.JSONDecodeError as err:
        raise VerificationError(
            f"{path}: not valid JSON ({getattr(err, 'why', err)}); remove it or pass --overwrite"
        ) from err


def finished_run(
    job: Any,
    stats_path: str,
    config: dict,
    inputs: dict,
    summary: Any,
    verify: Callable[[dict], None] | None = None,
) -> bool:
    """True when ``--output`` already holds exactly this run (said, nothing to do). With
    ``--overwrite`` an older run's ``stats.json`` goes first, so it stops counting as finished.
    ``verify(existing)``: raises when the inputs' content is not what that run read."""
    from c4forge.clean import output as clean_output

    existing = read_existing(stats_path)
    if check_existing(existing, stats_path, config, inputs, job.overwrite):
        if verify is not None:
            verify(existing)
        if not job.quiet:
            print(summary.already_complete(existing, job.output))
        return True
    if existing is not None:
        clean_output.remove_files(job.output, [STATS_NAME])
    return False


def check_existing(
    existing: dict | None, path: str, config: dict, inputs: dict, overwrite: bool
) -> bool:
    """Decide what to do with a finished run in the output folder.

    Returns True when that run is exactly this one (same config and inputs) and should be
    reported, not recomputed. Raises ``OutputExistsError`` for a different finished run unless
    ``overwrite``.
    """
    if existing is None or overwrite:
        return False
    check_format(existing, path, CLEAN_STATS_FORMAT, (FORMAT_VERSION,))
    listed = {k: v for k, v in (existing.get("inputs") or {}).items() if k != INPUT_FILES_KEY}
    same = existing.get("config") == normalized(config) and listed == normalized(inputs)
    if same:
        return True
    what = "configuration" if existing.get("config") != normalized(config) else "inputs"
    raise OutputExistsError(
        f"{path} holds a finished run with different {what}; "
        "choose another --output or pass --overwrite to replace it"
    )
