"""Checks for lesson 02 (parallel models): a race-free threaded sum; a dynamic schedule."""
from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from typing import Callable, Iterator

import numpy as np

from ddl_lab.runtime import WorkerError, WorkerTimeout
from ._core import CheckFailed, call_local, fail, passed, worker_failure

__all__ = ["threaded_sum", "dynamic_chunk"]

_RACE_HINT = ("Several threads read the shared total before one of them wrote it back: "
              "`total += block.sum()` reads total, then sums (numpy releases the GIL, so "
              "the other threads run meanwhile), then writes — the other threads' updates "
              "are lost. Give each thread its own slot (partials[t] = block.sum(), a "
              "private variable) and add the slots up after join(): a reduction.")


@contextmanager
def _count_thread_starts() -> Iterator[list[int]]:
    """Count threading.Thread.start calls made while the block runs."""
    started = [0]
    original = threading.Thread.start

    def start(self: threading.Thread) -> None:
        started[0] += 1
        original(self)

    threading.Thread.start = start          # type: ignore[method-assign]
    try:
        yield started
    finally:
        threading.Thread.start = original   # type: ignore[method-assign]


@contextmanager
def _fast_switching() -> Iterator[None]:
    """Let CPython switch threads as often as it can, so races show up."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _integer_data(n: int, seed: int) -> np.ndarray:
    """Whole numbers as float64: every partial sum is exact, so any difference is real."""
    return np.random.default_rng(seed).integers(0, 1000, n).astype(np.float64)


def threaded_sum(fn: Callable[[np.ndarray, int], float], hunts: int = 6) -> None:
    """Lesson 02, task 1: ``fn(x, num_threads)`` returns ``x.sum()`` computed by
    ``num_threads`` threads (each sums a block), with no lost update."""
    __tracebackhide__ = True
    call_local(fn, np.arange(10.0), 2)
    for t in (1, 2, 3, 4):
        x = _integer_data(1_000_003 + t, seed=t)
        want = float(x.sum())
        with _count_thread_starts() as started:
            got = call_local(fn, x, t)
        _compare(fn, got, want, t, len(x))
        if t > 1 and started[0] < t - 1:
            fail(f"with num_threads={t}, {fn.__name__} started {started[0]} thread(s): start "
                 f"{t} threads (or {t - 1} plus the calling thread), each summing one block "
                 "— threading.Thread(target=..., args=...).start(), then join().")
    x = _integer_data(4_000_000, seed=7)
    want = float(x.sum())
    with _fast_switching():
        for _ in range(hunts):
            _compare(fn, call_local(fn, x, 4), want, 4, len(x))
    passed("threaded_sum", f"exact sums with 1–4 threads, and {hunts} race hunts with 4 "
           "threads switching as often as CPython allows lost no update")


def _compare(fn: Callable, got: object, want: float, t: int, n: int) -> None:
    __tracebackhide__ = True
    try:
        value = float(got)                             # type: ignore[arg-type]
    except (TypeError, ValueError):
        fail(f"{fn.__name__} returned {got!r} ({type(got).__name__}); return the sum as "
             "a number.")
    if value == want:
        return
    if t > 1 and value < want:
        fail(f"lost update: with {t} threads on {n:,} numbers {fn.__name__} returned "
             f"{value:,.0f}, expected {want:,.0f} — {want - value:,.0f} "
             f"({100 * (want - value) / want:.0f}% of the total) is missing. {_RACE_HINT}")
    fail(f"with num_threads={t} on {n:,} numbers {fn.__name__} returned {value:,.0f}, "
         f"expected {want:,.0f}. Do the blocks cover x exactly once? E.g. block t is "
         f"x[t * n // num_threads:(t + 1) * n // num_threads].")


class _SpyLock:
    """A threading lock that counts how often it was taken (for the local test)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.taken = 0

    def __enter__(self) -> "_SpyLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def acquire(self, *args: object, **kwargs: object) -> bool:
        ok = self._lock.acquire(timeout=2)
        if not ok:
            raise TimeoutError("the lock was still held by an earlier call after 2 s: "
                               "release it (`with lock:` does that for you)")
        self.taken += 1
        return ok

    def release(self) -> None:
        self._lock.release()


def dynamic_chunk(fn: Callable, stop: int = 50_000) -> None:
    """Lesson 02, task 2: ``fn(next_iter, lock, chunk, stop)`` claims the next chunk of a
    dynamic schedule, and two real processes sharing the counter never claim the same
    iteration twice."""
    __tracebackhide__ = True
    from ddl_lab.parallel_models.shared_memory import claim_all
    counter, lock = np.zeros(1, np.int64), _SpyLock()
    got = [call_local(fn, counter, lock, 4, 10) for _ in range(5)]
    want = [range(0, 4), range(4, 8), range(8, 10), None, None]
    if got != want:
        fail(f"called 5 times with chunk=4, stop=10 on a fresh counter, {fn.__name__} "
             f"returned {got}; expected {want}: each call takes the next `chunk` iterations "
             "(fewer at the end), then None once next_iter[0] has reached stop.")
    if counter[0] != 10:
        fail(f"after claiming everything, next_iter[0] is {counter[0]}, expected 10: move the "
             "shared counter past every chunk you hand out (next_iter[0] = hi).")
    if lock.taken == 0:
        fail(f"{fn.__name__} never took the lock: reading next_iter[0] and moving it on is a "
             "read-modify-write on shared memory, so two workers can claim the same chunk. "
             "Do both inside `with lock:` (OpenMP's critical section).")
    try:
        claims = claim_all(fn, stop, chunk=1, processes=2)
    except WorkerTimeout:
        raise CheckFailed(f"2 processes calling {fn.__name__} did not finish claiming "
                          f"{stop:,} iterations within 30 s: does it return None once "
                          "next_iter[0] >= stop, and release the lock every time?") from None
    except WorkerError as e:
        raise worker_failure(e, fn, "in process {}") from None
    seen = np.zeros(stop, dtype=np.int64)
    for pairs in claims:
        for lo, hi in pairs:
            seen[lo:hi] += 1
    twice = np.nonzero(seen > 1)[0]
    if len(twice):
        fail(f"race: 2 processes claimed {len(twice):,} of {stop:,} iterations more than once "
             f"(the first is iteration {twice[0]}): both read next_iter[0] before either "
             "moved it on. The read AND the write of next_iter[0] must happen inside the "
             "same `with lock:` block.")
    never = np.nonzero(seen == 0)[0]
    if len(never):
        fail(f"{len(never):,} of {stop:,} iterations were never claimed (the first is "
             f"{never[0]}): does each call move next_iter[0] to exactly the end of the "
             "chunk it returns?")
    counts = [len(p) for p in claims]
    passed("dynamic_chunk", f"2 processes claimed all {stop:,} iterations exactly once "
           f"({counts[0]:,} + {counts[1]:,} chunks of 1)")
