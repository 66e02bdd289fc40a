"""Checks for lesson 02 (parallel models): a race-free threaded sum, a dynamic schedule's
dispenser, Amdahl's bound (reasoning) and a chunk size for an uneven loop (design)."""
from __future__ import annotations

import dis
import fcntl
import math
import os
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

from . import _answers as answers
from ._core import call_local, fail, judge, on_workers, passed, run_beside, task
from ._diagnose import (Case, Snapshot, apart, describe_value, differs, explain, returned_none,
                        same, table)
from ._trial import Trial

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
    fixed = [{"n": n, "num_threads": t, "dtype": "float64"}
             for n, t in ((10_007, 4), (0, 3), (1, 2), (3, 5), (1_000, 1), (9_973, 3))]
    trial = Trial("threaded_sum", my_threaded_sum, seed, fixed, draws=3, draw=_sum_case,
                  name="my_threaded_sum")
    pausing = True                  # off once a paused write waited in vain (a hidden lock)
    for case in trial:
        pausing = run_beside(_sum_one, my_threaded_sum, trial.name, case, pausing)
    passed("threaded_sum", f"exact sums on {len(trial)} cases (lengths 0, 1, fewer than the "
           "threads, primes; 1–6 threads; float32 too), the threads running at the same "
           "time, each paused before its writes of shared state: no update lost")


def _sum_one(fn: Callable, name: str, case: Any, pausing: bool) -> bool:
    """One case; whether the writes of shared state may still be paused in the next."""
    n, t, dtype = case.params["n"], case.params["num_threads"], case.params["dtype"]
    data = (case.rng.integers(0, 1000, n).astype(dtype) if dtype == "float64" else
            case.rng.uniform(-1, 1, n).astype(dtype))       # whole numbers: exact sums
    busy = n >= t > 1                                         # every block has work
    meeting = Meeting(t if busy else 1)
    meeting.gave_up = not pausing
    x = data.copy().view(Watched)
    x.watcher = meeting
    inputs = Snapshot(x=np.asarray(x))
    with watch_threads(meeting):
        got = call_local(fn, x, t)
    judge(inputs.changed(name), case)
    _judge_sum(name, got, float(data.astype(np.float64).sum()), data, case, meeting.writes)
    for serial, why in (
            (meeting.started < t - 1, f"{name} started {meeting.started} thread(s): start {t} "
             "threads (threading.Thread(target=..., args=...).start(), then join()), each "
             "summing one block"),
            (meeting.most_open < min(t, 2), "each thread was joined before the next one was "
             "started, so no two ever ran at the same time: start ALL the threads first, "
             "then join them all in a second loop"),
            (meeting.apart, "the threads did not sum their blocks at the same time: when one "
             f"began, the others did not reach their sums within {MEET_TIMEOUT_S:g} s — a lock "
             "held around the whole sum, or the calling thread summing before it started the "
             "others, serialises the work. Sum each block outside any lock into a private "
             "slot, and add the slots after join()")):
        if busy and serial:
            fail(f"with num_threads={t}, {why} [{case}].")
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
            shown, wanted = apart(value, want, ",")
            fail(f"with num_threads={t} on {n:,} numbers {name} returned {shown}, "
                 f"expected {wanted}: {why} [{case}].")
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

class Held:
    """``with lock:`` for lessons 02 and 03's locks, as for ``threading.Lock``: acquire, release."""

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class SpyLock(Held):
    """A threading lock that counts how often it was taken and knows whether it is held;
    optionally it pauses one thread (``hold``) before acquiring or after releasing."""
    stuck = ("the lock was still held by an earlier call after 2 s: release it (`with lock:` "
             "does that for you)")

    def __init__(self, pause: str | None = None):
        self._lock, self.taken, self.held = threading.Lock(), 0, False
        self.pause, self.hold = pause, None
        self.paused, self.resume = threading.Event(), threading.Event()

    def _maybe_pause(self, when: str) -> None:
        if self.pause == when and threading.get_ident() == self.hold and not self.paused.is_set():
            self.paused.set()
            self.resume.wait(5.0)

    def acquire(self, *args: object, **kwargs: object) -> bool:
        self._maybe_pause("acquire")
        if not self._lock.acquire(timeout=2):
            raise TimeoutError(self.stuck)
        self.taken, self.held = self.taken + 1, True
        return True

    def release(self) -> None:
        self.held = False
        self._lock.release()
        self._maybe_pause("release")


