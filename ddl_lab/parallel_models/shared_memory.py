"""Processes that share memory: a real lost-update race and its three fixes (lesson 02).

Lesson 03's Hogwild! runs on the same pieces:

- ``SharedArray``: a numpy array in a named shared-memory segment; worker processes
  attach to it *by name*, so every process reads and writes the same bytes.
- ``processes.run_processes``: fresh processes for one experiment.
- ``atomic_add``: the CPU's indivisible fetch-and-add (``lock xadd`` on x86), called
  through libatomic.
- ``count_race``: several processes increment one shared counter with
  ``x[0] = x[0] + 1`` and lose updates; ``method`` picks a fix — a lock (OpenMP's
  ``critical``), ``atomic``, or private partial sums and one ``reduction``.

The pictures are ``plots.py``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np
from multiprocess import shared_memory as _shm

from ddl_lab.parallel_models.processes import CONTEXT, run_processes, wait_barrier

__all__ = ["SharedArray", "CountingLock", "atomic_add", "HARDWARE_ATOMICS", "METHODS",
           "RaceResult", "increment", "count_race", "compare_fixes", "claim_all",
           "memory_facts"]


# ------------------------------------------------------------------ shared arrays

class SharedArray:
    """A numpy array living in a named shared-memory segment (lessons 02 and 03).

    The creator owns the segment and removes it (``unlink``) when its ``with`` block
    ends; a worker calls ``SharedArray.attach(handle)`` with the creator's ``handle``
    and sees the same memory::

        with SharedArray((1,), np.int64) as counter:
            run_processes(worker, 2, counter.handle)   # worker: SharedArray.attach(h).array
            print(counter.array[0])
    """

    def __init__(self, shape: int | Sequence[int], dtype: Any = np.float64,
                 _attach: str | None = None):
        self.shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        self.dtype = np.dtype(dtype)
        if any(int(s) < 0 for s in self.shape):
            raise ValueError(f"shape must not be negative, got {self.shape}")
        nbytes = max(1, int(np.prod(self.shape)) * self.dtype.itemsize)
        self.owner = _attach is None
        self._shm = (_shm.SharedMemory(create=True, size=nbytes) if self.owner
                     else _shm.SharedMemory(name=_attach))
        self.array: np.ndarray | None = np.ndarray(self.shape, self.dtype, self._shm.buf)
        if self.owner:
            self.array[...] = 0

    @property
    def name(self) -> str:
        return self._shm.name

    @property
    def handle(self) -> tuple[str, tuple[int, ...], str]:
        """What a worker needs to attach: (segment name, shape, dtype)."""
        return (self.name, self.shape, self.dtype.str)

    @classmethod
    def attach(cls, handle: tuple[str, tuple[int, ...], str]) -> "SharedArray":
        """Open the segment another process created (by its name)."""
        name, shape, dtype = handle
        return cls(shape, dtype, _attach=name)

    def close(self) -> None:
        """Drop this process's view of the segment (the memory stays for the others)."""
        self.array = None
        try:
            self._shm.close()
        except BufferError:      # a caller still holds a view; the OS unmaps it at exit
            pass

    def unlink(self) -> None:
        """Remove the segment from the system (the creator does this, once)."""
        try:
            self._shm.unlink()
        except FileNotFoundError:
            pass

    def __enter__(self) -> "SharedArray":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        if self.owner:
            self.unlink()

    def __repr__(self) -> str:
        return f"SharedArray(name={self.name!r}, shape={self.shape}, dtype={self.dtype})"


# ------------------------------------------------------------------------ atomics

def _load_fetch_add() -> Callable[[int, int], int] | None:
    """The C library's 64-bit atomic fetch-and-add, or None if this system has none."""
    path = ctypes.util.find_library("atomic") or "libatomic.so.1"
    try:
        fn = ctypes.CDLL(path).__atomic_fetch_add_8
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int]
    fn.restype = ctypes.c_int64
    return lambda address, value: fn(address, value, 5)        # 5 = __ATOMIC_SEQ_CST


_FETCH_ADD = _load_fetch_add()
HARDWARE_ATOMICS = _FETCH_ADD is not None


