"""Hogwild!: SGD on one parameter vector in shared memory, without locks (lesson 03).

Jamshidi's lecture's "Asynchronous SGD (shared memory)": every worker repeatedly does
``θ ← θ − γ ∇J(θ; x⁽ⁱ⁾, y⁽ⁱ⁾)`` on the *same* θ. Niu, Recht, Ré and Wright (Hogwild!,
2011) showed that no lock is needed when each update touches few coordinates: two
workers rarely write the same coordinate at once, and an occasional overwritten
update does little harm. Langford, Smola and Zinkevich ("Slow learners are fast",
2009) showed that gradients applied a few steps late (*stale*) still converge.

``run(problem, mode, processes)`` trains for real on worker processes that attach to
one ``SharedArray`` θ, each taking the examples ``deal_rows`` deals it:

- ``lock-free``: Hogwild! — read θ, compute the step, write it, nobody waits;
- ``locked``: the same, but each update holds one shared lock (consistent, serialised);
- ``serial``: one process, the baseline.

Every update's read and write times are recorded, so collisions (an update in flight
while another worker's update of a common coordinate was) are counted, and the final θ is compared
with the sum of all steps taken, which counts the coordinates where a step was
overwritten and lost. What the lesson prints is the short ``textbook.py``, tested equal to
``hogwild_loop``; the pictures are ``plots.py``.
"""
from __future__ import annotations

import math
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ddl_lab.parallel_models.processes import CONTEXT, run_processes, wait_barrier
from ddl_lab.parallel_models.shared_memory import CountingLock, SharedArray

__all__ = ["MODES", "Problem", "sparse_problem", "dense_problem", "sparse_step", "sgd_update",
           "hogwild_loop", "HogwildRun", "run", "compare_modes", "run_learner_worker",
           "reference_sgd", "deal_rows", "time_to_target", "contention"]

MODES = ("lock-free", "locked", "serial")


# ------------------------------------------------------------------ problems

@dataclass
class Problem:
    """A training set as the workers see it (lesson 03).

    ``kind='sparse'``: logistic regression, example i has features ``idx[i]`` with
    values ``val[i]``, so its update touches only those coordinates.
    ``kind='dense'``: least squares J = 1/(2m) Σ (x·θ − y)², ``val[i]`` is the whole
    row x⁽ⁱ⁾, so every update touches every coordinate.
    """

    kind: str
    idx: np.ndarray | None
    val: np.ndarray
    y: np.ndarray
    d: int
    lr: float
    name: str = ""

    def __len__(self) -> int:
        return len(self.y)

    def cols(self, i: int) -> Any:
        """The coordinates example i's update touches."""
        return self.idx[i] if self.kind == "sparse" else slice(None)

    def step(self, theta: np.ndarray, i: int, lr: float) -> tuple[Any, np.ndarray]:
        """Read θ, return (coordinates, Δ): the SGD step for example i is θ[cols] −= Δ."""
        if self.kind == "sparse":
            return self.idx[i], sparse_step(theta, self.idx[i], self.val[i], self.y[i], lr)
        x = self.val[i]
        return slice(None), (lr * (float(x @ theta) - float(self.y[i]))) * x

    def loss(self, theta: np.ndarray) -> float:
        """The training loss at θ (mean logistic loss, or the lecture's J(θ))."""
        if self.kind == "sparse":
            z = (theta[self.idx] * self.val).sum(axis=1)
            return float(np.mean(np.logaddexp(0.0, z) - self.y * z))
        r = self.val @ theta.astype(self.val.dtype) - self.y
        return float(r @ r) / (2 * len(self.y))

    def coordinate_counts(self) -> np.ndarray:
        """How many examples touch each coordinate."""
        if self.kind == "sparse":
            return np.bincount(self.idx.ravel(), minlength=self.d)
        return np.full(self.d, len(self))


