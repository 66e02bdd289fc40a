"""OpenMP-style threads in Python: ``parallel_for`` and its clauses (lesson 02).

The C++ loop of Jamshidi's *Scalable Machine Learning* lecture::

    #pragma omp parallel for private(a) shared(b)
    for (a = 0; a < 50; ++a) {
        #pragma omp atomic
        b += a;
    }

reads here as::

    b = np.zeros(1, np.int64)                 # shared(b): one variable every thread sees
    def body(a):                              # private(a): each call has its own a
        atomic_add(b, 0, a)                   # #pragma omp atomic
    parallel_for(body, range(50), num_threads=4)

A team of threads splits the iterations by a *schedule* (``static``, ``dynamic`` or
``guided``, with a ``chunk`` size). ``critical()`` is a lock; ``reduction='+'`` gives each
thread a private partial result and combines them once at the end.

The GIL: CPython runs Python bytecode in one thread at a time, so threads speed up only
work that releases it — numpy and torch kernels do (``gil_speedups`` measures both).
The pictures are ``plots.py``.
"""
from __future__ import annotations

import math
import operator
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

__all__ = ["SCHEDULES", "REDUCTIONS", "Chunk", "ForResult", "parallel_for", "static_chunks",
           "next_chunk", "dynamic", "guided", "critical", "gil_speedups", "thread_race",
           "numpy_work", "python_work"]

SCHEDULES = ("static", "dynamic", "guided")
REDUCTIONS: dict[str, tuple[Callable[[Any, Any], Any], Any]] = {
    "+": (operator.add, 0), "*": (operator.mul, 1),
    "max": (max, -math.inf), "min": (min, math.inf)}


@dataclass
class Chunk:
    """One chunk of iterations [start, stop) run by ``thread`` from time t0 to t1 (s)."""

    thread: int
    start: int
    stop: int
    t0: float
    t1: float


@dataclass
class ForResult:
    """What ``parallel_for`` did: the reduced value, every chunk, and the wall time."""

    value: Any
    chunks: list[Chunk]
    seconds: float
    num_threads: int
    schedule: str
    chunk: int | None
    n: int = 0
    busy: list[float] = field(default_factory=list)

    @property
    def imbalance(self) -> float:
        """Busiest thread's time over the average (1.0 = perfectly balanced)."""
        return max(self.busy) / (sum(self.busy) / len(self.busy)) if sum(self.busy) else 1.0


# ---------------------------------------------------------------- schedules

def static_chunks(n: int, num_threads: int, chunk: int | None = None) -> list[list[range]]:
    """OpenMP ``schedule(static[, chunk])``: which iterations each thread gets, fixed up front.

    Without ``chunk``: one contiguous block per thread, sizes differing by at most one.
    With ``chunk``: blocks of ``chunk`` iterations dealt to the threads in turn.
    """
    _check_team(num_threads, chunk)
    plan: list[list[range]] = [[] for _ in range(num_threads)]
    if chunk is None:
        base, extra = divmod(n, num_threads)
        lo = 0
        for t in range(num_threads):
            hi = lo + base + (t < extra)
            if hi > lo:
                plan[t].append(range(lo, hi))
            lo = hi
    else:
        for k, lo in enumerate(range(0, n, chunk)):
            plan[k % num_threads].append(range(lo, min(lo + chunk, n)))
    return plan


def next_chunk(next_iter: np.ndarray, lock: Any, stop: int,
               size: Callable[[int], int]) -> range | None:
    """Claim the next ``size(remaining)`` iterations of a shared counter, or None at the end.

    ``next_iter[0]`` holds the first unclaimed iteration and is shared by all workers
    (threads, or processes with it in shared memory). Reading it and moving it on is a
    read-modify-write, so it happens inside the lock (a ``critical`` section); without
    the lock two workers can claim the same chunk. OpenMP's ``schedule(dynamic, chunk)``
    claims ``chunk`` at a time; ``schedule(guided, chunk)`` claims ``remaining /
    num_threads`` (at least ``chunk``): few claims early, small ones at the end.
    """
    with lock:
        lo = int(next_iter[0])
        if lo >= stop:
            return None
        hi = min(lo + size(stop - lo), stop)
        next_iter[0] = hi
    return range(lo, hi)