def _chunk_case(rng: np.random.Generator) -> dict[str, Any]:
    stop = int(rng.integers(0, 40))
    return {"chunk": int(rng.integers(1, 8)), "stop": stop, "start": int(rng.integers(0, stop + 1))}


@task("parallel_models", refuses=("ddl_lab.parallel_models", "next_chunk", "guided_chunk"))
def next_chunk(my_next_chunk: Callable, seed: int = 0, stop: int = 20_011) -> None:
    """Lesson 02, task 2: ``my_next_chunk(next_iter, lock, chunk, stop)`` claims the next
    chunk of a dynamic schedule — read and move next_iter[0] inside one hold of the lock —
    and three real processes sharing the counter claim every iteration exactly once."""
    trial = Trial("next_chunk", my_next_chunk, seed, table(
        "chunk stop start", (4, 10, 0), (3, 13, 2), (1, 1, 0), (5, 0, 0), (7, 5, 5), (50, 17, 0)),
        draws=3, draw=_chunk_case, name="my_next_chunk")
    for case in trial:
        run_beside(_claims_in_turn, my_next_chunk, trial.name, case)
    for pause in ("acquire", "release"):
        run_beside(_forced_interleaving, my_next_chunk, trial.name, pause)
    with shared_file(16) as path:
        out = on_workers(_claim_on_worker, PROCESSES, my_next_chunk, path, FileLock(path), 3,
                         stop, fn=my_next_chunk)
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
    passed("next_chunk", f"right chunks on {len(trial)} cases (chunk 1–50, stop 0–39, "
           "counters already moved on); the read and the write of next_iter[0] happen in "
           f"one hold of the lock; {PROCESSES} processes claimed all {stop:,} iterations "
           f"exactly once ({' + '.join(f'{len(c):,}' for c in claims)} chunks of 3)")


def _claims_in_turn(fn: Callable, name: str, case: Any) -> None:
    c, stop, start = case.params["chunk"], case.params["stop"], case.params["start"]
    counter, lock = np.array([start], np.int64), SpyLock()
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
    counter, lock = np.zeros(1, np.int64), SpyLock(pause)
    first: list[Any] = []

    def paused_worker() -> None:
        lock.hold = threading.get_ident()
        try:
            first.append(fn(counter, lock, 3, 100))
        except BaseException as e:                  # noqa: BLE001 — its own failure shows later
            first.append(e)

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


# ------------------------------------------------------------------ real processes

@contextmanager
def shared_file(nbytes: int) -> Iterator[str]:
    """A zeroed file in shared memory (/dev/shm where there is one; when grading, the run's
    folder the sandbox shares, ``DDL_LAB_SHARED_DIR``) that warm workers map by its path;
    removed afterwards. Lessons 02 and 03 put counters, θ and locks in it."""
    folder = os.environ.get("DDL_LAB_SHARED_DIR") or (
        "/dev/shm" if os.path.isdir("/dev/shm") else None)
    fd, path = tempfile.mkstemp(prefix="ddl_lab-check-", dir=folder)
    try:
        os.ftruncate(fd, nbytes)
        os.close(fd)
        yield path
    finally:
        os.unlink(path)


class FileLock(Held):
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

def _amdahl_case(rng: np.random.Generator) -> dict[str, Any]:
    n = int(rng.integers(2, 33))
    return {"n": n, "speedup": float(f"{rng.uniform(1.05, 0.95 * n):.3g}"),
            "cores": int(2 ** rng.uniform(1, 12))}