def sparse_problem(m: int = 20_000, d: int = 1000, nnz: int = 10, lr: float = 0.1,
                   seed: int = 0) -> Problem:
    """Lesson 01's sparse logistic regression: each example touches ``nnz`` of ``d`` weights."""
    from ddl_lab.ml.data import sparse_logistic
    with np.errstate(over="ignore"):          # exp overflow in the labels' sigmoid is harmless
        ds = sparse_logistic(m=m, d=d, nnz=nnz, seed=seed)
    return Problem("sparse", ds.idx, ds.val, ds.y, d, lr, f"sparse logistic, {nnz} of {d} features")


def dense_problem(m: int = 5000, d: int = 1000, lr: float | None = None,
                  seed: int = 0) -> Problem:
    """Lesson 01's linear regression: each example's update touches all ``d`` weights."""
    from ddl_lab.ml.data import linear_regression
    ds = linear_regression(m=m, d=d, noise=0.5, seed=seed)
    return Problem("dense", None, ds.X, ds.y, d, lr if lr is not None else 1.0 / d,
                   f"dense least squares, all {d} features")


# ------------------------------------------------------------------- the update

def _sigmoid(z: float) -> float:
    if z >= 0:
        return 1.0 / (1.0 + math.exp(-z))
    e = math.exp(z)
    return e / (1.0 + e)


def sparse_step(theta: np.ndarray, idx: np.ndarray, val: np.ndarray, y: float,
                lr: float) -> np.ndarray:
    """Δ = lr (σ(x·θ) − y) x on the coordinates ``idx`` (reads θ, writes nothing)."""
    z = float(theta[idx] @ val)
    return (lr * (_sigmoid(z) - float(y))) * val


def sgd_update(theta: np.ndarray, idx: np.ndarray, val: np.ndarray, y: float,
               lr: float) -> None:
    """One Hogwild! update on a sparse logistic example, in place on the shared θ.

    Only the coordinates ``idx`` are read and written. ``theta[idx] -= ...`` writes into
    θ itself; ``w = theta[idx]; w -= ...`` would change a copy (fancy indexing copies).
    """
    theta[idx] -= sparse_step(theta, idx, val, y, lr)


# ------------------------------------------------------------------- the worker

def hogwild_loop(rank: int, theta_handle: tuple, problem: Problem, shards: list[np.ndarray],
                 lr: float, lock: CountingLock, locked: bool, delay: int, barrier: Any,
                 eval_every: int, record: bool) -> dict[str, Any]:
    """One worker: SGD over its examples ``shards[rank]`` on the shared θ (lesson 03).

    ``locked``: hold ``lock`` from reading θ to writing the step (else no lock at all).
    ``delay``: apply each step ``delay`` updates after it was computed (stale gradients,
    "slow learners are fast"). Rank 0 copies θ every ``eval_every`` updates so the
    parent can draw the loss against time. With ``record``, every update's read and
    write times and the sum of this worker's steps are returned.
    """
    shared = SharedArray.attach(theta_handle)
    theta = shared.array
    rows = shards[rank]
    n = len(rows)
    t_read = np.zeros(n) if record else None
    t_write = np.zeros(n) if record else None
    applied = np.zeros(problem.d) if record else None
    pending: deque = deque()
    snaps: list[tuple[float, int, np.ndarray]] = []
    clock = time.perf_counter
    start = wait_barrier(barrier)
    if rank == 0:
        snaps.append((start, 0, theta.copy()))
    k = 0                                  # steps applied so far
    for j, i in enumerate(rows):
        if locked:
            lock.acquire()
        t0 = clock()
        cols, step = problem.step(theta, i, lr)            # read θ
        if delay:
            pending.append((cols, step, t0))
            if len(pending) <= delay:
                if locked:
                    lock.release()
                continue
            cols, step, t0 = pending.popleft()
        theta[cols] -= step                                 # write θ
        if record:
            t_read[k], t_write[k] = t0, clock()
            applied[cols] += step
        if locked:
            lock.release()
        k += 1
        if rank == 0 and k % eval_every == 0:
            snaps.append((clock(), k, theta.copy()))
    for cols, step, t0 in pending:                         # flush the late steps
        theta[cols] -= step
        if record:
            t_read[k], t_write[k] = t0, clock()
            applied[cols] += step
        k += 1
    end = clock()
    if rank == 0:
        snaps.append((end, k, theta.copy()))
    del theta
    shared.close()
    return {"start": start, "end": end, "t_read": t_read, "t_write": t_write,
            "applied": applied, "snaps": snaps, "updates": k}


