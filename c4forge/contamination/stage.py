"""The clean plan's ``decontaminate`` stage (after dedup and near-dedup, before language ID):
a document sharing a word n-gram with an evaluation example is removed, counted
``contaminated`` and ``contaminated:<benchmark>`` (the first benchmark, in the order given,
that it matches); others count ``passed``. The index is the stage's broadcast resource."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from c4forge.corpus.counting import Count, Flow
from c4forge.corpus.stages import StageJob

STAGE = "decontaminate"
FLOW = Flow(
    ("contaminated",),
    ("passed",),
    title="decontamination (eval n-grams)",
    detail="by benchmark",
    breakdown="contaminated:",  # contaminated:<benchmark>
)


def decontaminate(doc: Any, count: Count, index: Any) -> Iterator[Any]:
    from c4forge.corpus.drop_samples import sample

    pos = index.first_match(doc.text)
    if pos is None:
        count(STAGE, "passed")
        yield doc
        return
    name = index.names[pos]
    count(STAGE, "contaminated")
    count(STAGE, f"contaminated:{name}")
    sample(count, STAGE, f"contaminated:{name}", doc.text, doc.url)


def stage(job: StageJob) -> Any:
    """``--decontaminate``: after exact and near dedup, before language ID. The n-gram index
    is built once on the driver and travels with the plan (a broadcast resource)."""
    from c4forge.corpus.stages import BroadcastMapStage

    if not job.decontaminate:
        return None
    index = job.benchmarks[0]
    index = index.without_owners() if index is not None else None  # None: recorded_plan
    return BroadcastMapStage(STAGE, decontaminate, index, flow=FLOW)
