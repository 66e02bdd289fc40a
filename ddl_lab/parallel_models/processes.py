"""Fresh processes for one experiment (lessons 02 and 03).

``run_processes(fn, n, *args)`` runs ``fn(rank, *args)`` in ``n`` new processes: locks,
barriers and shared values made with ``CONTEXT`` are handed to them at start (the only way
a lock can be shared), ``fn`` may come from a notebook cell (it travels by value, as the
runtime's tasks do), every wait has a timeout, and no process is left behind (each is a
``runtime.process.Child``).
"""
from __future__ import annotations

import time
from typing import Any, Callable

from multiprocess.connection import wait

from ddl_lab.runtime import WorkerError, WorkerTimeout
from ddl_lab.runtime.pickling import loads
from ddl_lab.runtime.process import CONTEXT, ByValue, Child, Raised, answer, stop_all

__all__ = ["CONTEXT", "run_processes", "wait_barrier"]

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
    """Run ``fn(rank, *args, **kwargs)`` in ``n`` fresh processes (lessons 02, 03).

    Returns the results in rank order. ``fn`` may be defined in a notebook cell (it is
    pickled by value, as the runtime pickles tasks). Locks, barriers and shared values
    made with ``CONTEXT`` may be passed in ``args``. A process that raises, dies, or is
    still running after ``timeout`` seconds raises ``WorkerError`` naming it; every
    process is gone when this returns.
    """
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive number of processes, got {n!r}")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout!r}")
    try:
        first = ByValue(fn)
    except Exception as e:
        raise TypeError(f"{getattr(fn, '__name__', fn)!r} cannot be sent to the processes "
                        f"({type(e).__name__}: {e})") from None
    children: list[Child] = []
    try:
        for rank in range(n):           # each its own copy: shared memory loads once
            task = (rank, ByValue(fn) if rank else first, tuple(ByValue.functions(a) for a in args),
                    {k: ByValue.functions(v) for k, v in kwargs.items()})
            children.append(Child.start(_child, task, name=f"ddl_lab-proc{rank}"))
        return _collect(children, timeout)
    finally:
        stop_all(children, 2.0)
        children.clear()               # a failed run's traceback keeps this frame: drop the
        task = first = args = kwargs = None   # processes' arguments (locks hold OS semaphores)


def _collect(children: list[Child], timeout: float) -> list:
    n = len(children)
    results: list[Any] = [None] * n
    failures: dict[int, tuple[str, str]] = {}     # rank: (one line, full text)
    done: set[int] = set()
    deadline = time.monotonic() + timeout
    while len(done) < n and time.monotonic() < deadline:
        waiting = {children[r].conn: r for r in range(n) if r not in done}
        waiting.update({children[r].sentinel: r for r in range(n) if r not in done})
        for obj in wait(list(waiting), timeout=min(0.2, max(0.0, deadline - time.monotonic()))):
            r = waiting[obj]
            if r in done:
                continue
            try:
                if children[r].conn.poll():
                    tag, body = children[r].conn.recv()
                    if tag == "ok":
                        results[r] = loads(body)
                    else:
                        failures[r] = _raised(body)
                    done.add(r)
                    continue
            except (EOFError, OSError):
                pass
            if not children[r].alive:
                children[r].join(0.5)
                died = f"died with exit code {children[r].exitcode}"
                failures[r] = (died, f"process {r} {died}")
                done.add(r)
        if failures:
            deadline = min(deadline, time.monotonic() + _GRACE_S)
    missing = [r for r in range(n) if r not in done]
    if not failures and not missing:
        return results
    parts = [f"process {r} {line}" for r, (line, _) in sorted(failures.items())]
    if missing:
        parts.append(f"process(es) {missing} still running after {timeout:g} s"
                     if not failures else f"process(es) {missing} stopped after the failure")
    details = "\n\n".join(f"--- process {r} ---\n{t.rstrip()}"
                           for r, (_, t) in sorted(failures.items()))
    table = {r: t for r, (_, t) in failures.items()}
    table.update({r: "did not answer" for r in missing})
    cls = WorkerTimeout if missing and not failures else WorkerError
    raise cls("; ".join(parts) + ("\n\n" + details if details else ""), table, False)


def _raised(raised: Raised) -> tuple[str, str]:
    return "raised " + raised.summary, raised.traceback


def _child(conn: Any, rank: int, fn: ByValue, args: tuple, kwargs: dict) -> None:
    """A process of ``run_processes`` (a ``process.Child``): run the task, answer once."""
    conn.send(answer(fn, rank, args=args, kwargs=kwargs))
    conn.close()