def atomic_add(array: np.ndarray, index: int, value: int) -> int:
    """``array[index] += value`` as one indivisible CPU instruction; returns the old value.

    OpenMP's ``#pragma omp atomic`` (lesson 02). ``array`` must be an int64 numpy array
    (in shared memory, for processes). No other process or thread can slip between the
    read and the write, so no update is lost — and no lock is taken.
    """
    if _FETCH_ADD is None:
        raise RuntimeError("this system has no libatomic, so hardware atomics are not "
                           "available from Python here; use a lock (method='lock').")
    if array.dtype != np.int64:
        raise TypeError(f"atomic_add needs an int64 array, got {array.dtype}")
    if not 0 <= index < array.shape[0]:
        raise IndexError(f"index {index} is outside an array of length {array.shape[0]}")
    return _FETCH_ADD(array.ctypes.data + index * array.strides[0], int(value))


class CountingLock:
    """A process-shared lock that also counts how often it was acquired (lessons 02, 03).

    Use it as ``with lock: ...``; waiting longer than ``timeout`` seconds raises
    ``TimeoutError`` instead of hanging. Create it before starting the processes and
    pass it to them as an argument (locks can only be shared that way).
    """

    def __init__(self, timeout: float = 30.0):
        self._lock = CONTEXT.Lock()
        self._count = CONTEXT.RawValue("q", 0)
        self.timeout = timeout

    @property
    def acquisitions(self) -> int:
        return int(self._count.value)

    def acquire(self) -> None:
        if not self._lock.acquire(True, self.timeout):
            raise TimeoutError(f"waited {self.timeout:g} s for the lock: did another "
                               "process take it and never release it?")
        self._count.value += 1               # safe: we hold the lock

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> "CountingLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# ---------------------------------------------------------------- the race

METHODS = ("none", "lock", "atomic", "reduction")


def increment(rank: int, counter: tuple, n: int, method: str, lock: Any,
              barrier: Any) -> tuple[float, float]:
    """One worker of the race: add 1 to the shared counter ``n`` times (lesson 02).

    ``counter`` is the handle of an int64 SharedArray: slot 0 is the shared count,
    slot 1 + rank this worker's private partial sum (for ``method='reduction'``).
    Returns (start, end) times.
    """
    shared = SharedArray.attach(counter)
    x = shared.array
    t0 = wait_barrier(barrier)
    if method == "none":                  # read, add, write: another process may write between
        for _ in range(n):
            x[0] = x[0] + 1
    elif method == "lock":                # #pragma omp critical
        for _ in range(n):
            with lock:
                x[0] = x[0] + 1
    elif method == "atomic":              # #pragma omp atomic
        for _ in range(n):
            atomic_add(x, 0, 1)
    elif method == "reduction":           # reduction(+: x): private partial, combined once
        partial = 0
        for _ in range(n):
            partial += 1
        x[1 + rank] = partial
    else:
        raise ValueError(f"unknown method {method!r}: use one of {METHODS}")
    t1 = time.perf_counter()
    del x
    shared.close()
    return t0, t1


@dataclass
class RaceResult:
    """What ``count_race`` measured: expected vs got, the updates lost, the time taken."""

    method: str
    processes: int
    increments: int
    expected: int
    got: int
    seconds: float

    @property
    def lost(self) -> int:
        return self.expected - self.got

    @property
    def ns_per_increment(self) -> float:
        return 1e9 * self.seconds * self.processes / self.expected

    def __str__(self) -> str:
        return (f"{self.method:>9}: expected {self.expected:>9,}  got {self.got:>9,}  "
                f"lost {self.lost:>8,} ({100 * self.lost / self.expected:4.1f}%)  "
                f"{1e3 * self.seconds:7.1f} ms")