@task("parallel_models", refuses=("ddl_lab.parallel_models", "amdahl", "fit_parallel_fraction"))
def amdahl_bound(my_amdahl_bound: Callable, seed: int = 0) -> None:
    """Lesson 02, task 3: ``my_amdahl_bound(n, speedup, cores)`` — a speedup measured on n
    workers — returns ``(serial_fraction, speedup_on_cores)``: f = (n/S − 1)/(n − 1) from
    Amdahl's S = 1/(f + (1 − f)/n), and 1/(f + (1 − f)/cores)."""
    trial = Trial("amdahl_bound", my_amdahl_bound, seed, table(
        "n speedup cores", (4, 3.0, 16), (2, 2.0, 64), (8, 1.0, 3), (2, 1.6, 1024), (6, 2.2, 6)),
        draws=3, draw=_amdahl_case, name="my_amdahl_bound")
    for case in trial:
        n, s, cores = case.params["n"], case.params["speedup"], case.params["cores"]
        got = trial.call(case, n, s, cores)
        f, sp = answers.two_numbers(got, ("serial_fraction", "speedup"), trial.name, case)
        rtol = answers.answer_rtol(got)
        want_f = (n / s - 1) / (n - 1)
        want_s = 1 / (want_f + (1 - want_f) / cores)
        if not same(want_f, f, rtol=rtol, scale=1.0):
            fail(f"measured S({n}) = {s:g}: serial fraction {f:.6g}, expected (n/S − 1)/(n − 1)"
                 f" = {want_f:.6g} — {_fraction_fault(f, n, s, want_f)} [{case}].")
        if not same(want_s, sp, rtol=rtol):
            fail(f"the serial fraction {f:.4g} is right; the speedup on {cores} cores is "
                 f"{sp:.6g}, expected 1/(f + (1 − f)/{cores}) = {want_s:.6g} — "
                 f"{_speedup_fault(sp, f, n, s, cores)} [{case}].")
    passed("amdahl_bound", f"on {len(trial)} measurements (perfect, none, 2–32 workers, up to "
           "4096 cores): f = (n/S − 1)/(n − 1) and S(cores) = 1/(f + (1 − f)/cores) ≤ 1/f")


def _fraction_fault(f: float, n: int, s: float, right: float) -> str:
    return explain(f, {
        "that is 1 − S/n, one minus the efficiency: idle time is not the serial fraction. "
        "Solve S = 1/(f + (1 − f)/n) for f": 1 - s / n,
        "that is the parallel fraction p = 1 − f; the serial fraction is what is left": 1 - right,
        "divide by n − 1, not n: 1/S = f + (1 − f)/n ⇒ n/S − 1 = f·(n − 1)":
            (n / s - 1) / n,
        "1/S is the time on n workers as a fraction of one, not the serial fraction": 1 / s,
    }, 1e-6, right, 1.0) or "solve Amdahl's law S = 1/(f + (1 − f)/n) for f"


def _speedup_fault(sp: float, f: float, n: int, s: float, cores: int) -> str:
    right = 1 / (f + (1 - f) / cores)
    return explain(sp, {
        "that scales the measured speedup linearly (S·cores/n): the serial part does not "
        "shrink with more cores": s * cores / n,
        "1/f is the limit for infinitely many cores, not for this many": 1 / f if f else math.inf,
        "that divides the serial part by the cores: it is the parallel part (1 − f) that "
        "shrinks": 1 / ((1 - f) + f / cores),
        "that is Gustafson's scaled speedup f + (1 − f)·cores, for a problem that grows with "
        "the machine; Amdahl's law keeps the problem fixed": f + (1 - f) * cores,
    }, 1e-6, right, 1.0) or "plug the serial fraction into S = 1/(f + (1 − f)/cores)"


# ------------------------------------------------------------------ task 4 (design)
# The chunk is run with ``parallel_for(schedule="dynamic")`` on real threads (each iteration
# sleeps its cost); the balance judged is that of its chunks each claimed by the first free
# thread, so a busy machine cannot flip the verdict; the real split is quoted beside it.

