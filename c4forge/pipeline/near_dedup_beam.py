"""MinHash-LSH near-dedup (``--near-dedup minhash``) as Beam transforms over cleaned pages.

The rules are the pure functions of ``c4forge.filters.minhash``; this module only wires them
into shuffles, so the Spark driver (``clean_spark.near_dedup_rdd``) and Beam decide the same.
Every step holds at most one key's values: one LSH bucket, one candidate pair, one graph node's
neighbours. Nothing is collected to one worker.

Beam graphs cannot loop on data, so the large-star/small-star rounds are unrolled
(``max_rounds``, default ``BEAM_ROUNDS`` = 10: a path of 1,000 chained near-copies needs 10;
MinHash components are far more compact). A round on a converged graph changes nothing; nodes
still unfinished after the last round are counted ``near_dedup.unconverged`` (the Spark driver
loops until convergence, up to ``minhash.MAX_ROUNDS``).

Hook (in ``clean_beam.build_pipeline``, after the exact dedup and before langid)::

    if args.near_dedup == "minhash":
        from c4forge.filters.minhash import make_params
        from c4forge.pipeline.near_dedup_beam import add_near_dedup

        docs = add_near_dedup(docs, make_params(args.ngram, args.num_perm, args.threshold))

``docs`` are the job's ``Doc`` tuples (anything with ``.url`` and ``.text``); the result is the
same PCollection type minus the removed pages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import apache_beam as beam

from c4forge.filters import minhash as mh
from c4forge.pipeline.clean_transforms import CountingDoFn

BEAM_ROUNDS = 10


class BandEntriesFn(beam.DoFn):
    def __init__(self, params: mh.MinHashParams) -> None:
        self.params = params

    def process(self, doc: Any) -> Iterator[tuple[bytes, tuple[str, bytes]]]:
        sig = mh.signature(doc.text, self.params)
        if sig is not None:
            yield from mh.band_entries(mh.node_id(doc.url), sig, self.params)


class PairEdgeFn(CountingDoFn):
    def process(self, element: tuple[tuple[str, str], bool]) -> Iterator[tuple[str, str]]:
        pair, ok = element
        yield from mh.pair_edge(pair, [ok], self.count)


class UnconvergedFn(CountingDoFn):
    def process(self, element: tuple[str, Iterable[str]]) -> Iterator[None]:
        node, nbrs = element
        if not mh.is_star_node(node, nbrs):
            self.count(mh.STAGE, "unconverged")
        return iter(())


class MarkRemovedFn(CountingDoFn):
    def process(self, element: tuple[str, dict]) -> Iterator[Any]:
        _, joined = element
        removed = bool(list(joined["removed"]))
        for doc in joined["doc"]:  # one page per node (URLs are unique after URL dedup)
            if removed:
                self.count(mh.STAGE, "removed")
            else:
                self.count(mh.STAGE, "passed")
                yield doc


def _canonical(edges, label: str):
    return (
        edges
        | f"{label}Canonical" >> beam.Map(mh.canonical)
        | f"{label}DropLoops" >> beam.Filter(lambda e: e is not None)
    )


def _star_step(edges, label: str, prep, star):
    out = (
        edges
        | f"{label}Emit" >> beam.FlatMap(prep)
        | f"{label}Group" >> beam.GroupByKey()
        | f"{label}Star" >> beam.FlatMapTuple(star)
    )
    return _canonical(out, label)


class StarComponents(beam.PTransform):
    """Edges → star edges ``(leaf, component minimum)`` after ``rounds`` unrolled rounds."""

    def __init__(self, rounds: int) -> None:
        super().__init__()
        self.rounds = rounds

    def expand(self, edges):
        current = _canonical(edges, "Input") | "InputDistinct" >> beam.Distinct()
        for r in range(self.rounds):
            large = _star_step(current, f"Large{r}", mh.large_star_input, mh.large_star)
            small = _star_step(large, f"Small{r}", mh.small_star_input, mh.small_star)
            current = small | f"Distinct{r}" >> beam.Distinct()
        _ = (
            current
            | "CheckEmit" >> beam.FlatMap(mh.large_star_input)
            | "CheckGroup" >> beam.GroupByKey()
            | "CheckStars" >> beam.ParDo(UnconvergedFn())
        )
        return current


class NearDedup(beam.PTransform):
    def __init__(self, params: mh.MinHashParams, max_rounds: int = BEAM_ROUNDS) -> None:
        super().__init__()
        self.params = params
        self.max_rounds = max_rounds

    def expand(self, docs):
        params = self.params
        edges = (
            docs
            | "Bands" >> beam.ParDo(BandEntriesFn(params))
            | "GroupByBand" >> beam.GroupByKey()
            | "BucketPairs"
            >> beam.FlatMapTuple(lambda _k, members: mh.bucket_pairs(members, params))
            | "DistinctPairs" >> beam.CombinePerKey(any)
            | "VerifiedEdges" >> beam.ParDo(PairEdgeFn())
        )
        stars = edges | "Components" >> StarComponents(self.max_rounds)
        removed = (
            stars
            | "Leaves" >> beam.Map(mh.removed_node)
            | "DistinctLeaves" >> beam.Distinct()
            | "KeyLeaves" >> beam.Map(lambda n: (n, True))
        )
        keyed = docs | "KeyByNode" >> beam.Map(lambda d: (mh.node_id(d.url), d))
        return (
            {"doc": keyed, "removed": removed}
            | "JoinRemoved" >> beam.CoGroupByKey()
            | "DropRemoved" >> beam.ParDo(MarkRemovedFn())
        )


def add_near_dedup(pages_pcoll, params: mh.MinHashParams, max_rounds: int = BEAM_ROUNDS):
    """The pages minus near-duplicates (one survivor per component: smallest md5(url))."""
    return pages_pcoll | "near_dedup" >> NearDedup(params, max_rounds)