# ---------------------------------------------------------------------- a run

@dataclass
class HogwildRun:
    """One training run: the loss against time, and what the workers did to θ."""

    mode: str
    processes: int
    kind: str
    delay: int
    lr: float
    updates: int
    seconds: float
    times: np.ndarray               # s since the common start: rank 0's snapshots, then the end
    steps: np.ndarray               # updates applied by all workers at each snapshot (≈)
    losses: np.ndarray
    theta: np.ndarray
    collisions: int = 0             # updates overlapping another worker's on a coordinate
    collided: np.ndarray = field(default_factory=lambda: np.zeros(0))   # per coordinate
    overwritten: int = 0            # coordinates where some step was lost
    lost_fraction: float = 0.0      # |lost steps| / |all steps|
    lock_acquisitions: int = 0
    windows: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=list)

    @property
    def label(self) -> str:
        delay = f", delay {self.delay}" if self.delay else ""
        return f"{self.mode}, {self.processes} process{'es' if self.processes > 1 else ''}{delay}"

    def time_to(self, target: float) -> float:
        """Seconds until the loss first reached ``target`` (inf if it never did)."""
        hit = np.nonzero(self.losses <= target)[0]
        return float(self.times[hit[0]]) if len(hit) else math.inf

    def summary(self) -> str:
        return (f"{self.label:>28}: {self.updates:>7,} updates in {self.seconds:6.3f} s, "
                f"final loss {self.losses[-1]:.4f}, {self.collisions:,} collided, "
                f"overwritten coordinates {self.overwritten}, "
                f"lock taken {self.lock_acquisitions:,}×")


def deal_rows(m: int, processes: int, epochs: int, seed: int) -> list[np.ndarray]:
    """Each epoch's shuffled examples dealt to the workers in turn: worker r's rows, in order."""
    perms = [np.random.default_rng(seed + e).permutation(m) for e in range(epochs)]
    return [np.concatenate([p[r::processes] for p in perms]) for r in range(processes)]


def run(problem: Problem, mode: str = "lock-free", processes: int = 2, epochs: int = 1,
        lr: float | None = None, delay: int = 0, seed: int = 0, snapshots: int = 60,
        record: bool = True, timeout: float = 120.0) -> HogwildRun:
    """Train ``problem`` with SGD on one shared θ, for real (lesson 03).

    ``mode``: 'lock-free' (Hogwild!), 'locked' (one lock around each update) or
    'serial' (one process). Every mode does the same total number of updates,
    ``epochs × len(problem)``, split between the processes.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use one of {MODES}")
    if mode == "serial":
        processes = 1
    if not isinstance(processes, int) or processes < 1:
        raise ValueError(f"processes must be a positive integer, got {processes!r}")
    if epochs < 1 or delay < 0:
        raise ValueError("epochs must be >= 1 and delay >= 0")
    lr = problem.lr if lr is None else lr
    rows = deal_rows(len(problem), processes, epochs, seed)
    eval_every = max(1, len(rows[0]) // snapshots)
    lock, barrier = CountingLock(), CONTEXT.Barrier(processes)
    try:
        with SharedArray(problem.d, np.float64) as theta:
            outs = run_processes(hogwild_loop, processes, theta.handle, problem, rows, lr,
                                 lock, mode == "locked", delay, barrier, eval_every, record,
                                 timeout=timeout)
            final = theta.array.copy()
        taken = lock.acquisitions
    finally:
        lock = barrier = None          # a failed run's traceback must not keep the semaphores
    start, end = min(o["start"] for o in outs), max(o["end"] for o in outs)
    updates = sum(o["updates"] for o in outs)
    snaps = outs[0]["snaps"] + [(end, updates / processes, final)]   # + θ when all are done
    result = HogwildRun(
        mode, processes, problem.kind, delay, lr, updates, end - start,
        np.array([t - start for t, _, _ in snaps]),
        np.array([k * processes for _, k, _ in snaps]),
        np.array([problem.loss(th) for _, _, th in snaps]), final,
        lock_acquisitions=taken)
    if record:
        _account(result, problem, rows, outs, start)
    return result


def _account(result: HogwildRun, problem: Problem, rows: list[np.ndarray],
             outs: list[dict], start: float) -> None:
    """Count collisions from the recorded windows, and lost steps from θ's final value."""
    applied = sum(o["applied"] for o in outs)
    lost = result.theta + applied                      # θ0 = 0: θ should equal −Σ steps
    tol = 1e-9 * (1.0 + np.abs(result.theta))
    result.overwritten = int((np.abs(lost) > tol).sum())
    moved = sum(np.abs(o["applied"]).sum() for o in outs)
    result.lost_fraction = float(np.abs(lost).sum() / moved) if moved else 0.0
    result.windows = [(o["t_read"] - start, o["t_write"] - start, r[:len(o["t_read"])])
                      for o, r in zip(outs, rows)]
    result.collisions, result.collided = _collisions(result.windows, problem)


