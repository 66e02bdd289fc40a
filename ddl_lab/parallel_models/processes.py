"""Fresh spawn processes for one experiment (lessons 02 and 03).

``run_processes(fn, n, *args)`` runs ``fn(rank, *args)`` in ``n`` new processes: locks,
barriers and shared values made with ``SPAWN`` are handed to them at start (the only way
a lock can be shared), ``fn`` may come from a notebook cell (dill pickles it by value),
every wait has a timeout, and no process is left behind.
"""
from __future__ import annotations

import os
import time
import traceback
from types import FunctionType
from typing import Any, Callable

import dill
from multiprocess.connection import wait

from ddl_lab.runtime import WorkerError, WorkerTimeout
from ddl_lab.runtime.process import SPAWN, end_with_parent

__all__ = ["SPAWN", "run_processes", "wait_barrier"]

_GRACE_S = 2.0                       # after one process fails, how long the others get


def wait_barrier(barrier: Any, timeout: float = 30.0) -> float:
    """Wait until every process is ready, then return the common start time."""
    try:
        barrier.wait(timeout)
    except Exception as e:          # BrokenBarrierError: someone died or is late
        raise TimeoutError(f"not every process reached the start line within {timeout:g} s"
                           f" ({type(e).__name__})") from None
    return time.perf_counter()


def run_processes(fn: Callable, n: int, *args: Any, timeout: float = 60.0,
                  **kwargs: Any) -> list:
    """Run ``fn(rank, *args, **kwargs)`` in ``n`` fresh spawn processes (lessons 02, 03).

    Returns the results in rank order. ``fn`` may be defined in a notebook cell (it is
    pickled with dill). Locks, barriers and shared values made with ``SPAWN`` may be
    passed in ``args``. A process that raises, dies, or is still running after
    ``timeout`` seconds raises ``WorkerError`` naming it; every process is gone when
    this returns.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive number of processes, got {n!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    try:
        payload = dill.dumps(fn, recurse=True)
    except Exception as e:
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} cannot be sent to the processes "
                        f"({type(e).__name__}: {e})") from None
    args = tuple(_Dilled.wrap(a) for a in args)
    kwargs = {k: _Dilled.wrap(v) for k, v in kwargs.items()}
    procs, conns = [], []
    try:
        for rank in range(n):
            mine, theirs = SPAWN.Pipe(duplex=False)
            p = SPAWN.Process(target=_child, args=(rank, theirs, payload, args, kwargs,
                                                   os.getpid()),
                              daemon=True, name=f"ddl_lab-proc{rank}")
            p.start()
            theirs.close()
            procs.append(p)
            conns.append(mine)
        return _collect(procs, conns, timeout)
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(2.0)
            if p.is_alive():
                p.kill()
                p.join(1.0)
        for c in conns:
            c.close()
        procs.clear()                  # a failed run's traceback keeps this frame: drop the
        p = args = kwargs = None       # processes' arguments (locks hold OS semaphores)


def _collect(procs: list, conns: list, timeout: float) -> list:
    n = len(procs)
    results: list[Any] = [None] * n
    failures: dict[int, str] = {}
    done: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(done) < n and time.monotonic() < deadline:
        waiting = {conns[r]: r for r in range(n) if r not in done}
        waiting.update({procs[r].sentinel: r for r in range(n) if r not in done})
        for obj in wait(list(waiting), timeout=min(0.2, max(0.0, deadline - time.monotonic()))):
            r = waiting[obj]
            if r in done:
                continue
            try:
                if conns[r].poll():
                    tag, body = conns[r].recv()
                    if tag == "ok":
                        results[r] = dill.loads(body)
                    else:
                        failures[r] = body
                    done.add(r)
                    continue
            except (EOFError, OSError):
                pass
            if not procs[r].is_alive():
                procs[r].join(0.5)
                failures[r] = f"process {r} died with exit code {procs[r].exitcode}"
                done.add(r)
        if failures:
            deadline = min(deadline, time.monotonic() + _GRACE_S)
    missing = [r for r in range(n) if r not in done]
    if not failures and not missing:
        return results
    parts = [f"process {r} {_summary(t)}" for r, t in sorted(failures.items())]
    if missing:
        parts.append(f"process(es) {missing} still running after {timeout:g} s"
                     if not failures else f"process(es) {missing} stopped after the failure")
    details = "\n\n".join(f"--- process {r} ---\n{t.rstrip()}" for r, t in sorted(failures.items()))
    table = dict(failures)
    table.update({r: "did not answer" for r in missing})
    cls = WorkerTimeout if missing and not failures else WorkerError
    raise cls("; ".join(parts) + ("\n\n" + details if details else ""), table, False)


def _summary(text: str) -> str:
    lines = text.strip().splitlines()
    if lines and "Traceback" in text:
        return "raised " + lines[-1]
    return lines[-1] if lines else "failed"


class _Dilled:
    """A function argument pickled by value with its globals (a notebook cell's function)."""

    def __init__(self, payload: bytes):
        self.payload = payload

    @staticmethod
    def wrap(obj: Any) -> Any:
        return _Dilled(dill.dumps(obj, recurse=True)) if isinstance(obj, FunctionType) else obj

    @staticmethod
    def unwrap(obj: Any) -> Any:
        return dill.loads(obj.payload) if isinstance(obj, _Dilled) else obj


def _child(rank: int, conn: Any, payload: bytes, args: tuple, kwargs: dict,
           parent: int) -> None:
    end_with_parent(parent)
    try:
        fn = dill.loads(payload)
        args = tuple(_Dilled.unwrap(a) for a in args)
        kwargs = {k: _Dilled.unwrap(v) for k, v in kwargs.items()}
        reply = ("ok", dill.dumps(fn(rank, *args, **kwargs), recurse=True))
    except BaseException as e:
        tb = e.__traceback__.tb_next if e.__traceback__ else None
        reply = ("err", "".join(traceback.format_exception(type(e), e, tb)))
    conn.send(reply)
    conn.close()