def dynamic(chunk: int) -> Callable[[int], int]:
    """``schedule(dynamic, chunk)``'s claim size: always ``chunk``."""
    return lambda remaining: chunk


def guided(chunk: int, num_threads: int) -> Callable[[int], int]:
    """``schedule(guided, chunk)``'s claim size: remaining / num_threads, at least ``chunk``."""
    return lambda remaining: max(chunk, math.ceil(remaining / num_threads))


def _check_team(num_threads: int, chunk: int | None) -> None:
    if not isinstance(num_threads, (int, np.integer)) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive integer, got {num_threads!r}")
    if chunk is not None and (not isinstance(chunk, (int, np.integer)) or chunk < 1):
        raise ValueError(f"chunk must be a positive integer or None, got {chunk!r}")


# -------------------------------------------------------------- parallel for

_CRITICAL: dict[str, threading.Lock] = {}
_CRITICAL_GUARD = threading.Lock()


@contextmanager
def critical(name: str = "", timeout: float = 60.0) -> Iterator[None]:
    """``#pragma omp critical(name)``: one thread at a time runs the block.

    All blocks with the same name share one lock. Waiting more than ``timeout``
    seconds raises ``TimeoutError`` (a thread that never leaves its critical section).
    """
    with _CRITICAL_GUARD:
        lock = _CRITICAL.setdefault(name, threading.Lock())
    if not lock.acquire(timeout=timeout):
        raise TimeoutError(f"waited {timeout:g} s to enter critical section {name!r}")
    try:
        yield
    finally:
        lock.release()


def parallel_for(body: Callable[[Any], Any], iterations: int | Sequence, num_threads: int = 2,
                 schedule: str = "static", chunk: int | None = None,
                 reduction: str | Callable[[Any, Any], Any] | None = None,
                 identity: Any = None, timeout: float = 120.0) -> ForResult:
    """``#pragma omp parallel for``: run ``body(i)`` for every i on a team of threads.

    Args:
        body: called once per iteration with the iteration's value (private to the call).
            With a ``reduction`` its return value is what gets combined.
        iterations: an int n (meaning range(n)) or any sequence (e.g. a range).
        num_threads: the team size; thread 0 is the calling thread.
        schedule: 'static' (fixed blocks), 'dynamic' (claim ``chunk`` at a time from a
            shared counter) or 'guided' (claims shrink as the work runs out).
        chunk: iterations per claim (dynamic default 1; static default: one block each).
        reduction: '+', '*', 'max', 'min' or a function of two values; each thread
            combines into a private partial, the partials are combined at the end.
        identity: the reduction's starting value (needed for a function reduction).
        timeout: seconds to wait for the other threads before ``TimeoutError``.
    """
    if isinstance(iterations, (int, np.integer)) and iterations < 0:
        raise ValueError(f"iterations must be >= 0 (or a sequence), got {iterations}")
    seq = range(iterations) if isinstance(iterations, (int, np.integer)) else iterations
    n = len(seq)
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: use one of {SCHEDULES}")
    _check_team(num_threads, chunk)
    op, start_value = _reduction(reduction, identity)
    plan = static_chunks(n, num_threads, chunk) if schedule == "static" else None
    size = dynamic(chunk or 1) if schedule == "dynamic" else guided(chunk or 1, num_threads)
    counter, lock = np.zeros(1, np.int64), threading.Lock()
    partials: list[Any] = [start_value] * num_threads
    chunks: list[list[Chunk]] = [[] for _ in range(num_threads)]
    errors: list[tuple[int, BaseException]] = []
    origin = time.perf_counter()

    def claims(t: int) -> Iterator[range]:
        if plan is not None:
            yield from plan[t]
            return
        while True:
            r = next_chunk(counter, lock, n, size)
            if r is None:
                return
            yield r

    def team_member(t: int) -> None:
        try:
            partial = start_value
            for r in claims(t):
                t0 = time.perf_counter()
                for i in r:
                    v = body(seq[i])
                    if op is not None:
                        partial = op(partial, v)
                chunks[t].append(Chunk(t, r.start, r.stop, t0 - origin,
                                       time.perf_counter() - origin))
            partials[t] = partial
        except BaseException as e:        # re-raised in the calling thread
            errors.append((t, e))

    threads = [threading.Thread(target=team_member, args=(t,), daemon=True,
                                name=f"omp-thread-{t}") for t in range(1, num_threads)]
    for th in threads:
        th.start()
    team_member(0)
    deadline = time.monotonic() + timeout
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
        if th.is_alive():
            raise TimeoutError(f"{th.name} was still running after {timeout:g} s")
    seconds = time.perf_counter() - origin
    if errors:
        t, e = min(errors, key=lambda te: te[0])
        if hasattr(e, "add_note"):                       # Python >= 3.11
            e.add_note(f"(raised in thread {t} of parallel_for's team)")
        raise e
    value = None
    if op is not None:
        value = start_value
        for p in partials:
            value = op(value, p)
    flat = sorted((c for cs in chunks for c in cs), key=lambda c: c.start)
    busy = [sum(c.t1 - c.t0 for c in cs) for cs in chunks]
    return ForResult(value, flat, seconds, num_threads, schedule, chunk, n, busy)