UNIT_S = 5e-5                   # seconds a unit of cost sleeps in the real run
CHUNK_CASES = table("loop n threads max_claims max_imbalance",
                    ("triangular", 120, 4, 30, 1.13), ("uniform", 120, 4, 10, 1.05))


def loop_costs(case: Case) -> np.ndarray:
    """The cost of each iteration: 1, 2, …, n (triangular), 60 each (uniform), or a heavy
    tail drawn from the case's generator (random)."""
    p = case.params
    if p["loop"] == "triangular":
        return np.arange(1, p["n"] + 1)
    if p["loop"] == "uniform":
        return np.full(p["n"], 60)
    return np.minimum(1 + np.floor(5 * case.rng.pareto(1.5, p["n"])), 200).astype(int)


def balance(costs: np.ndarray, threads: int, chunk: int) -> tuple[float, list[float]]:
    """Busiest thread's work over the mean, and each thread's work, when the chunks of a
    dynamic schedule go in order to whichever thread is free first (ties: the lowest)."""
    finish = [0.0] * threads
    for lo in range(0, len(costs), chunk):
        t = finish.index(min(finish))
        finish[t] += float(costs[lo:lo + chunk].sum())
    return max(finish) / (sum(finish) / threads), finish


def _chunk_draw(rng: np.random.Generator, real: bool) -> dict[str, Any]:
    """A loop the prompt does not show: run on threads (``real``: heavy-tailed, 60–160
    iterations, 2–6 threads and claims per thread's share) or judged on paper, far from the
    prompt's (triangular, uniform or heavy-tailed, 40–400 iterations, 2–8 threads and claims
    per thread's share); its bound is set by ``_chunk_loop``."""
    n = int(rng.integers(60, 161) if real else rng.integers(40, 401))
    threads = int(rng.integers(2, 7 if real else 9))
    loop = "random" if real else str(rng.choice(["triangular", "uniform", "random"]))
    return {"loop": loop, "n": n, "threads": threads,
            "max_claims": math.ceil(n / int(rng.integers(2, 7 if real else 9))),
            "max_imbalance": None}


CHUNK_REAL = len(CHUNK_CASES) + 1     # the prompt's two loops and one drawn run on threads


def _chunk_loop(case: Case) -> np.ndarray:
    """A case's loop costs; a drawn loop's bound is set 0.05 above the best balance a chunk
    within its claims reaches."""
    p, costs = case.params, loop_costs(case)
    if p["max_imbalance"] is None:
        best = min(balance(costs, p["threads"], c)[0]
                   for c in range(math.ceil(p["n"] / p["max_claims"]), p["n"] + 1))
        p["max_imbalance"] = math.ceil(100 * (best + 0.05)) / 100
    return costs


def _run_threads(costs: np.ndarray, threads: int, chunk: int) -> tuple[int, list[float]]:
    """The loop on real threads, schedule(dynamic, chunk): chunks claimed, work per thread."""
    from ddl_lab.parallel_models.threads import parallel_for
    work: dict[int, float] = {}
    guard = threading.Lock()

    def body(i: int) -> None:
        time.sleep(float(costs[i]) * UNIT_S)
        me = threading.get_ident()
        with guard:
            work[me] = work.get(me, 0.0) + float(costs[i])

    result = parallel_for(body, len(costs), num_threads=threads, schedule="dynamic",
                          chunk=chunk, timeout=30.0)
    split = sorted(work.values(), reverse=True) + [0.0] * (threads - len(work))
    return len(result.chunks), split


