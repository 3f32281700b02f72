"""One shard build from start to end: resolve the job, pick the engine, decide what the output
folder needs, let the engine write the missing shards (``stage.run`` on its primitives),
check the accounting, finish (index.json last), remove the runs and summarise.

The engine policy and flags are ``clean``'s (``engines.choose``): ``--engine auto`` picks the
local engine for a run on this machine; a Beam runner or Beam options mean Beam. The skeleton
around the build (the engine held and closed, the log and ``--resume`` lines) is clean's too
(``engines.job_driver``).
"""

from __future__ import annotations

import functools
import time
from typing import Any

from c4forge.engines import job_driver
from c4forge.formats import shards as fmt
from c4forge.io import ownership, storage
from c4forge.shards.build import ShardsBuild, resolve
from c4forge.shards.job import ShardsJob
from c4forge.shards.output import finish, finished_shards, gather_stats, prepare_output
from c4forge.shards.parts import Part
from c4forge.shards.report import ProgressWatcher, summary_lines


def choose_engine(job: ShardsJob, build: ShardsBuild) -> tuple[ShardsJob, str]:
    """``--engine auto`` → the engine for this build and why (``engines.choose``; the clean
    files' size, for the first log line, is not read from a bucket)."""

    def input_bytes() -> int:
        if storage.is_remote(job.docs):
            return 0
        return sum(storage.size(p) for files in build.clean_files.values() for p in files)

    return job_driver.choose_engine(job, input_bytes)


def plan_units(job: ShardsJob, build: ShardsBuild) -> list[Part]:
    """The rows step's units (``shards.parts``): clean shards cut so that ``--workers``
    (default: this machine's cores) have work even when the output has one train shard. The
    documents of a file to cut come from the clean stats.json, else from a counting pass."""
    import os

    from c4forge.shards import parts
    from c4forge.shards.build import count_documents

    files = {s: build.clean_files[s] for s in build.splits}
    if not build.objective.splittable:
        return parts.wholes(files)
    workers = job.workers or os.cpu_count() or 1

    def documents(path: str) -> int:
        n = build.file_documents.get(storage.basename(path))
        return n if n is not None else count_documents([path])

    sizes = _file_sizes(job.docs, [p for s in files for p in files[s]])
    return parts.plan(files, sizes, documents, workers, build.objective.group_documents)


def _file_sizes(docs: str, paths: list[str]) -> dict[str, int]:
    """Bytes of each clean file: one listing of a bucket folder (not a request per file), a
    stat per local file. A file the listing misses counts 0 (it is then not cut)."""
    if storage.is_remote(docs):
        listed = dict(storage.match(storage.join(docs, "c4-*")))
        return {p: listed.get(p, 0) for p in paths}
    return {p: storage.size(p) for p in paths}


def run_job(job: ShardsJob, engine: Any = None) -> dict[str, Any]:
    """Build (or finish) the shard set of ``job`` on ``engine`` (default: the job's own,
    closed at the end); returns index.json's content."""
    started = time.time()
    if job.passthrough:  # --s3_endpoint_url …: the driver's own remote calls need them too
        storage.use_pipeline_options(list(job.passthrough))
    build = resolve(job)  # reads only: a bad input fails before the folder is touched
    with ownership.owned_output(job.output, "shards"):  # before the first write there
        return _run_owned(job, build, engine, started)


def _run_owned(job: ShardsJob, build: Any, engine: Any, started: float) -> dict[str, Any]:
    from c4forge.shards import stage

    state = prepare_output(build, job.overwrite)
    runner = ""
    if state != "done":
        choose = functools.partial(choose_engine, build=build)
        with job_driver.job_engine(job, engine, choose) as (job, engine, why):
            runner = engine.description
            files = sum(len(f) for f in build.clean_files.values())
            obj = build.objective
            job_driver.log(
                job,
                f"c4forge shards: {files} clean file(s) → {job.output} [objective={obj.name} "
                f"{obj.inputs_length}/{obj.targets_length}, {job_driver.engine_label(engine, why)}]",
            )
            units = plan_units(job, build)
            with ProgressWatcher(build, job.quiet, len(units)):
                units = stage.run(engine, build, finished_shards(build), job.resume, units)
            if job.resume:
                done = engine.counters().get("shards", {})
                of_parts = " or parts" if any(u.count > 1 for u in units) else ""
                job_driver.log_resume(
                    job,
                    f"{done.get('clean_shards_reused', 0)} clean shard(s){of_parts} "
                    f"tokenized by an earlier run, reused; {done.get('clean_shards_built', 0)} "
                    "built now",
                )
        index = finish(build, gather_stats(build, units))  # removes _progress/ after index.json
    else:
        index = storage.read_json(storage.join(job.output, fmt.INDEX_NAME))
    if not job.quiet:
        if state == "done":
            print(
                f"c4forge shards: {job.output} is already complete (every shard intact); nothing to do"
            )
        elif state == "resume":
            print(f"c4forge shards: finished an interrupted build in {job.output}")
        seconds = None if state == "done" else time.time() - started
        for line in summary_lines(index, job.output, seconds, runner):
            print(line)
    return index
