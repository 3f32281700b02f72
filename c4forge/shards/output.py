"""The output folder of a shard build: what is there before (fresh / resume / done, §3.4) and
the finishing pass after the rows are written (empty shards, totals, the vocabulary copy, and
index.json last). Engine-free: any engine that writes shards with ``rows.write_one_shard`` and
counters with ``rows.save_clean_stats`` is finished here.
"""

from __future__ import annotations

import math
import re
from typing import Any

from c4forge.engines import job_driver
from c4forge.errors import InputError, OutputExistsError
from c4forge.formats import shards as fmt
from c4forge.formats.shards import VOCAB_DIR, copy_is_current, write_vocab_copy
from c4forge.formats.shards import VOCAB_INDEX_KEY as INDEX_KEY
from c4forge.io import storage
from c4forge.shards.build import ShardsBuild
from c4forge.shards.parts import Part, wholes
from c4forge.shards.rows import check_rows, clean_stats_path, empty_stats, write_one_shard

BUILD_RECORD = "_build.json"  # under _progress/: what an unfinished build was building
_SHARD_FILE_RE = re.compile(r"^(train|validation)-\d{5}-of-\d{5}\.arrow$")


def _our_files(output: str) -> list[str]:
    return [n for n in storage.listdir(output) if _SHARD_FILE_RE.match(n) or ".arrow.tmp-" in n]


def remove_previous(output: str) -> None:
    """--overwrite: delete what a shard build writes here, and nothing else in the folder."""
    for name in _our_files(output):
        storage.remove(storage.join(output, name))
    storage.remove(storage.join(output, fmt.INDEX_NAME))
    storage.rmtree(storage.join(output, fmt.PROGRESS_DIR))
    storage.rmtree(storage.join(output, VOCAB_DIR))


def build_record(build: ShardsBuild) -> dict[str, Any]:
    layout: dict[str, Any] = (
        {"num_shards": build.num_shards}
        if build.job.rows_per_shard is None
        else {"rows_per_shard": build.job.rows_per_shard}
    )
    return {"dataset_fingerprint": build.fingerprint, "arrow": build.manifest["arrow"], **layout}


def _index_matches(build: ShardsBuild, index: dict[str, Any]) -> bool:
    if (
        index.get("dataset_fingerprint") != build.fingerprint
        or index.get("arrow") != build.manifest["arrow"]
    ):
        return False
    if set(index.get("splits", {})) != set(build.splits):
        return False
    for split, block in index["splits"].items():
        want = (
            build.num_shards[split]
            if build.num_shards is not None
            else max(1, math.ceil(block["rows"] / build.job.rows_per_shard))
        )
        if block["num_shards"] != want:
            return False
    return True


def prepare_output(build: ShardsBuild, overwrite: bool) -> str:
    """Decide what to do with an existing folder: 'done', 'resume' or 'fresh' (§3.4)."""
    out = build.job.output
    index_path = storage.join(out, fmt.INDEX_NAME)
    record_path = storage.join(out, fmt.PROGRESS_DIR, BUILD_RECORD)
    want = build_record(build)
    if storage.exists(index_path):
        index = storage.read_json(index_path)
        if not _index_matches(build, index):
            if not overwrite:
                raise OutputExistsError(
                    f"{index_path} holds a shard set built differently (dataset_fingerprint "
                    f"{index.get('dataset_fingerprint')}, this run {build.fingerprint}, or other "
                    "shard counts / Arrow options); pass --overwrite to replace it"
                )
            remove_previous(out)
        else:
            # Finished before: keep every intact shard, rebuild only damaged or missing ones.
            progress = fmt.Progress(out)
            intact = True
            for block in index["splits"].values():
                for rec in block["shards"]:
                    progress.save({**rec, "dataset_fingerprint": build.fingerprint})
                    if progress.finished(rec["file"], build.fingerprint) is None:
                        intact = False
            if intact:
                storage.rmtree(storage.join(out, fmt.PROGRESS_DIR))
                if not copy_is_current(out, index, build.vocab_files):
                    # A damaged copy, or a set built before shard sets carried one: (re)write
                    # the copy and its index.json entry; the shards stay as they are.
                    index[INDEX_KEY] = write_vocab_copy(
                        out, build.vocab_files, build.manifest["vocabulary"]
                    )
                    fmt.write_index(out, index)
                return "done"
            storage.remove(index_path)
            storage.write_json(record_path, want)
            return "resume"
    elif storage.exists(record_path):
        if storage.read_json(record_path) != want:
            if not overwrite:
                raise OutputExistsError(
                    f"{out} holds an unfinished shard build with other settings "
                    f"({record_path}); pass --overwrite to discard it"
                )
            remove_previous(out)
        else:
            _remove_tmp(out)
            return "resume"
    elif _our_files(out):
        if not overwrite:
            raise OutputExistsError(
                f"{out} already holds .arrow shards without index.json or build record; "
                "pass --overwrite to replace them"
            )
        remove_previous(out)
    storage.makedirs(storage.join(out, fmt.PROGRESS_DIR))
    storage.write_json(record_path, want)
    return "fresh"