@task("parallel_models")
def dynamic_chunk(my_dynamic_chunk: Callable, seed: int = 0) -> None:
    """Lesson 02, task 4: ``my_dynamic_chunk(costs, num_threads, max_claims, max_imbalance)``
    returns a chunk size with which ``schedule(dynamic, chunk)`` hands out at most
    max_claims chunks and leaves the busiest thread at most max_imbalance × the mean work
    (each chunk going to the first free thread): on real threads for a triangular, a uniform
    and a random heavy-tailed loop, on paper for four more loops drawn far from them (40–400
    iterations, 2–8 threads), so that the chunk must be computed from its inputs."""
    threads = iter([True] + [False] * 4)          # one drawn loop on threads, four on paper
    trial = Trial("dynamic_chunk", my_dynamic_chunk, seed, CHUNK_CASES, draws=5,
                  draw=lambda rng: _chunk_draw(rng, next(threads)), name="my_dynamic_chunk",
                  plan=True)
    name, loops = trial.name, [_chunk_loop(case) for case in trial]
    outs = [trial.call(c, costs.copy(), *(c.params[k] for k in ("threads", "max_claims",
                                                                "max_imbalance")),
                       where=_loop_words(c)) for c, costs in zip(trial, loops)]
    same = answers.same_for_all([answers.whole(o) for o in outs])
    report = []
    for case, costs, got in zip(trial, loops, outs):
        p = case.params
        chunk = answers.whole(got)
        if chunk is None or not 1 <= chunk <= p["n"]:
            fail((returned_none(got, name, "a chunk size") or
                  f"{name} returned {describe_value(got)}; the chunk is a whole number of "
                  f"iterations from 1 to n = {p['n']}") + f"{same} [{case}].")
        real = case.index < CHUNK_REAL
        claims, split = _run_threads(costs, p["threads"], chunk) if real else \
            (math.ceil(p["n"] / chunk), None)
        ratio = balance(costs, p["threads"], chunk)[0]
        measured = f" (on the real threads, busy as this machine is: " \
                   f"{max(split) / (sum(split) / p['threads']):.2f}×)" if real else ""
        if claims > p["max_claims"]:
            floor = (f" (⌊n/max_claims⌋ = {chunk} is enough only when max_claims divides n "
                     f"= {p['n']}: round up)" if chunk == p["n"] // p["max_claims"] else "")
            fail(f"chunk {chunk}: the dispenser handed out {claims} chunks, more than "
                 f"max_claims = {p['max_claims']} — every claim is a trip through the lock: "
                 f"a chunk of at least ⌈n/max_claims⌉ = {math.ceil(p['n'] / p['max_claims'])}"
                 f"{floor}.{same} [{case}]")
        if ratio > p["max_imbalance"]:
            fail(f"chunk {chunk}: {claims} claims (≤ {p['max_claims']}), but the busiest "
                 f"thread gets {ratio:.3f}× the mean work, over max_imbalance = "
                 f"{p['max_imbalance']:g} — {_balance_fault(costs, p['threads'], chunk)}"
                 f"{measured}.{same} [{case}]")
        if real:
            report.append(f"{p['loop']}: chunk {chunk}, {claims} claims, {ratio:.3f}×{measured}")
    passed("dynamic_chunk", "on real threads — " + "; ".join(report) + f"; and on paper for "
           f"{len(trial) - CHUNK_REAL} more loops drawn far from them")


def _loop_words(case: Case) -> str:
    p = case.params
    return (f"a {p['loop']} loop of {p['n']} iterations on {p['threads']} threads, max_claims = "
            f"{p['max_claims']}, max_imbalance = {p['max_imbalance']:g}")


def _balance_fault(costs: np.ndarray, threads: int, chunk: int) -> str:
    """Why the threads' shares of a dynamic schedule came out uneven."""
    pieces = [float(costs[lo:lo + chunk].sum()) for lo in range(0, len(costs), chunk)]
    share = sum(pieces) / threads
    if len(pieces) <= threads:
        return (f"{len(pieces)} chunk(s) for {threads} threads is a static split in disguise: "
                "nothing is left to balance once the first claims are made")
    if max(pieces) / min(pieces[:-1] or pieces) < 1.5 and len(pieces) % threads:
        short = threads - len(pieces) % threads
        return (f"the {len(pieces)} chunks are about equal, but {len(pieces)} is not a "
                f"multiple of {threads}: in the last round {short} thread(s) get nothing — "
                "choose a chunk whose number of chunks the threads share evenly")
    return (f"the largest chunk costs {max(pieces) / share:.0%} of a thread's fair share "
            f"({share:.0f} units): near the end of the loop, chunks that big cannot be evened "
            "out — simulate the claims (each chunk to the first free thread) for a few sizes")


# ------------------------------------------------------------------
# The threaded sum, watched (issue 26, "a race the check cannot observe"): every thread waits
# at its first touch of x until all have touched it, and is paused (traced opcode by opcode)
# just before its first writes of shared state until the others reach theirs, finish, or
# wait for a held lock — so an unguarded `total += s` loses its updates every time.

MEET_TIMEOUT_S = 3.0    # how long the first thread to touch x waits for the others
STORE_TIMEOUT_S = 2.0   # how long a paused write waits for the others (then pauses stop)
STORE_PAUSES = 2        # writes of shared state paused per thread
_SHARED_STORES = {"STORE_GLOBAL": "the global `{}`",
                  "STORE_DEREF": "`{}`, a variable of the enclosing function",
                  "STORE_ATTR": "the attribute `.{}` of a shared object",
                  "STORE_SUBSCR": "an element of a shared container",
                  "STORE_SLICE": "a slice of a shared container"}


class Meeting:
    """Who works on x: the threads that touch it, thread starts and joins; the first touch
    in each thread waits until ``parties`` threads have touched x (or that cannot happen).
    Then each thread's first writes of shared state wait for the others' (``store``)."""

    def __init__(self, parties: int):
        self.parties, self.cond = parties, threading.Condition()
        self.caller = threading.get_ident()
        self.touched: set[int] = set()
        self.started = self.open = self.most_open = 0
        self.joining = self.apart = self.gave_up = False
        self.arrivals: dict[int, int] = {}           # paused writes per thread
        self.done: set[int] = set()
        self.waiting_on: dict[int, "_NotedLock"] = {}
        self.writes: list[str] = []                  # what the paused writes wrote

    def note(self, what: str) -> None:
        """A thread touched x (read or write alike)."""
        me = threading.get_ident()
        with self.cond:
            if me in self.touched:
                return
            self.touched.add(me)
            self.cond.notify_all()
            alone = me == self.caller and self.started < self.parties - 1   # none can come
            met = alone or self.cond.wait_for(
                lambda: len(self.touched) >= self.parties or self.apart
                or (self.joining and self.started < self.parties), MEET_TIMEOUT_S)
            if not met or len(self.touched) < self.parties:
                self.apart = True
                self.cond.notify_all()

    def store(self, what: str) -> None:
        """Pause this thread before a write of shared state until every other thread that
        works on x has reached as many such writes, finished, or waits for a held lock."""
        me = threading.get_ident()
        with self.cond:
            if (self.parties < 2 or self.apart or self.gave_up or me == self.caller
                    or me not in self.touched or len(self.touched) < self.parties
                    or self.arrivals.get(me, 0) >= STORE_PAUSES):
                return
            self.arrivals[me] = k = self.arrivals.get(me, 0) + 1
            self.writes.append(what)
            self.cond.notify_all()
            others = self.touched - {me, self.caller}
            if not self.cond.wait_for(lambda: all(self._settled(q, k) for q in others),
                                      STORE_TIMEOUT_S):
                self.gave_up = True                  # e.g. a lock the check cannot see
                self.cond.notify_all()

    def _settled(self, q: int, k: int) -> bool:
        lock = self.waiting_on.get(q)
        return (self.arrivals.get(q, 0) >= k or q in self.done or
                lock is not None and lock.holder not in (None, q))


class Watched(np.ndarray):
    """An array, its slices too, that tells its ``watcher`` (``note``) when a thread reads or
    writes it: x as lesson 02's learner gets it (a ``Meeting``), θ in lesson 03's."""
    watcher: Any = None

    def __array_finalize__(self, obj: Any) -> None:
        self.watcher = getattr(obj, "watcher", None)

    def note(self, what: str) -> None:
        if self.watcher is not None:
            self.watcher.note(what)

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        self.note("read")
        outs = kwargs.get("out", ())
        if method == "at" or any(isinstance(o, Watched) for o in outs):
            self.note("write")
        if outs:
            kwargs["out"] = tuple(np.asarray(o) if isinstance(o, Watched) else o for o in outs)
        return getattr(ufunc, method)(*(np.asarray(i) if isinstance(i, Watched) else i
                                        for i in inputs), **kwargs)

    def __iter__(self) -> Iterator[Any]:
        self.note("read")
        return iter(np.asarray(self).tolist())


class _NotedLock(Held):
    """``threading.Lock()`` while the check runs: a real lock that tells the meeting who
    holds it and who waits for it (a thread waiting for a held lock cannot reach a write)."""

    def __init__(self, meeting: Meeting, inner: Any):
        self._m, self._inner, self.holder = meeting, inner, None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me, got = threading.get_ident(), False
        with self._m.cond:
            self._m.waiting_on[me] = self
            self._m.cond.notify_all()
        try:
            got = self._inner.acquire(blocking, timeout)
        finally:
            with self._m.cond:
                self._m.waiting_on.pop(me, None)
                if got:
                    self.holder = me
                self._m.cond.notify_all()
        return got

    def release(self) -> None:
        with self._m.cond:
            self.holder = None
            self._inner.release()
            self._m.cond.notify_all()

    def locked(self) -> bool:
        return self._inner.locked()


_LIBRARY = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
                 | {os.path.dirname(os.path.dirname(os.path.realpath(__file__)))})