def _reduction(reduction: str | Callable | None, identity: Any) -> tuple[Callable | None, Any]:
    if reduction is None:
        return None, None
    if callable(reduction):
        if identity is None:
            raise ValueError("a function reduction needs its identity value, e.g. "
                             "identity=0 for addition")
        return reduction, identity
    if reduction not in REDUCTIONS:
        raise ValueError(f"unknown reduction {reduction!r}: use one of {list(REDUCTIONS)} "
                         "or a function of two values")
    op, ident = REDUCTIONS[reduction]
    return op, ident if identity is None else identity


# ------------------------------------------------------------------- the GIL

_DATA = np.random.default_rng(0).random(1 << 20)


def python_work(size: int) -> float:
    """Pure-Python arithmetic: holds the GIL the whole time."""
    s = 0.0
    for j in range(size):
        s += j * 0.5
    return s


def numpy_work(size: int) -> float:
    """A numpy kernel (sorting ``size`` numbers): releases the GIL while it runs."""
    return float(np.sort(_DATA[:size])[size // 2])


def gil_speedups(num_threads: int = 2, tasks: int = 16,
                 sizes: dict[str, int] | None = None, repeats: int = 3) -> dict[str, dict]:
    """Time the same tasks on 1 and on ``num_threads`` threads, pure Python vs numpy.

    Returns {kind: {'t1': s, 'tn': s, 'speedup': t1/tn}}, best of ``repeats``.
    """
    sizes = sizes or {"pure Python": 60_000, "numpy (releases the GIL)": 250_000}
    work = {"pure Python": python_work, "numpy (releases the GIL)": numpy_work}
    out = {}
    for kind, size in sizes.items():
        fn = work[kind]
        best = {}
        parallel_for(lambda _: fn(size), tasks, num_threads=num_threads)     # warm up
        for t in (1, num_threads):
            best[t] = min(parallel_for(lambda _: fn(size), tasks, num_threads=t,
                                       schedule="dynamic").seconds for _ in range(repeats))
        out[kind] = {"t1": best[1], "tn": best[num_threads],
                     "speedup": best[1] / best[num_threads]}
    return out


def thread_race(num_threads: int = 2, updates: int = 2000, size: int = 20_000) -> dict[str, int]:
    """Threads do ``total[0] += x.sum()`` on one shared total; count the updates lost.

    ``+=`` reads total[0] *before* ``x.sum()`` runs, and numpy releases the GIL during
    the sum, so another thread can write total[0] in between: its update is lost.
    """
    x = np.ones(size)
    total = np.zeros(1)

    def body(_: int) -> None:
        total[0] += x.sum()          # read total, (GIL released) sum, write total

    parallel_for(body, updates * num_threads, num_threads=num_threads)
    expected = updates * num_threads
    got = int(round(total[0] / size))
    return {"expected": expected, "got": got, "lost": expected - got}
