"""Checks for lesson 02 (parallel models): a race-free threaded sum; a dynamic schedule's
dispenser; Amdahl's bound from a measured speedup (reasoning) and a chunk size for an uneven
loop on real threads (design) — those two in ``_parallel_models_plans``.

Verdicts never depend on scheduling luck: the threaded sum's threads are made to meet at
their first touch of x and again just before their first writes of shared state
(``_parallel_models_race``), so an unguarded shared total loses its updates every time, and
threads that never overlap are seen from their start/join order; the dispenser's lock scope
is tested by pausing one caller inside it while another claims.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from ._core import call_local, fail, passed, run_on_workers, task
from ._diagnose import Cases, Snapshot, describe_value, differs
from ._parallel_models_plans import amdahl_bound, dynamic_chunk
from ._parallel_models_race import MEET_TIMEOUT_S, Meeting, Watched, watch_threads

__all__ = ["threaded_sum", "next_chunk", "amdahl_bound", "dynamic_chunk"]

PROCESSES = 3           # the warm workers that share next_chunk's counter (lesson 00's size)

_RACE_HINT = ("`total += s` on a shared total is a read-modify-write: it reads total, adds, "
              "then writes, and a thread switch between the read and the write (numpy's sum "
              "releases the GIL; the interpreter switches threads every few milliseconds) "
              "lets another thread's update be overwritten. Give each thread its own slot "
              "(partials[t] = block.sum()) and add the slots up after join() — a reduction "
              "— or hold one lock around the read and the write.")


# ------------------------------------------------------------------ task 1: threaded sum

def _sum_case(rng: np.random.Generator) -> dict[str, Any]:
    t = int(rng.integers(2, 7))
    return {"n": int(rng.integers(t, 5000)), "num_threads": t,
            "dtype": str(rng.choice(["float64", "float32"]))}


@task("parallel_models", refuses=("ddl_lab.parallel_models", "parallel_for"))
def threaded_sum(my_threaded_sum: Callable[[np.ndarray, int], float], seed: int = 0) -> None:
    """Lesson 02, task 1: ``my_threaded_sum(x, num_threads)`` returns ``x.sum()`` computed
    by ``num_threads`` threads running at the same time (threading.Thread, or a pool of
    that many workers), each summing one block — with no lost update, x unchanged."""
    fixed = [{"n": 10_007, "num_threads": 4, "dtype": "float64"},
             {"n": 0, "num_threads": 3, "dtype": "float64"},
             {"n": 1, "num_threads": 2, "dtype": "float64"},
             {"n": 3, "num_threads": 5, "dtype": "float64"},
             {"n": 1_000, "num_threads": 1, "dtype": "float64"},
             {"n": 9_973, "num_threads": 3, "dtype": "float64"}]
    cases = Cases("threaded_sum", seed, fixed, draws=3, draw=_sum_case)
    pausing = True                  # off once a paused write waited in vain (a hidden lock)
    for case in cases:
        pausing = _sum_one(my_threaded_sum, case, pausing)
    passed("threaded_sum", f"exact sums on {len(cases)} cases (lengths 0, 1, fewer than the "
           "threads, primes; 1–6 threads; float32 too), the threads running at the same "
           "time, each paused before its writes of shared state: no update lost")


def _sum_one(fn: Callable, case: Any, pausing: bool) -> bool:
    """One case; whether the writes of shared state may still be paused in the next."""
    name = getattr(fn, "__name__", "my_threaded_sum")
    n, t, dtype = case.params["n"], case.params["num_threads"], case.params["dtype"]
    data = (case.rng.integers(0, 1000, n).astype(dtype) if dtype == "float64" else
            case.rng.uniform(-1, 1, n).astype(dtype))       # whole numbers: exact sums
    busy = n >= t > 1                                         # every block has work
    meeting = Meeting(t if busy else 1)
    meeting.gave_up = not pausing
    x = data.copy().view(Watched)
    x.meeting = meeting
    inputs = Snapshot(x=np.asarray(x))
    with watch_threads(meeting):
        got = call_local(fn, x, t)
    if inputs.changed(name):
        fail(f"{inputs.changed(name)} [{case}]")
    want = float(data.astype(np.float64).sum())
    _judge_sum(name, got, want, data, case, meeting.writes)
    if busy and meeting.started < t - 1:
        fail(f"with num_threads={t}, {name} started {meeting.started} thread(s): start {t} "
             "threads (threading.Thread(target=..., args=...).start(), then join()), each "
             f"summing one block [{case}].")
    if busy and meeting.most_open < min(t, 2) and meeting.started >= t - 1:
        fail(f"with num_threads={t}, each thread was joined before the next one was "
             "started, so no two ever ran at the same time: start ALL the threads first, "
             f"then join them all in a second loop [{case}].")
    if busy and meeting.apart:
        fail(f"with num_threads={t}, the threads did not sum their blocks at the same time: "
             f"when one began, the others did not reach their sums within "
             f"{MEET_TIMEOUT_S:g} s — a lock held around the whole sum, or the calling thread "
             "summing before it started the others, serialises the work. Sum each block "
             f"outside any lock into a private slot, and add the slots after join() [{case}].")
    return not meeting.gave_up


def _judge_sum(name: str, got: Any, want: float, x: np.ndarray, case: Any,
               writes: list[str]) -> None:
    try:
        value = float(got)
    except (TypeError, ValueError):
        fail(f"{name} returned {describe_value(got)}; return the sum as a number [{case}].")
    scale = float(np.abs(x.astype(np.float64)).sum()) or 1.0
    if differs(np.asarray(want, x.dtype), np.asarray(value, x.dtype), scale=scale) is None:
        return
    n, t = len(x), case.params["num_threads"]
    blocks = [x[k * n // t:(k + 1) * n // t] for k in range(t)]
    wrong = {
        f"the last {n % t} element(s) are missing: with blocks of n // num_threads the "
        "remainder of a length that num_threads does not divide is dropped — end the last "
        "block at n (block k is x[k * n // num_threads:(k + 1) * n // num_threads])":
            x[:t * (n // t)].sum() if n % t else None,
        "the last element of every block is missing: slice ends are exclusive, "
        "x[lo:hi] already stops before hi": sum(b[:-1].sum() for b in blocks),
    }
    for why, candidate in wrong.items():
        if candidate is not None and t > 1 and np.isclose(float(candidate), value, rtol=0,
                                                          atol=1e-9 * scale):
            fail(f"with num_threads={t} on {n:,} numbers {name} returned {value:,.6g}, "
                 f"expected {want:,.6g}: {why} [{case}].")
    if t > 1 and value < want and x.dtype == np.float64 and (x >= 0).all():
        paused = (f" The check paused each thread just before it wrote {writes[0]}, until the "
                  "others had reached their writes too: each had read the old total, so "
                  "each write overwrote the others'." if writes else "")
        fail(f"lost update: with {t} threads on {n:,} numbers {name} returned {value:,.0f}, "
             f"expected {want:,.0f} — {want - value:,.0f} is missing.{paused} {_RACE_HINT} "
             f"[{case}]")
    fail(f"with num_threads={t} on {n:,} numbers {name} returned {value:,.6g}, expected "
         f"{want:,.6g}. Do the blocks cover x exactly once? E.g. block k is "
         f"x[k * n // num_threads:(k + 1) * n // num_threads] [{case}].")


# ------------------------------------------------------------------ task 2: next_chunk

class _SpyLock:
    """A threading lock that counts how often it was taken and knows whether it is held;
    optionally it pauses one thread (``hold``) before acquiring or after releasing."""

    def __init__(self, pause: str | None = None):
        self._lock, self.taken, self.held = threading.Lock(), 0, False
        self.pause, self.hold = pause, None
        self.paused, self.resume = threading.Event(), threading.Event()

    def __enter__(self) -> "_SpyLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _maybe_pause(self, when: str) -> None:
        if self.pause == when and threading.get_ident() == self.hold and not self.paused.is_set():
            self.paused.set()
            self.resume.wait(5.0)

    def acquire(self, *args: object, **kwargs: object) -> bool:
        self._maybe_pause("acquire")
        if not self._lock.acquire(timeout=2):
            raise TimeoutError("the lock was still held by an earlier call after 2 s: "
                               "release it (`with lock:` does that for you)")
        self.taken, self.held = self.taken + 1, True
        return True

    def release(self) -> None:
        self.held = False
        self._lock.release()
        self._maybe_pause("release")


def _chunk_case(rng: np.random.Generator) -> dict[str, Any]:
    stop = int(rng.integers(0, 40))
    return {"chunk": int(rng.integers(1, 8)), "stop": stop,
            "start": int(rng.integers(0, stop + 1))}


@task("parallel_models", refuses=("ddl_lab.parallel_models", "next_chunk", "guided_chunk"))
def next_chunk(my_next_chunk: Callable, seed: int = 0, stop: int = 20_011) -> None:
    """Lesson 02, task 2: ``my_next_chunk(next_iter, lock, chunk, stop)`` claims the next
    chunk of a dynamic schedule — read and move next_iter[0] inside one hold of the lock —
    and three real processes sharing the counter claim every iteration exactly once."""
    name = getattr(my_next_chunk, "__name__", "my_next_chunk")
    fixed = [{"chunk": 4, "stop": 10, "start": 0}, {"chunk": 3, "stop": 13, "start": 2},
             {"chunk": 1, "stop": 1, "start": 0}, {"chunk": 5, "stop": 0, "start": 0},
             {"chunk": 7, "stop": 5, "start": 5}, {"chunk": 50, "stop": 17, "start": 0}]
    cases = Cases("next_chunk", seed, fixed, draws=3, draw=_chunk_case)
    for case in cases:
        _claims_in_turn(my_next_chunk, name, case)
    for pause in ("acquire", "release"):
        _forced_interleaving(my_next_chunk, name, pause)
    with shared_file(16) as path:
        out = run_on_workers(_claim_on_worker, PROCESSES, my_next_chunk, path, FileLock(path),
                             3, stop, learner_fn=my_next_chunk)
    claims = [np.asarray(c).reshape(-1, 2) for c in out]
    seen = np.zeros(stop, dtype=np.int64)
    for pairs in claims:
        for lo, hi in pairs:
            seen[lo:hi] += 1
    if (seen != 1).any():
        k = int(np.flatnonzero(seen != 1)[0])
        fail(f"{PROCESSES} processes sharing the counter claimed iteration {k} {seen[k]} times "
             f"({int((seen > 1).sum()):,} claimed twice, {int((seen == 0).sum()):,} never, of "
             f"{stop:,}): every iteration must be handed out exactly once.")
    counts = [len(p) for p in claims]
    passed("next_chunk", f"right chunks on {len(cases)} cases (chunk 1–50, stop 0–39, "
           "counters already moved on); the read and the write of next_iter[0] happen in "
           f"one hold of the lock; {PROCESSES} processes claimed all {stop:,} iterations "
           f"exactly once ({' + '.join(f'{c:,}' for c in counts)} chunks of 3)")


def _claims_in_turn(fn: Callable, name: str, case: Any) -> None:
    c, stop, start = case.params["chunk"], case.params["stop"], case.params["start"]
    counter, lock = np.array([start], np.int64), _SpyLock()
    want = [range(lo, min(lo + c, stop)) for lo in range(start, stop, c)] + [None, None]
    got = []
    for _ in want:
        got.append(call_local(fn, counter, lock, c, stop))
        if lock.held:
            fail(f"{name} returned while still holding the lock: release it on every path "
                 f"(`with lock:` does that, also on an early `return None`) [{case}].")
    if got != want:
        k = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        hint = (" — return a range object, range(lo, hi)" if got[k] is not None and
                not isinstance(got[k], range) else
                " — the last chunk must stop at `stop`: hi = min(lo + chunk, stop)"
                if isinstance(got[k], range) and want[k] is not None and got[k].stop > stop
                else " — once next_iter[0] >= stop there is nothing left: return None"
                if want[k] is None else "")
        fail(f"called {len(want)} times on a counter at {start} with chunk={c}, stop={stop}, "
             f"{name} returned {got}; expected {want}: call {k} is wrong{hint} [{case}].")
    if counter[0] != max(start, stop):
        fail(f"after claiming everything next_iter[0] is {counter[0]}, expected "
             f"{max(start, stop)}: move the shared counter to the end of each chunk you hand "
             f"out (next_iter[0] = hi), and leave it alone when you return None [{case}].")
    if lock.taken < len(want) - 2:
        fail(f"{name} took the lock {lock.taken} times in {len(want)} calls: reading "
             "next_iter[0] and moving it on is a read-modify-write of shared memory, so two "
             "workers can claim the same chunk. Do both inside `with lock:` (OpenMP's "
             f"critical section) on every call [{case}].")


def _forced_interleaving(fn: Callable, name: str, pause: str) -> None:
    """Pause one caller just before it takes the lock (or just after it lets go), let a
    second caller claim meanwhile, then let the first go on: their chunks must not overlap."""
    counter, lock = np.zeros(1, np.int64), _SpyLock(pause)
    first: list[Any] = []

    def paused_worker() -> None:
        lock.hold = threading.get_ident()
        first.append(_quiet(fn, counter, lock, 3, 100))

    a = threading.Thread(target=paused_worker, daemon=True)
    a.start()
    while a.is_alive() and not lock.paused.wait(0.01):
        pass
    second = call_local(fn, counter, lock, 3, 100)
    lock.resume.set()
    a.join(10.0)
    if not first or isinstance(first[0], BaseException):
        return                                      # its own failure shows in the other cases
    mine, theirs = first[0], second
    if isinstance(mine, range) and isinstance(theirs, range) and set(mine) & set(theirs):
        when = ("read next_iter[0] BEFORE taking the lock" if pause == "acquire" else
                "wrote next_iter[0] AFTER releasing the lock")
        fail(f"race: two workers claimed the same iterations — {mine} and {theirs}. The "
             f"check paused one worker between its read and its write of the counter while "
             f"another claimed: {name} {when}, so the other saw the old value. The read AND "
             "the write of next_iter[0] must happen inside the same `with lock:` block.")


def _quiet(fn: Callable, *args: Any) -> Any:
    try:
        return fn(*args)
    except BaseException as e:                      # noqa: BLE001 — reported by the caller
        return e


# ------------------------------------------------------------------ real processes

@contextmanager
def shared_file(nbytes: int) -> Iterator[str]:
    """A zeroed file in shared memory (/dev/shm where there is one) that warm workers map
    by its path; removed afterwards. Lessons 02 and 03 put counters, θ and locks in it."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
    fd, path = tempfile.mkstemp(prefix="ddl_lab-check-", dir=folder)
    try:
        os.ftruncate(fd, nbytes)
        os.close(fd)
        yield path
    finally:
        os.unlink(path)


