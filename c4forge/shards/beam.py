"""The shard build as a Beam pipeline (the only module of ``c4forge.shards`` that imports Beam).

    one element per clean shard file
      → BuildRows (vocabulary loaded once per worker in setup): rows of the clean shard
        (``rows.clean_shard_rows``), its counters saved to _progress/_clean/
      → AssignShards: blocks split by output shard = key % num_shards (finished ones dropped)
      → GroupByKey((split, shard))
      → WriteShard: ``rows.write_one_shard`` (sorted, atomic, then its progress record)

With ``--rows-per-shard`` the shard count depends on the row total: a side input.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import replace
from typing import Any

from c4forge.pipeline.beam_options import quiet_beam_logging

quiet_beam_logging()  # before Beam's import: it logs "apitools not found" on import

import apache_beam as beam  # noqa: E402

from c4forge.formats import shards as fmt  # noqa: E402
from c4forge.shards.job import ShardsBuild  # noqa: E402
from c4forge.shards.rows import (  # noqa: E402
    Block,
    clean_shard_rows,
    count_block,
    empty_stats,
    save_clean_stats,
    split_by_shard,
    write_one_shard,
)


class BuildRows(beam.DoFn):
    """(split, clean file) → (split, Block) per chunk; its counters go to _progress/_clean/."""

    def __init__(self, build: ShardsBuild) -> None:
        self.build = build
        self.vocab: Any = None

    def setup(self) -> None:
        # Once per worker: the model bytes came with the build, no shared filesystem needed.
        from c4forge.vocab.vocab import Vocabulary

        vocab = Vocabulary.__new__(Vocabulary)
        vocab.__setstate__(self.build.vocab_state)
        self.vocab = vocab

    def process(self, element: tuple[str, str]) -> Iterator[tuple[str, Block]]:
        split, path = element
        stats = empty_stats(self.build.objective)
        for block in clean_shard_rows(self.build, self.vocab, path, stats):
            count_block(stats, block, self.build.schema)
            yield split, block
        save_clean_stats(self.build, split, path, stats)


class AssignShards(beam.DoFn):
    """Split a block by output shard (key % count); drop rows of shards already finished."""

    def __init__(self, skip: frozenset[str]) -> None:
        self.skip = skip

    def process(self, element: tuple[str, Block], counts: dict[str, int]) -> Iterator[Any]:
        split, block = element
        count = counts.get(split, 1)
        for shard, sub in split_by_shard(block, count):
            if fmt.shard_file_name(split, shard, count) not in self.skip:
                yield (split, shard, count), sub


class WriteShard(beam.DoFn):
    def __init__(self, build: ShardsBuild) -> None:
        self.build = build

    def process(self, element: tuple[tuple[str, int, int], Iterable[Block]]) -> Iterator[str]:
        (split, index, count), blocks = element
        yield write_one_shard(self.build, split, index, count, blocks)["file"]


def build_pipeline(pipeline: Any, build: ShardsBuild, skip: frozenset[str]) -> None:
    """Attach the build to ``pipeline``; ``skip`` = shard names already finished."""
    inputs = [(s, p) for s in build.splits for p in build.clean_files[s]]
    # Workers never write the vocabulary copy (the driver does): leave its bytes out.
    build = replace(build, vocab_files=())
    blocks = (
        pipeline
        | "CleanShards" >> beam.Create(inputs)  # reshuffled: clean shards spread over workers
        | "BuildRows" >> beam.ParDo(BuildRows(build))
    )
    if build.rows_per_shard is None:
        counts: Any = dict(build.num_shards or {})
    else:
        rps = build.rows_per_shard
        counts = beam.pvalue.AsDict(
            blocks
            | "RowsPerSplit" >> beam.Map(lambda kv: (kv[0], kv[1].rows))
            | "SumRows" >> beam.CombinePerKey(sum)
            | "ShardCount" >> beam.MapTuple(lambda split, n: (split, max(1, math.ceil(n / rps))))
        )
    _ = (
        blocks
        | "AssignShards" >> beam.ParDo(AssignShards(skip), counts)
        | "GroupByShard" >> beam.GroupByKey()
        # The writers never tokenize: leave the model bytes out of what Beam pickles for them.
        | "WriteShards" >> beam.ParDo(WriteShard(replace(build, vocab_state={})))
    )


def run_pipeline(build: ShardsBuild, skip: frozenset[str]) -> str:
    """The engine of ``driver.run_job``: run the pipeline; returns the runner's description.
    A c4forge error raised in a worker reaches the caller as itself, not wrapped by Beam."""
    from c4forge.engines.errors import user_error_from
    from c4forge.pipeline.beam_options import make_runner

    job = build.job
    choice = make_runner(job.runner, job.workers, list(job.pipeline_args))
    try:
        with beam.Pipeline(runner=choice.runner, options=choice.options) as p:
            build_pipeline(p, build, skip)
    except Exception as err:
        user_error = user_error_from(err)
        if user_error is not None:
            raise user_error from err
        raise
    return choice.description