def _remove_tmp(out: str) -> None:
    """Leftovers of writes interrupted by a crash (a finished write renamed its temp file)."""
    for name in storage.listdir(out):
        if ".tmp-" in name:
            storage.remove(storage.join(out, name))


def finished_shards(build: ShardsBuild) -> frozenset[str]:
    """Names whose progress record and file sha256 agree (only knowable with fixed counts)."""
    if build.num_shards is None:
        return frozenset()
    progress = fmt.Progress(build.job.output)
    names = {fmt.shard_file_name(s, i, n) for s, n in build.num_shards.items() for i in range(n)}
    return frozenset(n for n in names if progress.finished(n, build.fingerprint) is not None)


def gather_stats(build: ShardsBuild, units: list[Part] | None = None) -> dict[str, dict[str, int]]:
    """Sum the counters of the rows step's units (default: each clean shard whole) per split;
    every unit must have reported; the documents read must be the documents the clean output
    holds (``check_documents``)."""
    units = units or wholes({s: build.clean_files[s] for s in build.splits})
    out: dict[str, dict[str, int]] = {}
    for split in build.splits:
        total = empty_stats(build.objective)
        read = 0
        for unit in (u for u in units if u.split == split):
            rec_path = clean_stats_path(build.job.output, unit)
            if not storage.exists(rec_path):
                raise RuntimeError(
                    f"clean shard {unit.path} was not processed ({rec_path} missing)"
                )
            record = storage.read_json(rec_path)
            for k, v in record["stats"].items():
                total[k] = total.get(k, 0) + v
            read += record.get("documents_read", record["stats"].get("documents", 0))
        check_documents(build, split, read, total)
        out[split] = total
    return out


def check_documents(build: ShardsBuild, split: str, read: int, stats: dict[str, int]) -> None:
    """Documents in = documents read = documents tokenized + counted drops, per split: refuse
    (naming the step) before index.json when they do not add up."""
    source = build.manifest.get("source", {}).get("documents", {}).get(split)
    if source is not None:
        check_rows(split, build.job.docs, "read", source, read)
    check_rows(split, build.job.docs, "tokenize", read, stats.get("documents", read))


def finish(build: ShardsBuild, stats: dict[str, dict[str, int]]) -> dict[str, Any]:
    """Write shards that received no rows, check the totals, copy the vocabulary, and write
    index.json last."""
    for split, st in stats.items():
        if split == "train" and st["rows"] == 0:
            raise InputError(
                f"{build.job.docs}: no training rows: {st['documents']} train documents read, "
                f"{st['documents_empty']} of them empty (no text)"
            )
    num_shards = build.num_shards or {
        s: max(1, math.ceil(stats[s]["rows"] / build.job.rows_per_shard)) for s in build.splits
    }
    progress = fmt.Progress(build.job.output)
    splits = {}
    for split in build.splits:
        count = num_shards[split]
        records = []
        for i in range(count):
            name = fmt.shard_file_name(split, i, count)
            rec = progress.load(name)
            if rec is None or rec.get("dataset_fingerprint") != build.fingerprint:
                rec = write_one_shard(build, split, i, count, [])  # no row hashed to this shard
            records.append(rec)
        block = fmt.split_summary(count, records)
        check_rows(split, build.job.output, "write", stats[split]["rows"], block["rows"])
        splits[split] = block
    index = dict(build.manifest)
    index["splits"] = splits
    index["stats"] = stats
    index["versions"] = fmt.library_versions()
    index[INDEX_KEY] = write_vocab_copy(
        build.job.output, build.vocab_files, build.manifest["vocabulary"]
    )
    job_driver.commit_last(build.job.output, lambda: fmt.write_index(build.job.output, index))
    return index
