"""The local engine's worker processes: a task whose worker dies is run again.

Why not ``multiprocessing.Pool``: when one of its workers is killed (SIGKILL from the OOM
killer, a ``kill -9``), the pool starts a new worker but the task it was running is lost and
its result never arrives, so the run hangs for ever. Here each worker runs one task at a time
and the driver knows which: a worker that dies is replaced and its task queued again, at most
``attempts`` times in all (``C4FORGE_TASK_ATTEMPTS``, default 4: Spark's
``spark.task.maxFailures``), as Spark and Dataflow retry a task or bundle. A task that raises
is retried the same way, except for a c4forge error (bad input, a refused option: the same
again on every attempt), which ends the run at once. When the attempts are spent the run
stops with one line naming the step and the cause (a death, an ``OSError``: a full disk, a
failed upload); what was finished stays in ``_work/`` for ``--resume``. Any other exception
is a bug: its traceback, as before.

A re-run is safe because every task writes its output under a name of its own, atomically
(``storage.atomic_writer`` or the engine's own partition files, rewritten whole), with the same
bytes on every attempt.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import traceback
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from c4forge.errors import C4ForgeError, ConfigError, TaskFailedError

ATTEMPTS_ENV = "C4FORGE_TASK_ATTEMPTS"
DEFAULT_ATTEMPTS = 4

Task = tuple[Callable[..., Any], tuple]


def task_attempts() -> int:
    """Attempts per task (``C4FORGE_TASK_ATTEMPTS``, at least 1)."""
    text = os.environ.get(ATTEMPTS_ENV, "")
    try:
        value = int(text) if text else DEFAULT_ATTEMPTS
    except ValueError:
        raise ConfigError(f"{ATTEMPTS_ENV}={text!r} is not a whole number") from None
    if value < 1:
        raise ConfigError(f"{ATTEMPTS_ENV}={value}: a task needs at least one attempt")
    return value


def _serve(conn: Any) -> None:
    """A worker: run tasks from ``conn`` until it is closed, answering each with its result
    or its exception (the traceback's text when the exception does not pickle)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    parent = os.getppid()
    while True:
        try:
            while not conn.poll(1.0):
                if os.getppid() != parent:  # the driver was killed (kill -9): do not linger
                    return
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:  # the driver's stop (a closed pipe is not seen: later workers
            return  # forked from the driver hold copies of its end)
        index, fn, args = message
        try:
            reply: tuple = ("ok", index, fn(*args))
        except BaseException as err:  # noqa: BLE001 - every failure goes back to the driver
            reply = ("err", index, err, traceback.format_exc())
        try:
            conn.send(reply)
        except Exception as err:  # an unpicklable result or exception
            conn.send(("err", index, RuntimeError(repr(err)), traceback.format_exc()))


class _Worker:
    def __init__(self, ctx: Any) -> None:
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.task: int | None = None

    def stop(self) -> None:
        if self.process.is_alive():
            with contextlib.suppress(OSError):
                self.conn.send(None)
        self.conn.close()
        self.process.join(5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()


def _death(exitcode: int | None) -> str:
    if exitcode is not None and exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        return f"killed by {name}" + (" (out of memory?)" if name == "SIGKILL" else "")
    return f"exited with status {exitcode}"


def _stop_workers(workers: list[_Worker]) -> None:
    for w in workers:
        w.stop()
    workers.clear()


class TaskPool:
    """``workers`` forked processes running tasks; ``run`` returns their results in order."""

    def __init__(
        self,
        workers: int,
        attempts: int | None = None,
        fork_lock: Callable[[], Any] = contextlib.nullcontext,
    ) -> None:
        import multiprocessing

        self.ctx = multiprocessing.get_context("fork")
        self.fork_lock = fork_lock  # held while a worker forks (no other thread's lock copied)
        self.size = workers
        self.attempts = attempts or task_attempts()
        self.workers: list[_Worker] = []
        self.retried = 0  # attempts re-run, over the pool's life (a test reads it)
        # a pool dropped without ``close`` (an engine its caller never closed) still stops its
        # workers when it is collected, or at exit: idle forked copies of the driver would
        # otherwise wait for its death, each holding memory (the list is only changed in place)
        self._finalizer = weakref.finalize(self, _stop_workers, self.workers)

    def run(
        self,
        label: str,
        tasks: list[Task],
        extra: tuple = (),
        on_done: Callable[[], None] | None = None,
    ) -> list[Any]:
        """Every task's result, in task order; ``on_done()`` as each task finishes."""
        from multiprocessing.connection import wait

        results: list[Any] = [None] * len(tasks)
        remaining = len(tasks)
        failures = [0] * len(tasks)
        queue = deque(range(len(tasks)))
        while len(self.workers) < min(self.size, len(tasks)):
            self.workers.append(self._start())
        busy: dict[int, _Worker] = {}
        try:
            while remaining:
                for i in range(len(self.workers)):
                    if self.workers[i].task is None and queue:
                        self._dispatch(i, queue, tasks, extra, busy)
                ready = set(wait([x for w in busy.values() for x in (w.conn, w.process.sentinel)]))
                for index, w in list(busy.items()):
                    reply = None
                    if w.conn in ready:
                        try:
                            reply = w.conn.recv()
                        except (EOFError, OSError):
                            reply = None
                        except Exception as e:  # bytes that do not unpickle
                            reply = ("err", index, RuntimeError(f"unreadable reply: {e!r}"), "")
                    elif w.process.sentinel not in ready:
                        continue
                    del busy[index]
                    w.task = None
                    if reply is not None and reply[0] == "ok":
                        results[index] = reply[2]
                        remaining -= 1
                        if on_done is not None:
                            on_done()
                        continue
                    if reply is not None:
                        err, text = reply[2], reply[3]
                        if isinstance(err, C4ForgeError):
                            raise err
                        why = f"failed: {type(err).__name__}: {err}"
                    else:
                        why = _death(self._replace(w))
                        err, text = None, ""
                    failures[index] += 1
                    if failures[index] >= self.attempts:
                        if err is not None and not isinstance(err, OSError):
                            print(text, file=sys.stderr, end="")  # a bug: its own traceback
                            raise err
                        raise TaskFailedError(
                            f"step {label!r}: task {index + 1} of {len(tasks)} {why}, "
                            f"{failures[index]} attempt(s) ({ATTEMPTS_ENV}={self.attempts}); "
                            "the finished work is kept: rerun with --resume"
                        )
                    self.retried += 1
                    print(
                        f"c4forge: step {label!r}: task {index + 1} of {len(tasks)} {why}; "
                        f"attempt {failures[index] + 1} of {self.attempts}",
                        file=sys.stderr,
                        flush=True,
                    )
                    if text and os.environ.get("C4FORGE_DEBUG"):
                        print(text, file=sys.stderr)
                    queue.append(index)
        except BaseException:
            self.close(kill=True)
            raise
        return results

    def _dispatch(self, i: int, queue: deque, tasks: list[Task], extra: tuple, busy: dict) -> None:
        """Send the next task to idle worker ``i``; a worker found dead while idle (its pipe
        broken) is replaced first, without counting an attempt."""
        index = queue[0]
        fn, args = tasks[index]
        for _ in range(3):
            w = self.workers[i]
            try:
                w.conn.send((index, fn, (*args, *extra)))
            except (BrokenPipeError, ConnectionResetError):
                self._replace(w)
                continue
            queue.popleft()
            w.task = index
            busy[index] = w
            return
        raise TaskFailedError("the local engine's worker processes die as soon as they start")

    def _replace(self, worker: _Worker) -> int | None:
        """Join a dead worker, start another in its place; the dead one's exit code."""
        worker.process.join()
        code = worker.process.exitcode
        worker.conn.close()
        self.workers[self.workers.index(worker)] = self._start()
        return code

    def _start(self) -> _Worker:
        with self.fork_lock():
            return _Worker(self.ctx)

    def close(self, kill: bool = False) -> None:
        for w in self.workers:
            if kill and w.process.is_alive():
                w.process.kill()
        _stop_workers(self.workers)
