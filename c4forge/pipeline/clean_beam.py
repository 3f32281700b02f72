"""`c4forge clean` on Apache Beam: the driver (resolve, check, run, collect, report).

Order of work, and why:
1. Inputs are resolved and the output folder is checked *before* the pipeline starts, so a
   typo or a finished output fails in a second, not after the workers spin up.
2. The pipeline (``build_pipeline``) runs the stages of c4_rules.md §1; every drop is a Beam
   counter. Shard files are written inside the pipeline, one worker per shard.
3. The counters are read back from the runner (committed values), checked against the
   conservation identities of §13, and written with the shard checksums to stats.json, last.

``--resume`` (issue 5): the same job as ONE pipeline whose front is persisted per input file
(``progress.py``: a ``front`` DoFn writes each input's post-clean records and then its done
record under ``OUTPUT/_work/``, and skips inputs whose record exists). One pipeline rather than
one per chunk because on Dataflow a job is one pipeline (a job per chunk would pay a worker
start-up each time) and a runner's own bundle retries then also reuse finished inputs. Pass
``--resume`` already on the first run of a long job: only then is progress recorded (a plain
run skips that I/O, the runner retries failed work itself); rerun the same command after a
kill. The final step (URL dedup → … → write) always runs over all inputs; the shards and
stats.json equal a run without ``--resume`` byte for byte.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from typing import Any

from c4forge import errors
from c4forge.errors import C4ForgeError, ConfigError, VerificationError
from c4forge.formats import storage
from c4forge.pipeline import clean_output as co
from c4forge.pipeline import clean_stats as cs
from c4forge.pipeline import progress as pg
from c4forge.pipeline.inputs import InputFile, inputs_block, resolve_inputs
from c4forge.pipeline.progress_bar import FileProgress

MANIFEST_NAME = "_c4forge_shards.json"
FUNNEL_NAME = "funnel.png"
SUPPORTED_LANGUAGES = ("en",)  # D5: the language is a parameter; only English has resources


def validate_args(args: argparse.Namespace) -> dict[str, Any]:
    """Option checks that need no input; returns the parsed shard options."""
    if args.language not in SUPPORTED_LANGUAGES:
        raise ConfigError(
            f"--language {args.language!r} is not supported yet (available: "
            f"{', '.join(SUPPORTED_LANGUAGES)}); multilingual mode is a planned extension (D5)"
        )
    if not 0.0 <= args.badwords_fraction <= 1.0:
        raise ConfigError(f"--badwords-fraction must be in [0, 1], got {args.badwords_fraction}")
    if args.max_record_bytes < 1:
        raise ConfigError(f"--max-record-bytes must be positive, got {args.max_record_bytes}")
    if args.workers is not None and args.workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {args.workers}")
    if args.near_dedup != "none":
        from c4forge.filters.minhash import make_params

        make_params(args.ngram, args.num_perm, args.threshold)  # ConfigError on bad values
    runner = (args.runner or "").rsplit(".", 1)[-1].lower()  # Beam's names are case-blind
    if runner in ("dataflow", "dataflowrunner") and "://" not in co.local_output(args.output):
        raise ConfigError(
            f"--output {args.output!r} is a local path, but Dataflow workers cannot write to "
            "this machine; use a gs:// folder"
        )
    return {
        "train": co.parse_shards_option(args.train_shards, "--train-shards"),
        "validation": co.parse_shards_option(args.validation_shards, "--validation-shards"),
    }


def build_pipeline(
    p: Any,
    files: list[InputFile],
    args: argparse.Namespace,
    shard_options: dict,
    progress_dir: str | None = None,
    chunks: list[pg.Chunk] | None = None,
):
    """Wire the stages of c4_rules.md §1 into ``p``; returns the per-shard stats PCollection.

    ``chunks`` (one input file each): run the front resumably (``FrontFn``)."""
    import apache_beam as beam

    from c4forge.pipeline import clean_transforms as ct

    keep_sentences = args.dedup == "spans"
    if chunks is not None:
        inputs: list = chunks
        front: beam.DoFn = ct.FrontFn(
            args.output, args.max_record_bytes, args.input_format, keep_sentences, progress_dir
        )
    else:
        inputs = [f.path for f in files]
        front = ct.PlainFrontFn(
            args.max_record_bytes, progress_dir, args.input_format, keep_sentences
        )
    docs = (
        p
        | "Inputs" >> beam.Create(inputs)
        | "SpreadFiles" >> beam.Reshuffle()
        | "front" >> ct.FrontThenUrlDedup(front)
    )
    if args.dedup == "spans":
        docs = docs | "dedup" >> ct.DedupSpans()
    elif args.dedup == "lines":
        docs = docs | "dedup" >> ct.DedupLines()
    if args.near_dedup == "minhash":  # issue 5: MinHash-LSH after exact dedup, before langid
        from c4forge.filters.minhash import make_params
        from c4forge.pipeline.near_dedup_beam import add_near_dedup

        docs = add_near_dedup(docs, make_params(args.ngram, args.num_perm, args.threshold))
    shards = (
        docs
        | "langid" >> beam.ParDo(ct.LangidFn(args.language))
        | "badwords" >> beam.ParDo(ct.BadwordsFn(args.language, args.badwords_fraction))
        | "split" >> beam.ParDo(ct.SplitFn())
        | "output" >> ct.WriteShards(args.output, args.format, shard_options)
    )
    manifest = storage.join(args.output, MANIFEST_NAME)
    _ = (
        shards
        | "CollectShardStats" >> beam.combiners.ToList()
        | "WriteManifest" >> beam.Map(ct.write_manifest, manifest)
    )
    return shards


_BEAM_SUFFIX = re.compile(r"\s*\[while running '[^']*'\]\s*$")
_REMOTE_ERROR = re.compile(r"c4forge\.errors\.(\w+): (.+)")


def user_error_from(err: BaseException) -> C4ForgeError | None:
    """The c4forge error (bad input file …) behind a pipeline failure, without Beam's wrapping.

    In-process runners re-raise the DoFn's exception type with "[while running 'step']"
    appended; process-based runners (and Dataflow) raise a RuntimeError whose text holds the
    worker's traceback. Either way the user should see one line naming the file.
    """
    seen: set[int] = set()
    e: BaseException | None = err
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, C4ForgeError):
            return type(e)(_BEAM_SUFFIX.sub("", str(e)))
        e = e.__cause__ or e.__context__
    matches = _REMOTE_ERROR.findall(str(err))
    if matches:
        name, message = matches[-1]
        cls = getattr(errors, name, None)
        if isinstance(cls, type) and issubclass(cls, C4ForgeError):
            return cls(_BEAM_SUFFIX.sub("", message.strip()))
    return None


def _write_text(path: str, text: str) -> None:
    with storage.atomic_writer(path) as f:
        f.write(text.encode("utf-8"))


def _start_work(
    args: argparse.Namespace, files: list[InputFile], config: dict
) -> tuple[pg.WorkDir, list[pg.Chunk] | None]:
    """The ``_work`` folder of this run: with ``--resume`` its one-file chunks (continuing an
    interrupted run of the same job if there is one); without, a stale one is removed."""
    work = pg.WorkDir(args.output, pg.BEAM_DATA_SUFFIX)
    if not args.resume:
        work.remove()  # local folder, or every object under the remote prefix
        return work, None
    chunks = pg.plan_chunks(files, 1)  # one pipeline; per-file steps spread over the workers
    job = {"engine": "beam", "config": config, "inputs": [c.describe() for c in chunks]}
    resumed = work.start(job, resume=True)
    if not args.quiet:
        what = "continuing the interrupted run in" if resumed else "recording progress in"
        print(f"  --resume: {what} {work.root}", file=sys.stderr)
    return work, chunks


def run_clean_beam(args: argparse.Namespace, extra: list[str]) -> int:
    from c4forge.pipeline import summary
    from c4forge.pipeline.beam_options import make_runner, quiet_beam_logging

    quiet_beam_logging()
    started = time.monotonic()
    shard_options = validate_args(args)
    args.output = co.local_output(args.output)
    storage.use_pipeline_options(extra)  # S3 endpoint/credentials for the driver's own calls
    files = resolve_inputs(args.inputs, args.input_format)
    inputs = inputs_block(files)
    config = cs.make_config(args)
    stats_path = storage.join(args.output, cs.STATS_NAME)

    if cs.finished_run(args, stats_path, config, inputs, summary):
        return 0
    co.remove_files(args.output, [FUNNEL_NAME])  # a chart of an older run would mislead
    if "://" not in args.output:
        if os.path.exists(args.output) and not os.path.isdir(args.output):
            raise ConfigError(f"--output {args.output!r} exists and is not a folder")
        os.makedirs(args.output, exist_ok=True)

    choice = make_runner(args.runner, args.workers, extra)
    if not args.quiet:
        print(
            f"c4forge clean: {inputs['count']} input file(s), {summary.human_bytes(inputs['bytes'])}"
            f" → {args.output} [dedup={args.dedup}, runner={choice.description}]",
            file=sys.stderr,
        )
    work, chunks = _start_work(args, files, config)

    import apache_beam as beam

    pipeline = beam.Pipeline(runner=choice.runner, options=choice.options)
    with FileProgress(len(files), enabled=choice.local and not args.quiet) as progress:
        build_pipeline(pipeline, files, args, shard_options, progress.directory, chunks)
        try:
            result = pipeline.run()
            result.wait_until_finish()
        except Exception as err:
            user_error = user_error_from(err)
            if user_error is not None:
                raise user_error from None
            raise
    state = str(getattr(result, "state", "DONE"))
    if "DONE" not in state:
        raise VerificationError(f"the pipeline ended in state {state}")

    from c4forge.pipeline import clean_transforms as ct

    raw_counters, source = cs.counters_from_metrics(result)
    resume_counts = raw_counters.pop(pg.RESUME_NAMESPACE, {})  # progress, not a filter stage
    if args.resume and not args.quiet:
        print(
            f"  --resume: {resume_counts.get('skipped', 0)} input(s) done by an earlier run, "
            f"skipped; {resume_counts.get('processed', 0)} processed now",
            file=sys.stderr,
        )
    near = args.near_dedup != "none"
    counters = cs.full_counters(raw_counters, args.dedup, near)
    manifest_path = storage.join(args.output, MANIFEST_NAME)
    split_docs = {s: raw_counters.get("split", {}).get(s, 0) for s in co.SPLITS}
    shard_stats = ct.write_empty_shards(
        args.output,
        args.format,
        json.loads(storage.read_bytes(manifest_path)),
        split_docs,
        shard_options,
    )
    counts = {s: sum(1 for x in shard_stats if x["split"] == s) for s in co.SPLITS}
    outputs = cs.outputs_block(shard_stats, counts)
    written = {x["file"] for x in shard_stats}
    co.remove_files(args.output, [n for n in co.list_shard_files(args.output) if n not in written])

    stats = cs.make_stats(config, inputs, counters, outputs, args.dedup, near)
    if stats["conservation_errors"]:
        raise VerificationError(
            "the counters do not add up (a page was lost without a reason): "
            + "; ".join(stats["conservation_errors"])
        )
    _write_text(stats_path, cs.stats_text(stats))  # last: its presence means "complete"
    co.remove_files(args.output, [MANIFEST_NAME])
    work.finish()

    wall = time.monotonic() - started
    if args.report:
        from c4forge.pipeline.funnel_chart import write_funnel_png

        png = write_funnel_png(stats, storage.join(args.output, FUNNEL_NAME))
    else:
        png = None
    if not args.quiet:
        print(summary.render(stats, args.output, wall, choice.description, source, png))
    return 0
