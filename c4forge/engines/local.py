"""The in-process engine: the plan over Python lists, one process, no shuffle service.

Why: tests and benchmarks compare Beam and Spark with *this* run of the same plan (not with a
hand-written copy of the stage order), and a small corpus can be cleaned without starting
either. Memory grows with the corpus: it is for samples, not for Common Crawl.

Every primitive runs eagerly over its whole input, so ``seconds`` (CPU time per stage, keyed
by the first part of the step label: ``wet``, ``clean``, ``dedup`` …) is the stage profile
``benchmarks/clean.py`` prints.
"""

from __future__ import annotations

import contextlib
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from c4forge.engines.base import Engine, Fn
from c4forge.filters.counting import CounterBag


def _grouped(pairs: list[tuple[Any, Any]]) -> dict[Any, list[Any]]:
    out: dict[Any, list[Any]] = {}
    for k, v in pairs:
        out.setdefault(k, []).append(v)
    return out


class LocalEngine(Engine):
    name = "local"
    description = "in-process (local engine)"
    counter_source = "exact"

    def __init__(self, job: Any = None) -> None:
        self.bag = CounterBag()
        self.seconds: dict[str, float] = defaultdict(float)

    @contextlib.contextmanager
    def _timed(self, label: str) -> Iterator[None]:
        start = time.process_time()
        try:
            yield
        finally:
            self.seconds[label.split("/", 1)[0]] += time.process_time() - start

    def source(self, label: str, items: list[Any], fn: Fn) -> list[Any]:
        with self._timed(label):
            return [out for item in items for out in fn(item, self.bag)]

    def flat_map(self, coll: list[Any], label: str, fn: Fn) -> list[Any]:
        with self._timed(label):
            return [out for item in coll for out in fn(item, self.bag)]

    def group(self, coll: list[Any], label: str, fn: Fn) -> list[Any]:
        with self._timed(label):
            return [out for k, vs in _grouped(coll).items() for out in fn(k, vs, self.bag)]

    def combine(self, coll: list[Any], label: str, fn: Fn) -> list[Any]:
        with self._timed(label):
            return [(k, fn(vs)) for k, vs in _grouped(coll).items()]

    def cogroup(self, label: str, left: list[Any], right: list[Any], fn: Fn) -> list[Any]:
        with self._timed(label):
            lefts, rights = _grouped(left), _grouped(right)
            keys = list(dict.fromkeys([*lefts, *rights]))
            bag = self.bag
            return [out for k in keys for out in fn(k, lefts.get(k, []), rights.get(k, []), bag)]

    def distinct(self, coll: list[Any], label: str) -> list[Any]:
        with self._timed(label):
            return list(dict.fromkeys(coll))

    def loop(self, coll: list[Any], label: str, body: Fn, rounds: int) -> list[Any]:
        current = coll
        for r in range(rounds):
            nxt = body(self, current, f"{label}{r}")
            if set(nxt) == set(current):
                return nxt
            current = nxt
        return current

    def drain(self, coll: list[Any], label: str) -> None:
        return None  # lists are computed eagerly: the counters are already in the bag

    def write_shards(self, coll: list[tuple[str, Any]], job: Any) -> list[dict]:
        from c4forge.clean import output as co

        with self._timed("output"):
            by_split = _grouped(coll)
            counts = co.shard_counts({k: len(v) for k, v in by_split.items()}, job.output_options)
            stats = []
            for split, n in counts.items():
                docs = by_split.get(split, [])
                shards = _grouped([(co.shard_of(d.url_md5, n), d) for d in docs])
                for i in range(n):
                    stats.append(
                        co.write_shard(job.output, split, i, n, shards.get(i, []), job.format)
                    )
            return stats

    def counters(self) -> dict[str, dict[str, int]]:
        return self.bag.counts

    def documents(self, plan: Any, job: Any, files: list[Any]) -> list[tuple[str, Any]]:
        """The plan's ``(output key, OutDoc)`` pairs without writing shards (tests, benchmarks):
        the chunk files go to ``job.output/_work`` and are removed afterwards."""
        from c4forge.clean import passes
        from c4forge.clean import progress as pg

        chunks = pg.plan_chunks(files, self.chunk_files(job))
        work = pg.WorkDir(job.output)
        work.start({"engine": self.name}, resume=False)
        try:
            return passes.documents(self, plan, job, chunks)
        finally:
            work.finish()
