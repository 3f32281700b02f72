"""The c4forge error behind an engine failure, without the engine's wrapping (one copy, for
every engine and job)."""

from __future__ import annotations

import re

from c4forge import errors
from c4forge.errors import C4ForgeError

_BEAM_SUFFIX = re.compile(r"\s*\[while running '[^']*'\]\s*$")
_REMOTE_ERROR = re.compile(r"c4forge\.errors\.(\w+): (.+)")
# Spark gave up on a task: "Task 2 in stage 16.0 failed 4 times, most recent failure: Lost task
# 2.3 in stage 16.0 (TID 46) (host executor driver): org.apache.spark.SparkException: <why>"
_SPARK_TASK_FAILED = re.compile(
    r"Task (\S+) in stage (\S+) failed (\d+) times?, most recent failure: [^:]*: "
    r"(?:[\w.$]+(?:Exception|Error): )?([^\n]*)"
)


def user_error_from(err: BaseException) -> C4ForgeError | None:
    """The c4forge error (bad input file …) behind a pipeline failure, or None.

    In-process Beam runners re-raise the DoFn's exception type with "[while running 'step']"
    appended; process-based runners, Dataflow and Spark (a Py4JJavaError) raise an error whose
    text holds the worker's traceback. Either way the user should see one line naming the file.
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
    spent = _SPARK_TASK_FAILED.search(str(err))
    if spent:  # every attempt of a task failed without a c4forge error (its worker died)
        task, stage, attempts, why = spent.groups()
        why = why.split(". ")[0].strip().rstrip(".")
        return errors.TaskFailedError(
            f"Spark task {task} of stage {stage} failed {attempts} time(s), the last: {why} "
            "(killed, out of memory?); the finished work is kept: rerun with --resume"
        )
    return None