class FileLock:
    """A lock that processes share by a file's path (``fcntl.flock``), so warm workers
    started before it existed can take it. It counts its acquisitions in the file's first
    8 bytes, and waiting longer than ``timeout`` raises instead of hanging."""

    def __init__(self, path: str, timeout: float = 10.0):
        self.path, self.timeout = path, timeout
        self._fd: int | None = None
        self._count: np.ndarray | None = None

    def __getstate__(self) -> tuple[str, float]:
        return self.path, self.timeout

    def __setstate__(self, state: tuple[str, float]) -> None:
        self.__init__(*state)

    def __enter__(self) -> "FileLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    @property
    def acquisitions(self) -> int:
        return int(np.fromfile(self.path, np.int64, 1)[0])

    def acquire(self, *args: object, **kwargs: object) -> bool:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR)
            self._count = np.memmap(self.path, np.int64, "r+", shape=(1,))
        deadline, tries = time.monotonic() + self.timeout, 0
        while True:
            try:
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"waited {self.timeout:g} s for the lock: did another "
                                       "process take it and never release it?") from None
                tries += 1
                time.sleep(0 if tries < 100 else 1e-4)
        self._count[0] += 1                  # safe: we hold the lock
        return True

    def release(self) -> None:
        fcntl.flock(self._fd, fcntl.LOCK_UN)


def _claim_on_worker(fn: Callable, path: str, lock: FileLock, chunk: int,
                     stop: int) -> np.ndarray:
    """On a warm worker: claim chunks with the learner's dispenser until it says None."""
    counter = np.memmap(path, np.int64, "r+", offset=8, shape=(1,))
    claimed: list[tuple[int, int]] = []
    while (r := fn(counter, lock, chunk, stop)) is not None:
        if not isinstance(r, range):
            raise TypeError(f"it returned {type(r).__name__} {r!r}; return a range or None")
        claimed.append((r.start, r.stop))
        if len(claimed) > stop + 1:
            raise RuntimeError(f"it handed out more than {stop} chunks for {stop} iterations "
                               "and never returned None: does it move the shared counter "
                               "on, and return None once it reaches stop?")
    return np.array(claimed, dtype=np.int64)


# ------------------------------------------------------------------ task 3 (reasoning)

# ------------------------------------------------------------------ task 4 (design)

