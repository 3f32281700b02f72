"""The skeleton every driver of an engine job shares (`clean`, `shards`): pick the engine,
hold it for the run, say what the run does, commit the folder's completion file last.

What stays in each driver is its own: what the output folder holds before (finished, resumable,
fresh), the plan or build it hands the engine, and what the completion file says. Knowing no
stage, this sits beside the engines; a new engine-run command's driver is these calls around
its own work:

    with job_engine(job, engine, lambda j: choose_engine(j, input_bytes)) as (job, engine, why):
        log(job, f"… [{engine_label(engine, why)}]")
        … run …
        log_resume(job, "… reused; … built now")
    commit_last(output, lambda: write the completion file)
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from c4forge.engines.choose import EngineRequest, choose, make_engine
from c4forge.io import ownership

J = TypeVar("J", bound="EngineJob")


class EngineJob(EngineRequest, Protocol):
    """What the skeleton reads of a job besides what building its engine reads (``CleanJob``
    and ``ShardsJob`` are such requests)."""

    quiet: bool
    resume: bool

    def replace(self, **changes: Any) -> Any: ...


def log(job: EngineJob, msg: str) -> None:
    """A progress line on stderr (none with ``--quiet``)."""
    if not job.quiet:
        print(msg, file=sys.stderr, flush=True)


def log_resume(job: EngineJob, msg: str) -> None:
    """A ``  --resume: …`` line, only when the run was asked to resume."""
    if job.resume:
        log(job, f"  --resume: {msg}")


def choose_engine(job: J, input_bytes: Callable[[], int]) -> tuple[J, str]:
    """``--engine auto`` → the job with the engine it runs on, and why (for the first log
    line; empty when the engine was named). ``input_bytes`` is asked only when the size can
    matter: no Beam runner and no Beam options given (``engines.choose``'s policy)."""
    if job.engine != "auto":
        return job, ""
    size = 0 if job.runner or job.passthrough else input_bytes()
    engine, why = choose(job.engine, job.runner, job.passthrough, size)
    return job.replace(engine=engine), why


@contextlib.contextmanager
def job_engine(
    job: J, engine: Any, pick: Callable[[J], tuple[J, str]]
) -> Iterator[tuple[J, Any, str]]:
    """``(job, engine, why)`` for the run: ``engine`` as given (the caller's, left open), or
    the job's own, chosen by ``pick``, built, and closed when the run ends, however it ends.
    A failure inside the engine's own wrapping (a worker's c4forge error, a task whose every
    attempt failed) leaves as the c4forge error behind it (``engines.errors``): one line."""
    if engine is not None:
        with _user_errors():
            yield job, engine, ""
        return
    job, why = pick(job)
    own = make_engine(job)
    try:
        with _user_errors():
            yield job, own, why
    finally:
        own.close()


@contextlib.contextmanager
def _user_errors() -> Iterator[None]:
    from c4forge.engines.errors import user_error_from
    from c4forge.errors import C4ForgeError

    try:
        yield
    except C4ForgeError:
        raise
    except Exception as err:
        user_error = user_error_from(err)
        if user_error is not None:
            raise user_error from None
        raise


def engine_label(engine: Any, why: str) -> str:
    """``engine=local (4 worker processes, …) (auto: …)``: the engine in the first log line
    (Beam's as ``runner=…``), and why it was chosen."""
    return f"{engine.tag}={engine.description}{f' ({why})' if why else ''}"


def commit_last(output: str, write: Callable[[], Any]) -> Any:
    """Write the file whose presence marks ``output`` complete, last, and only while this run
    still owns the folder (one taken over meanwhile commits nothing: ``ownership``)."""
    ownership.check_owner(output)
    return write()
