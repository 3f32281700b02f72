"""One shard build from start to end: resolve the job, decide what the output folder needs,
let the engine write the missing shards, finish (index.json last) and summarise.

The engine is a function ``(build, skip) -> description``: it must write every shard not in
``skip`` with ``rows.write_one_shard`` and every clean shard's counters with
``rows.save_clean_stats``. Beam's is ``c4forge.shards.beam.run_pipeline``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from c4forge.formats import shards as fmt
from c4forge.io import storage
from c4forge.shards.job import ShardsBuild, ShardsJob, resolve
from c4forge.shards.output import finish, finished_shards, gather_stats, prepare_output
from c4forge.shards.report import ProgressWatcher, summary_lines

Engine = Callable[[ShardsBuild, frozenset[str]], str]


def _beam_engine(build: ShardsBuild, skip: frozenset[str]) -> str:
    from c4forge.shards.beam import run_pipeline

    return run_pipeline(build, skip)


def run_job(job: ShardsJob, engine: Engine | None = None) -> dict[str, Any]:
    """Build (or finish) the shard set of ``job``; returns index.json's content."""
    started = time.time()
    if job.pipeline_args:  # --s3_endpoint_url …: the driver's own remote calls need them too
        storage.use_pipeline_options(list(job.pipeline_args))
    build = resolve(job)
    state = prepare_output(build, job.overwrite)
    runner = ""
    if state != "done":
        with ProgressWatcher(build, job.quiet):
            runner = (engine or _beam_engine)(build, finished_shards(build))
        index = finish(build, gather_stats(build))
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