_STORES: dict[Any, dict[int, str] | None] = {}


def _shared_writes(code: Any) -> dict[int, str] | None:
    """Offsets of the writes of shared state in the learner's ``code`` (None: not the
    learner's — the standard library, site-packages, ddl_lab)."""
    if code not in _STORES:
        mine = not (code.co_filename.startswith("<frozen") or
                    os.path.realpath(code.co_filename).startswith(_LIBRARY))
        _STORES[code] = {i.offset: _SHARED_STORES[i.opname].format(i.argval)
                         for i in dis.get_instructions(code)
                         if i.opname in _SHARED_STORES} if mine else None
    return _STORES[code]


def _tracer(meeting: Meeting) -> Callable:
    def opcodes(frame: Any, event: str, arg: Any) -> Callable:
        if event == "opcode" and (what := _shared_writes(frame.f_code).get(frame.f_lasti)):
            meeting.store(what)
        return opcodes

    def calls(frame: Any, event: str, arg: Any) -> Callable | None:
        if event != "call" or not _shared_writes(frame.f_code):
            return None
        frame.f_trace_opcodes = True
        return opcodes
    return calls


@contextmanager
def watch_threads(meeting: Meeting) -> Iterator[None]:
    """While the learner's function runs: count thread starts, the most threads started but
    not yet joined at once, and finished threads; trace the threads' writes of shared state
    (``Meeting.store``); hand out noted locks for ``threading.Lock()``."""
    start, join, lock = threading.Thread.start, threading.Thread.join, threading.Lock
    previous = threading.gettrace()

    def counted_start(self: threading.Thread) -> None:
        run = self.run

        def noted_run() -> None:
            try:
                run()
            finally:
                with meeting.cond:
                    meeting.done.add(threading.get_ident())
                    meeting.cond.notify_all()
        self.run = noted_run                                     # type: ignore[method-assign]
        with meeting.cond:
            meeting.started += 1
            meeting.open += 1
            meeting.most_open = max(meeting.most_open, meeting.open)
        start(self)

    def counted_join(self: threading.Thread, timeout: float | None = None) -> None:
        with meeting.cond:
            meeting.joining = True
            meeting.cond.notify_all()
        join(self, timeout)
        with meeting.cond:
            meeting.open -= 0 if self.is_alive() else 1

    threading.Thread.start, threading.Thread.join = counted_start, counted_join  # type: ignore
    threading.Lock = lambda: _NotedLock(meeting, lock())                        # type: ignore
    threading.settrace(_tracer(meeting))
    try:
        yield
    finally:
        threading.settrace(previous)                                            # type: ignore
        threading.Thread.start, threading.Thread.join = start, join             # type: ignore
        threading.Lock = lock                                                    # type: ignore
