"""Processes that share memory: a real lost-update race and its three fixes (lesson 02).

Lesson 03's Hogwild! runs on the same pieces:

- ``SharedArray``: a numpy array in a named shared-memory segment; worker processes
  attach to it *by name*, so every process reads and writes the same bytes.
- ``run_processes``: fresh *spawn* processes for one experiment (locks and barriers are
  handed to them at start, which is the only way a lock can be shared), with a timeout
  on every wait and no process left behind.
- ``atomic_add``: the CPU's indivisible fetch-and-add (``lock xadd`` on x86), called
  through libatomic.
- ``count_race``: several processes increment one shared counter with
  ``x[0] = x[0] + 1`` and lose updates; ``method`` picks a fix — a lock (OpenMP's
  ``critical``), ``atomic``, or private partial sums and one ``reduction``.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import time
import traceback
from dataclasses import dataclass
from types import FunctionType
from typing import Any, Callable, Sequence

import dill
import multiprocess as mp
import numpy as np
from multiprocess import shared_memory as _shm
from multiprocess.connection import wait

from ddl_lab.runtime import WorkerError, WorkerTimeout

__all__ = ["SharedArray", "CountingLock", "atomic_add", "HARDWARE_ATOMICS", "SPAWN",
           "run_processes", "wait_barrier", "METHODS", "RaceResult", "increment",
           "count_race", "compare_fixes", "plot_race", "claim_all", "memory_facts",
           "plot_memory_architectures"]

SPAWN = mp.get_context("spawn")
_GRACE_S = 2.0                       # after one process fails, how long the others get


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
        self._lock = SPAWN.Lock()
        self._count = SPAWN.RawValue("q", 0)
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


# ------------------------------------------------------------------ processes

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
            p = SPAWN.Process(target=_child, args=(rank, theirs, payload, args, kwargs),
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
    return ("raised " + lines[-1]) if lines and "Traceback" in text else (lines[-1] if lines else "failed")


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


def _child(rank: int, conn: Any, payload: bytes, args: tuple, kwargs: dict) -> None:
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
    lock, barrier = SPAWN.Lock(), SPAWN.Barrier(processes)
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


def plot_race(results: Sequence[RaceResult]) -> None:
    """Lesson 02's picture: updates lost and time taken, for the race and each fix."""
    import matplotlib.pyplot as plt
    names = [r.method for r in results]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2))
    lost = [100 * r.lost / r.expected for r in results]
    a.bar(names, lost, color=["tab:red" if v > 0 else "tab:green" for v in lost])
    for i, r in enumerate(results):
        a.text(i, lost[i], f"{r.lost:,}", ha="center", va="bottom", fontsize=9)
    a.set(ylabel="updates lost (%)", title=f"{results[0].processes} processes × "
          f"{results[0].increments:,} increments")
    b.bar(names, [r.ns_per_increment for r in results], color="tab:blue")
    b.set(yscale="log", ylabel="ns per increment (wall × processes)", title="what each costs")
    fig.tight_layout()


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
    (``ddl_lab.parallel_models.threads.next_chunk`` is one); here it runs in ``processes`` real
    processes on one shared int64 counter, each spending ``busy_us`` microseconds per
    claimed iteration. Returns each process's claimed (start, stop) pairs.
    """
    lock, barrier = SPAWN.Lock(), SPAWN.Barrier(processes)
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


def plot_memory_architectures() -> None:
    """Lesson 02's first picture: UMA, NUMA, distributed and hybrid memory, side by side."""
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyBboxPatch

    def box(ax: Any, x: float, y: float, w: float, h: float, text: str, color: str) -> None:
        ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", fc=color,
                                    ec="black", lw=0.8))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=7)

    def line(ax: Any, x0: float, y0: float, x1: float, y1: float, **kw: Any) -> None:
        ax.plot([x0, x1], [y0, y1], color=kw.pop("color", "black"), lw=kw.pop("lw", 1), **kw)

    def smp(ax: Any, x0: float, w: float, cpus: int, label: str = "memory") -> None:
        cw = w / cpus
        for c in range(cpus):
            box(ax, x0 + c * cw + 0.02, 0.68, cw - 0.04, 0.16, "CPU\n+cache", "#cde4f7")
            line(ax, x0 + (c + 0.5) * cw, 0.66, x0 + (c + 0.5) * cw, 0.5)
        line(ax, x0 + 0.02, 0.5, x0 + w - 0.02, 0.5, lw=2)
        box(ax, x0 + 0.05, 0.18, w - 0.1, 0.16, label, "#fde3b5")
        line(ax, x0 + w / 2, 0.5, x0 + w / 2, 0.36)

    fig, axes = plt.subplots(1, 4, figsize=(13, 2.9))
    smp(axes[0], 0.0, 1.0, 4)
    axes[0].set_title("shared, UMA (SMP)\nsame access time for every CPU", fontsize=9)
    smp(axes[1], 0.0, 0.48, 2, "memory A")
    smp(axes[1], 0.52, 0.48, 2, "memory B")
    line(axes[1], 0.43, 0.26, 0.57, 0.26, color="tab:red", lw=2.5)
    axes[1].text(0.5, 0.05, "link: remote memory is slower", ha="center", fontsize=7,
                 color="tab:red")
    axes[1].set_title("shared, NUMA\ntwo SMPs linked", fontsize=9)
    for k in range(3):
        x = 0.02 + k * 0.33
        box(axes[2], x, 0.62, 0.28, 0.2, "CPU", "#cde4f7")
        box(axes[2], x, 0.34, 0.28, 0.2, "own\nmemory", "#fde3b5")
        line(axes[2], x + 0.14, 0.32, x + 0.14, 0.16)
    line(axes[2], 0.05, 0.16, 0.95, 0.16, color="tab:green", lw=2.5)
    axes[2].text(0.5, 0.04, "network: send / receive messages", ha="center", fontsize=7,
                 color="tab:green")
    axes[2].set_title("distributed memory\neach processor its own", fontsize=9)
    for k in range(2):
        x = 0.03 + k * 0.5
        box(axes[3], x, 0.55, 0.42, 0.3, "shared-memory\nnode (CPUs\n+ GPU)", "#cde4f7")
        box(axes[3], x, 0.3, 0.42, 0.16, "node memory", "#fde3b5")
        line(axes[3], x + 0.21, 0.28, x + 0.21, 0.16)
    line(axes[3], 0.05, 0.16, 0.95, 0.16, color="tab:green", lw=2.5)
    axes[3].text(0.5, 0.04, "network between nodes", ha="center", fontsize=7,
                 color="tab:green")
    axes[3].set_title("hybrid\n(today's largest machines)", fontsize=9)
    for ax in axes:
        ax.set(xlim=(-0.03, 1.03), ylim=(0, 0.95))
        ax.axis("off")
    fig.tight_layout()