def count_race(processes: int = 2, increments: int = 200_000, method: str = "none",
               timeout: float = 60.0) -> RaceResult:
    """Let ``processes`` processes each add 1 ``increments`` times to one shared counter.

    ``method``: 'none' (unsynchronised read-modify-write: updates get lost), 'lock',
    'atomic' or 'reduction'. The time is from the common start to the last finish.
    """
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}: use one of {METHODS}")
    if processes < 1 or increments < 1:
        raise ValueError("processes and increments must be positive")
    lock, barrier = CONTEXT.Lock(), CONTEXT.Barrier(processes)
    try:
        with SharedArray(1 + processes, np.int64) as counter:
            times = run_processes(increment, processes, counter.handle, increments, method,
                                  lock, barrier, timeout=timeout)
            got = int(counter.array[1:].sum() if method == "reduction" else counter.array[0])
    finally:
        lock = barrier = None          # a failed run's traceback must not keep the semaphores
    seconds = max(t1 for _, t1 in times) - min(t0 for t0, _ in times)
    return RaceResult(method, processes, increments, processes * increments, got, seconds)


def compare_fixes(processes: int = 2, increments: int = 200_000,
                  methods: Sequence[str] = METHODS) -> list[RaceResult]:
    """The race and its fixes, one after the other, each on fresh processes (lesson 02)."""
    return [count_race(processes, increments, m) for m in methods
            if m != "atomic" or HARDWARE_ATOMICS]


# ------------------------------------------------------------ dynamic schedule

def _claim_worker(rank: int, next_chunk: Callable, next_iter: tuple, lock: Any, chunk: int,
                  stop: int, barrier: Any, busy_us: float) -> np.ndarray:
    shared = SharedArray.attach(next_iter)
    counter = shared.array
    claimed: list[tuple[int, int]] = []
    wait_barrier(barrier)
    while True:
        r = next_chunk(counter, lock, chunk, stop)
        if r is None:
            break
        if not isinstance(r, range):
            raise TypeError(f"next_chunk returned {type(r).__name__} {r!r}; return a range "
                            "(e.g. range(lo, hi)) or None when nothing is left")
        claimed.append((r.start, r.stop))
        until = time.perf_counter() + 1e-6 * busy_us * len(r)      # "run" the iterations
        while time.perf_counter() < until:
            pass
        if len(claimed) > stop + 1:
            raise RuntimeError(f"next_chunk handed out more than {stop} chunks for {stop} "
                               "iterations and never returned None: does it advance the "
                               "shared counter, and return None once it reaches stop?")
    del counter
    shared.close()
    return np.array(claimed, dtype=np.int64).reshape(-1, 2)


def claim_all(next_chunk: Callable, stop: int, chunk: int = 1, processes: int = 2,
              busy_us: float = 0.0, timeout: float = 30.0) -> list[np.ndarray]:
    """Processes claim chunks with ``next_chunk`` until none is left (lesson 02's task).

    ``next_chunk(next_iter, lock, chunk, stop)`` is a dynamic schedule's dispenser
    (exercise 02 writes one); here it runs in ``processes`` real
    processes on one shared int64 counter, each spending ``busy_us`` microseconds per
    claimed iteration. Returns each process's claimed (start, stop) pairs.
    """
    lock, barrier = CONTEXT.Lock(), CONTEXT.Barrier(processes)
    try:
        with SharedArray(1, np.int64) as counter:
            return run_processes(_claim_worker, processes, next_chunk, counter.handle, lock,
                                 chunk, stop, barrier, busy_us, timeout=timeout)
    finally:
        lock = barrier = None          # a failed run's traceback must not keep the semaphores


# ------------------------------------------------------------- the machine

def memory_facts() -> dict[str, object]:
    """This machine's shared-memory layout: cores, NUMA nodes, cache line, caches."""
    facts: dict[str, object] = {"cores": os.cpu_count()}
    nodes = "/sys/devices/system/node"
    if os.path.isdir(nodes):
        facts["NUMA nodes"] = len([d for d in os.listdir(nodes) if d.startswith("node")
                                   and d[4:].isdigit()])
    cache = "/sys/devices/system/cpu/cpu0/cache"
    line = None
    for d in sorted(os.listdir(cache)) if os.path.isdir(cache) else []:
        try:
            read = lambda f: open(os.path.join(cache, d, f)).read().strip()  # noqa: E731
            facts[f"L{read('level')} {read('type').lower()} cache"] = read("size")
            line = int(read("coherency_line_size"))
        except OSError:
            continue
    if line:
        facts["cache line (bytes)"] = line
    facts["platform"] = sys.platform
    return facts
