"""The one driver of `c4forge clean`, for every engine: resolve, check, run the plan, report.

Order of work, and why:
1. Inputs are resolved and the output folder is checked *before* any engine work starts, so a
   typo or a finished output fails in a second, not after the workers spin up. A finished run
   with the same configuration and inputs is reported, not recomputed.
2. The engine runs the plan (``build_plan(job)``); every drop is a counter.
3. The counters are checked against the conservation identities along the plan's funnel, and
   written with the shard checksums to stats.json, last (its presence means "complete"); then
   stale shards and ``_work/`` go, and the summary (and ``--report``'s funnel.png) follow.

``_work/`` (``progress.py``, ``passes.py``): every engine keeps each chunk's records here (the
page text stays in its chunk; only keys cross a shuffle); ``--resume`` continues an interrupted
run of the same job, anything else starts clean.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from c4forge import readers
from c4forge.clean import input_digests, passes, resume_state
from c4forge.clean import output as clean_output
from c4forge.clean import stats as clean_stats
from c4forge.clean.config import CleanJob
from c4forge.clean.memory_fit import check_memory
from c4forge.clean.plan import Plan, build_plan
from c4forge.corpus import counting
from c4forge.engines import job_driver
from c4forge.errors import C4ForgeError, VerificationError
from c4forge.io import ownership, storage
from c4forge.io.inputs import InputFile, inputs_block

FUNNEL_NAME = "funnel.png"
# Files clean writes at the top of its folder (besides shards): their temporaries are its own.
DEBRIS_OF = (clean_stats.STATS_NAME, FUNNEL_NAME, input_digests.SEEN_NAME)


def choose_engine(job: CleanJob) -> tuple[CleanJob, str]:
    """``--engine auto`` → the engine for this job, and why (for the first log line; the
    inputs' size is for that line only); the policy every stage shares (``engines.choose``)."""
    from c4forge.io.inputs import resolve_inputs

    def input_bytes() -> int:
        return sum(f.size for f in resolve_inputs(list(job.inputs), job.input_format))

    return job_driver.choose_engine(job, input_bytes)


def check_output(job: CleanJob) -> None:
    """Refuse a local output path that exists and is not a folder (before anything reads it).
    Not whether it can be written: a finished output on a read-only disk is still reported
    complete; a write that fails is a one-line error at the CLI."""
    storage.check_output_folder(job.output, writable=False)


def prepare_output(job: CleanJob) -> None:
    """Create a local output folder; remove a chart of an older run (it would mislead next to
    this run's stats)."""
    from c4forge.corpus.drop_samples import SAMPLES_DIR

    storage.makedirs(job.output)
    clean_output.remove_files(job.output, [FUNNEL_NAME])
    storage.rmtree(storage.join(job.output, SAMPLES_DIR))  # an older run's samples


def verify(job: CleanJob, files: list[InputFile]) -> Any:
    """The check a finished run must pass to be served: its inputs' content unchanged."""

    def same_content(done: dict) -> None:
        update = input_digests.verify(job.output, done, files)
        if update is not None:
            input_digests.write_seen(job.output, files, update)

    return same_content


def serve_finished(
    job: CleanJob, stats_path: str, config: dict, inputs: dict, files: list[InputFile]
) -> bool:
    """True when the folder already holds this run (said; nothing recomputed). Read-only,
    without the folder's lock, unless there is something to tidy: a ``_work/`` of a run killed
    after its stats.json, temporary files of killed writes, inputs touched since (their
    recorded versions are updated)."""
    from c4forge.clean import summary

    existing = clean_stats.read_existing(stats_path)
    if existing is None or job.overwrite:
        return False
    if not clean_stats.check_existing(existing, stats_path, config, inputs, False):
        return False
    update = input_digests.verify(job.output, existing, files)
    work_root = storage.join(job.output, resume_state.WORK_DIR)
    has_work = resume_state.is_clean_work(work_root)
    if update is not None or has_work or clean_output.own_debris(job.output, DEBRIS_OF):
        with ownership.owned_output(job.output, "clean"):
            if update is not None:
                input_digests.write_seen(job.output, files, update)
            remove_debris(job.output, work_root if has_work else None)
    if not job.quiet:
        print(summary.already_complete(existing, job.output))
    return True


def remove_debris(output: str, work_root: str | None) -> None:
    """A finished folder holds no debris: the temporary files of writes a killed run left
    (``clean_output.remove_own_debris``) and, when given, the ``_work/`` of a run killed after its
    stats.json was written (``work_root``, proven a clean run's by its job record)."""
    clean_output.remove_own_debris(output, DEBRIS_OF)
    if work_root is not None:
        resume_state.WorkDir(output).remove()


def start_work(
    engine: Any, job: CleanJob, files: list[InputFile], config: dict
) -> tuple[resume_state.WorkDir, list[resume_state.Chunk]]:
    """The ``_work`` folder of this run and its chunks (continuing an interrupted run of the
    same job with ``--resume``; anything else removes an old ``_work`` first)."""
    work = resume_state.WorkDir(job.output, resume_state.BEAM_DATA_SUFFIX)
    chunk_files = resume_state.chunk_files_setting()
    chunks = resume_state.plan_chunks(files, chunk_files)
    record = {
        "engine": engine.name,
        "config": config,
        "inputs": [c.describe() for c in chunks],
        "chunk_files": chunk_files,
    }
    resumed = work.start(record, job.resume)
    what = "continuing the interrupted run in" if resumed else "recording progress in"
    job_driver.log_resume(job, f"{what} {work.root}")
    return work, chunks


def langdetect_backend(plan: Plan) -> str | None:
    """The langdetect backend the plan's langid stage runs (checked now, before any work: an
    unknown ``C4FORGE_LANGDETECT`` or a fast backend that does not load is a ConfigError);
    ``None`` when the plan has no langdetect stage."""
    uses = plan.language_id == "langdetect" and any(s.name == "langid" for s in plan.doc_stages)
    if not uses:
        return None
    from c4forge.langid import langdetect_filter as langid

    return langid.backend()


def refuse_no_page(
    job: CleanJob,
    raw: dict,
    files: list[InputFile],
    shard_stats: list[dict],
    work: resume_state.WorkDir,
    created: bool,
) -> None:
    """A run that read no page is an error (``clean.unreadable``): what it wrote (the empty
    shards, ``_work/``, the output folder when this run made it) goes before the error."""
    from c4forge.clean.unreadable import check_some_page

    names = [storage.basename(f.path) for f in files]
    try:
        check_some_page(raw, names)
    except C4ForgeError:
        clean_output.remove_files(job.output, [x["file"] for x in shard_stats])
        work.finish()
        if created and not storage.listdir(job.output):
            storage.rmtree(job.output)
        raise


def finish(
    job: CleanJob,
    plan: Plan,
    config: dict,
    inputs: dict,
    shard_stats: list[dict],
    raw: dict,
    backend: str | None = None,
    owned: set[str] | frozenset[str] = frozenset(),
) -> dict:
    """stats.json from the run's counters and shards (conservation checked), written last
    (after ``check_owner``: a run whose folder was taken over commits nothing); the shards of
    an earlier run that this one did not rewrite (``owned``: proven an earlier clean run's by
    ``clean_output.owned_shards``) removed."""
    keys = clean_output.output_keys({x["split"]: 1 for x in shard_stats}, job.spec.multilingual)
    counts = {s: sum(1 for x in shard_stats if x["split"] == s) for s in keys}
    outputs = clean_stats.outputs_block(shard_stats, counts)
    counters = counting.full_counters(raw, plan.accounts)
    written = {x["file"] for x in shard_stats}
    clean_output.remove_files(job.output, sorted(n for n in owned if n not in written))
    stats = clean_stats.make_stats(
        config,
        inputs,
        counters,
        outputs,
        plan.accounts,
        by_language=job.spec.multilingual,
    )
    if backend is not None:  # which langdetect ran: same decisions, ~50x apart in time
        stats["langdetect_backend"] = backend
    if stats["conservation_errors"]:
        raise VerificationError(
            "the counters do not add up (a page was lost without a reason): "
            + "; ".join(stats["conservation_errors"])
        )
    path, text = (
        storage.join(job.output, clean_stats.STATS_NAME),
        clean_stats.stats_text(stats).encode(),
    )
    job_driver.commit_last(job.output, lambda: storage.write_bytes(path, text))
    return stats


def run_clean(job: CleanJob, engine: Any = None) -> int:
    """Run ``job`` on ``engine`` (default: the job's own engine, closed at the end)."""
    from c4forge.clean import summary

    started = time.monotonic()
    if engine is None:  # a bad output fails before the engine starts
        check_output(job)
    with (
        job_driver.job_engine(job, engine, choose_engine) as (job, engine, why),
        contextlib.ExitStack() as held,  # the folder, from the lock to the end
    ):
        check_output(job)
        files = engine.list_inputs(list(job.inputs), job.input_format)
        inputs = inputs_block(files)
        config = job.record()
        stats_path = storage.join(job.output, clean_stats.STATS_NAME)
        if serve_finished(job, stats_path, config, inputs, files):
            return 0
        readers.check_inputs([f.path for f in files], job.input_format)
        created = not storage.exists(job.output)  # before the lock makes it
        held.enter_context(ownership.owned_output(job.output, "clean"))  # before any write here
        existing = clean_stats.read_existing(stats_path)
        work_root = storage.join(job.output, resume_state.WORK_DIR)
        has_work = resume_state.is_clean_work(work_root)
        if clean_stats.finished_run(job, stats_path, config, inputs, summary, verify(job, files)):
            return 0  # finished by a run that held the folder until now
        owned = clean_output.owned_shards(job.output, existing, has_work)
        prepare_output(job)
        job_driver.log(
            job,
            f"c4forge clean: {inputs['count']} input file(s), {summary.human_bytes(inputs['bytes'])}"
            f" → {job.output} [variant={job.variant}, dedup={job.dedup}, near-dedup={job.near_dedup}, "
            f"{job_driver.engine_label(engine, why)}]",
        )
        check_memory(engine, inputs["bytes"])
        plan = build_plan(job)
        backend = langdetect_backend(plan)
        work, chunks = start_work(engine, job, files, config)
        # an engine's failure leaves as the c4forge error behind it (job_driver.job_engine)
        shard_stats = passes.run_plan(engine, plan, files, job, chunks)
        raw = dict(engine.counters())
        resumed = raw.pop(resume_state.RESUME_NAMESPACE, {})
        refuse_no_page(job, raw, files, shard_stats, work, created)
        job_driver.log_resume(
            job,
            f"{resumed.get('skipped', 0)} chunk(s) done by an earlier run, "
            f"skipped; {resumed.get('processed', 0)} processed now",
        )
        if job.keep_samples:  # before stats.json, which marks the output complete
            from c4forge.corpus.drop_samples import write_samples

            write_samples(job.output, engine.samples(), job.keep_samples)
        digests = input_digests.from_chunks(work, chunks)
        inputs = {**inputs, clean_stats.INPUT_FILES_KEY: input_digests.files_block(files, digests)}
        input_digests.write_seen(job.output, files, digests)
        stats = finish(job, plan, config, inputs, shard_stats, raw, backend, owned)
        work.finish()
        remove_debris(job.output, None)

    wall = time.monotonic() - started
    png = None
    if job.report:
        from c4forge.clean.funnel_chart import write_funnel_png

        png = write_funnel_png(stats, storage.join(job.output, FUNNEL_NAME))
    if not job.quiet:
        print(
            summary.render(
                stats,
                job.output,
                wall,
                engine.description,
                engine.counter_source,
                png,
                accounts=plan.accounts,
            )
        )
    return 0