def _collisions(windows: list[tuple], problem: Problem) -> tuple[int, np.ndarray]:
    """Updates that collided, and collided (update, coordinate) pairs per coordinate.

    An update collides when, while it was in flight (between reading θ and writing its
    step), another worker's update in flight touched one of its coordinates. For each
    worker, the other workers' windows are sorted by (coordinate, write time); a window
    [r, w] on coordinate c collides iff among the others' windows on c whose write comes
    after r, the earliest read comes before w (a suffix minimum answers that at once).
    """
    span = 1.0 + max((float(w[1].max()) for w in windows if len(w[1])), default=0.0)
    coords = ((lambda rows: problem.idx[rows]) if problem.kind == "sparse"
              else (lambda rows: np.zeros((len(rows), 1), dtype=np.int64)))   # one "coordinate"
    total, collided = 0, np.zeros(problem.d, dtype=np.int64)
    for a, (ra, wa, rows_a) in enumerate(windows):
        others = [w for b, w in enumerate(windows) if b != a and len(w[0])]
        if not others or not len(ra):
            continue
        cb = np.concatenate([coords(w[2]) for w in others]) * span
        keys = (cb + np.concatenate([w[1] for w in others])[:, None]).ravel()   # (c, write)
        reads = (cb + np.concatenate([w[0] for w in others])[:, None]).ravel()  # (c, read)
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        first_read = np.minimum.accumulate(reads[order][::-1])[::-1]
        ca = coords(rows_a)
        lo = (ca * span + ra[:, None]).ravel()
        q = np.argsort(lo, kind="stable")                   # sorted needles search faster
        j = np.empty(len(lo), dtype=np.int64)
        j[q] = np.searchsorted(keys, lo[q], side="right")
        j = j.reshape(ca.shape)
        hit = np.zeros(ca.shape, dtype=bool)
        ok = j < len(keys)
        hit[ok] = first_read[j[ok]] < (ca * span + wa[:, None])[ok]
        total += int(hit.any(axis=1).sum())
        if problem.kind == "sparse":
            collided += np.bincount(ca[hit], minlength=problem.d)
        else:
            collided += int(hit.sum())
    return total, collided


def compare_modes(problem: Problem, processes: int = 2, epochs: int = 1,
                  modes: Sequence[str] = ("serial", "lock-free", "locked"),
                  **options: Any) -> list[HogwildRun]:
    """The same training in each mode, one after the other (lesson 03's first figure)."""
    return [run(problem, m, processes, epochs, **options) for m in modes]


def time_to_target(runs: Sequence[HogwildRun], at: float = 0.75) -> tuple[float, list[float]]:
    """The loss the first run (the baseline) had after a fraction ``at`` of its run, and
    the seconds each run needed to reach it — "time to the same loss"."""
    base = runs[0].losses
    target = float(base[int(at * (len(base) - 1))])
    return target, [r.time_to(target) for r in runs]


# ------------------------------------------------------- cache-line contention

