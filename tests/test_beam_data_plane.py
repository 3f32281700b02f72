"""c4forge's local Beam runner (FnApiRunner, 2 worker processes) runs its data plane without
Beam's flush timer.

Why: Beam 2.77's runner-side data streams flush on a timer thread that can wipe a chunk
written between its ``get()`` and ``_clear()`` (``data_plane.TimeBasedBufferingClosableOutputStream``):
whole elements lost without an error when a transfer to a worker outlasts the timer. The
timer is forced to 5 ms here (it is 1,000 ms by default, so only large transfers hit it) and a
real two-process pipeline is run through ``beam_options.make_runner``; every data servicer the
run builds must have the timer off, every element must arrive, and the forced value must be
back afterwards (the setting is the run's, not the process's).
"""

from __future__ import annotations

import os
from pathlib import Path

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.metrics.metric import MetricsFilter
from apache_beam.runners.portability.fn_api_runner import worker_handlers
from apache_beam.runners.worker import data_plane

from c4forge.engines.beam_options import make_runner

FORCED_MS = 5
ELEMENTS = 400


class _Seen(beam.DoFn):
    def setup(self) -> None:
        self.seen = Metrics.counter("test", "seen")

    def process(self, element: str):
        self.seen.inc()
        yield len(element)


def test_two_worker_run_has_no_flush_timer(monkeypatch) -> None:
    monkeypatch.setattr(worker_handlers, "DATA_BUFFER_TIME_LIMIT_MS", FORCED_MS)
    # the worker processes unpickle ``_Seen`` from this module: put its folder on their path
    here = str(Path(__file__).parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, os.environ.get("PYTHONPATH", "")]))
    limits: list[int] = []
    original = data_plane.BeamFnDataServicer.__init__

    def recording(self, data_buffer_time_limit_ms=0):  # noqa: ANN001, ANN202 - Beam's signature
        limits.append(data_buffer_time_limit_ms)
        original(self, data_buffer_time_limit_ms)

    monkeypatch.setattr(data_plane.BeamFnDataServicer, "__init__", recording)
    choice = make_runner(None, 2, [])
    pipeline = beam.Pipeline(runner=choice.runner, options=choice.options)
    _ = (
        pipeline
        | beam.Create(range(ELEMENTS))
        | "spread" >> beam.Reshuffle()  # the runner holds the elements, then sends them on
        | beam.Map(lambda i: str(i) * 2000)
        | "again" >> beam.Reshuffle()
        | beam.ParDo(_Seen())
    )
    result = pipeline.run()
    result.wait_until_finish()
    seen = sum(
        m.committed for m in result.metrics().query(MetricsFilter().with_name("seen"))["counters"]
    )
    assert limits, "the two-worker run built no gRPC data servicer"
    assert limits == [0] * len(limits), f"data servicers built with a flush timer: {limits}"
    assert seen == ELEMENTS
    assert worker_handlers.DATA_BUFFER_TIME_LIMIT_MS == FORCED_MS