def _dense_writer(rank: int, handle: tuple, d: int, updates: int, shared: bool,
                  barrier: Any) -> float:
    """θ −= a·x for ``updates`` dense x, on the shared θ or on a private one: seconds."""
    sa = SharedArray.attach(handle)
    theta = sa.array if shared else np.zeros(d)
    xs = np.random.default_rng(rank).normal(size=(64, d)).astype(np.float32)
    start = wait_barrier(barrier)
    for k in range(updates):
        x = xs[k & 63]
        theta -= (1e-6 * (float(x @ theta) - 1.0)) * x
    seconds = time.perf_counter() - start
    del theta
    sa.close()
    return seconds


def contention(sizes: Sequence[int] = (100, 1000, 10_000), processes: int = 2,
               work: float = 1e5) -> list[dict[str, float]]:
    """How the speedup of dense updates shrinks as each update writes more memory.

    For each vector size d, ``processes`` processes each apply the same number of
    dense updates, to one *shared* θ (every write pulls the cache lines away from the
    other cores) or each to a *private* θ (no sharing). Returns, per d, the time
    relative to one process doing all the updates: 1/processes is the ideal.
    """
    rows = []
    with SharedArray(sizes[0]) as theta:                          # warm up the cores
        run_processes(_dense_writer, processes, theta.handle, sizes[0], 2000, False,
                      CONTEXT.Barrier(processes), timeout=120)
    for d in sizes:
        updates = max(100, int(work / (1 + d / 500)))
        times = {}
        for label, n, shared in (("one", 1, True), ("shared", processes, True),
                                 ("private", processes, False)):
            with SharedArray(d) as theta:
                times[label] = max(run_processes(_dense_writer, n, theta.handle, d, updates,
                                                 shared, CONTEXT.Barrier(n), timeout=120))
        rows.append({"d": d, "us_per_update": 1e6 * times["one"] / updates,
                     "shared": times["shared"] / (processes * times["one"]),
                     "private": times["private"] / (processes * times["one"])})
    return rows


# --------------------------------------------------------------- learner code

def reference_sgd(problem: Problem, rows: np.ndarray, lr: float) -> np.ndarray:
    """Plain serial SGD from θ = 0 over ``rows``: what one Hogwild! worker must produce."""
    theta = np.zeros(problem.d)
    for i in rows:
        cols, step = problem.step(theta, i, lr)
        theta[cols] -= step
    return theta


def _learner_worker(rank: int, worker: Callable, theta_handle: tuple, problem: Problem,
                    shards: list[np.ndarray], lr: float, lock: CountingLock, locked: bool,
                    barrier: Any) -> float:
    shared = SharedArray.attach(theta_handle)
    theta = shared.array
    wait_barrier(barrier)
    t0 = time.perf_counter()
    worker(theta, problem, shards[rank], lr, lock, locked)
    seconds = time.perf_counter() - t0
    del theta
    shared.close()
    return seconds


def run_learner_worker(worker: Callable, problem: Problem, processes: int = 2,
                       locked: bool = False, epochs: int = 1, lr: float | None = None,
                       seed: int = 0, timeout: float = 60.0) -> dict[str, Any]:
    """Run a learner's ``worker(theta, problem, rows, lr, lock, locked)`` on real processes.

    Every process attaches to one shared θ (zeros) and gets its share of the rows.
    Returns the final θ, its loss, how often the lock was taken and the seconds taken.
    """
    lr = problem.lr if lr is None else lr
    rows = deal_rows(len(problem), processes, epochs, seed)
    lock, barrier = CountingLock(), CONTEXT.Barrier(processes)
    try:
        with SharedArray(problem.d, np.float64) as theta:
            secs = run_processes(_learner_worker, processes, worker, theta.handle, problem,
                                 rows, lr, lock, locked, barrier, timeout=timeout)
            final = theta.array.copy()
        taken = lock.acquisitions
    finally:
        lock = barrier = None          # a failed run's traceback must not keep the semaphores
    return {"theta": final, "loss": problem.loss(final), "rows": rows,
            "lock_acquisitions": taken, "seconds": max(secs)}
