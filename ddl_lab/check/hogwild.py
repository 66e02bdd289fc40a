"""Checks for lesson 03 (Hogwild!): the sparse update in place; the worker loop; the
coordinates an update expects to share with the others' (reasoning) and a lock-free plan that
reaches a target loss on real processes (design) — those two in ``_hogwild_plans``.

The update runs on seeded cases (dimensions, learning rates, non-unit feature values,
float32 θ). The worker loop first runs here on a θ that notes every read and write and a
lock that knows when it is held — so the lock's scope is observed, not guessed — then on
3 warm worker processes sharing θ and a real lock (locked and lock-free)."""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from ._core import call_local, fail, passed, run_on_workers, task
from ._diagnose import Cases, Snapshot, differs, explain, factor_of, tolerance
from ._hogwild_plans import expected_overlap, hogwild_plan
from .parallel_models import PROCESSES, FileLock, shared_file

if TYPE_CHECKING:
    from ddl_lab.hogwild.engine import Problem

__all__ = ["hogwild_update", "hogwild_worker", "expected_overlap", "hogwild_plan"]

_COPY_HINT = ("`w = theta[idx]` (fancy indexing) and `theta = theta - ...` both make a new "
              "array; write into the shared one: `theta[idx] -= step`.")


_IMPLEMENTATIONS = ("sgd_update", "sparse_step", "hogwild_loop", "reference_sgd")


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + np.exp(-z))


# ------------------------------------------------------------------ task 1: the update

def _update_case(rng: np.random.Generator) -> dict[str, Any]:
    return {"d": int(rng.integers(5, 300)), "nnz": int(rng.integers(1, 11)),
            "lr": float(10 ** rng.uniform(-2, 0)), "y": int(rng.integers(0, 2)),
            "dtype": str(rng.choice(["float64", "float32"]))}


@task("hogwild", refuses=("ddl_lab.hogwild", *_IMPLEMENTATIONS))
def hogwild_update(my_hogwild_update: Callable, seed: int = 0) -> None:
    """Lesson 03, task 1: ``my_hogwild_update(theta, idx, val, y, lr)`` does one SGD step of
    logistic regression on a sparse example, in place, touching only θ[idx]:
    θ[idx] −= lr (σ(θ[idx]·val) − y) val. ``idx`` and ``val`` stay as they were."""
    name = getattr(my_hogwild_update, "__name__", "my_hogwild_update")
    fixed = [{"d": 200, "nnz": 5, "lr": 0.2, "y": 1, "dtype": "float64"},
             {"d": 50, "nnz": 8, "lr": 0.7, "y": 0, "dtype": "float64"},
             {"d": 7, "nnz": 1, "lr": 0.05, "y": 1, "dtype": "float64"},
             {"d": 100, "nnz": 6, "lr": 0.3, "y": 0, "dtype": "float32"}]
    cases = Cases("hogwild_update", seed, fixed, draws=4, draw=_update_case)
    for case in cases:
        _one_update(my_hogwild_update, name, case)
    passed("hogwild_update", f"{len(cases)} sparse updates (1–10 features, lr 0.01–1, feature "
           "values not 1, float32 θ too) match θ[idx] −= lr (σ(θ[idx]·val) − y) val, written "
           "in place, touching only the example's features")


def _one_update(fn: Callable, name: str, case: Any) -> None:
    p, rng = case.params, case.rng
    theta = rng.normal(size=p["d"]).astype(p["dtype"])
    idx = rng.choice(p["d"], size=min(p["nnz"], p["d"]), replace=False)
    val = rng.normal(size=len(idx)) * 10 ** rng.uniform(-0.5, 0.5)
    y, lr, before = float(p["y"]), p["lr"], theta.astype(np.float64)
    z = float(before[idx] @ val)
    step = lr * (_sigmoid(z) - y) * val
    inputs = Snapshot(idx=idx, val=val)
    out = call_local(fn, theta, idx, val, y, lr)
    message = inputs.changed(name)
    if message:
        fail(f"{message} [{case}]")
    if np.array_equal(theta, before.astype(p["dtype"])):
        want = before.copy()
        want[idx] -= step
        if out is not None and differs(want, out) is None:
            fail(f"{name} returned the new θ but left `theta` unchanged: the workers share "
                 f"`theta`, so the update must be written into it. {_COPY_HINT} [{case}]")
        fail(f"theta did not change: {name} updated a copy. {_COPY_HINT} [{case}]")
    outside = np.setdiff1d(np.flatnonzero(theta != before.astype(p["dtype"])), idx)
    if len(outside):
        fail(f"the example uses features {sorted(idx.tolist())}, but coordinate {outside[0]} "
             "changed too: a Hogwild! update reads and writes only the example's own "
             f"features — that is why workers rarely collide [{case}].")
    got_step = before[idx] - theta[idx].astype(np.float64)
    ulps = 50 * np.finfo(p["dtype"]).eps * float(np.abs(before[idx]).max())   # θ's rounding
    diff = differs(step, got_step, scale=float(np.abs(step).max()) + ulps / tolerance(theta),
                   rtol=tolerance(theta))
    if diff is None:
        return
    hint = explain(got_step, {
        "the step has the wrong sign: subtract lr·(σ(z) − y)·val (or add lr·(y − σ(z))·val)":
            -step,
        "the step is missing the factor val: the gradient of the logistic loss is "
        "(σ(z) − y)·x, and x's values here are not 1": lr * (_sigmoid(z) - y) * np.ones_like(val),
        "z must be θ[idx]·val (the dot product with the feature values), not sum(θ[idx])":
            lr * (_sigmoid(float(before[idx].sum())) - y) * val,
        f"lr is missing: multiply the step by lr (= {lr:g})": step / lr})
    c = factor_of(step, got_step) if hint is None else None
    if c is not None:
        hint = f"the step is {c:.4g} × lr·(σ(z) − y)·val: use the lr passed in ({lr:g})"
    hint = hint or diff + "; is it σ(z) − y with z = θ[idx]·val, times val and lr?"
    fail(f"after one update: θ[idx] moved by {np.round(-got_step, 6).tolist()}, expected "
         f"{np.round(-step, 6).tolist()} — {hint} [{case}].")


# ------------------------------------------------------------------ task 2: the worker loop

class _Trail:
    """What a worker did to θ and to the lock: acquisitions, and accesses outside it."""

    def __init__(self) -> None:
        self.held, self.taken, self.reads, self.writes = False, 0, 0, 0
        self.outside: list[str] = []
        self._lock = threading.Lock()

    def note(self, what: str) -> None:
        if what == "read":
            self.reads += 1
        else:
            self.writes += 1
        if not self.held:
            self.outside.append(what)


class _TrailLock:
    """The lock the worker gets in this process: it counts and knows when it is held."""

    def __init__(self, trail: _Trail):
        self.trail = trail

    def acquire(self, *args: object, **kwargs: object) -> bool:
        if not self.trail._lock.acquire(timeout=2):
            raise TimeoutError("the lock was still held after 2 s: release it after each "
                               "update (`with lock:` does that for you)")
        self.trail.held, self.trail.taken = True, self.trail.taken + 1
        return True

    def release(self) -> None:
        self.trail.held = False
        self.trail._lock.release()

    def __enter__(self) -> "_TrailLock":
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class _TrailTheta(np.ndarray):
    """θ as the worker gets it in this process: every read and write is noted."""
    trail: _Trail | None = None

    def __array_finalize__(self, obj: Any) -> None:
        self.trail = getattr(obj, "trail", None)

    def _note(self, what: str) -> None:
        if self.trail is not None:
            self.trail.note(what)

    def __getitem__(self, key: Any) -> Any:
        self._note("read")
        return np.asarray(self)[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self._note("write")
        np.asarray(self)[key] = value

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        self._note("read")
        outs = kwargs.get("out", ())
        if method == "at" or any(isinstance(o, _TrailTheta) for o in outs):
            self._note("write")
        if outs:
            kwargs["out"] = tuple(np.asarray(o) for o in outs)
        return getattr(ufunc, method)(*(np.asarray(i) if isinstance(i, _TrailTheta) else i
                                        for i in inputs), **kwargs)


def _serial(problem: "Problem", theta0: np.ndarray, rows: np.ndarray, lr: float) -> np.ndarray:
    from ddl_lab.hogwild.engine import sgd_update
    theta = theta0.copy()
    for i in rows:
        sgd_update(theta, problem.idx[i], problem.val[i], float(problem.y[i]), lr)
    return theta


@task("hogwild", refuses=("ddl_lab.hogwild", *_IMPLEMENTATIONS))
def hogwild_worker(my_hogwild_worker: Callable, seed: int = 0) -> None:
    """Lesson 03, task 2: ``my_hogwild_worker(theta, problem, rows, lr, lock, locked)`` runs
    one SGD update per row, in order, on the shared θ with the given lr: never touching the
    lock unless ``locked``, and then holding it around each whole update (read θ, compute,
    write)."""
    from ddl_lab.hogwild.engine import sparse_problem
    name = getattr(my_hogwild_worker, "__name__", "my_hogwild_worker")
    for case in Cases("hogwild_worker", seed, [{"locked": False}, {"locked": True}]):
        rng = case.rng
        problem = sparse_problem(m=300, d=int(rng.integers(30, 120)),
                                 nnz=int(rng.integers(2, 8)), lr=0.1, seed=int(rng.integers(99)))
        case.params.update(d=problem.d, lr=round(float(rng.uniform(0.2, 0.8)), 3))
        rows = rng.permutation(len(problem))[:int(rng.integers(40, 90))]
        _traced_run(my_hogwild_worker, name, problem, rows, case)
    start, runs = _on_processes(my_hogwild_worker, name)
    passed("hogwild_worker", "one update per row in order with the given lr; lock-free never "
           "takes the lock, locked holds it around each whole update (observed read by "
           f"read); on {PROCESSES} processes sharing θ, locked took the lock once per update and "
           f"lock-free trained the shared θ (loss {start:.3f} → {runs[False]:.3f})")


def _traced_run(fn: Callable, name: str, problem: "Problem", rows: np.ndarray, case: Any) -> None:
    locked, lr = case.params["locked"], case.params["lr"]
    theta0 = case.rng.normal(size=problem.d) * 0.1
    trail = _Trail()
    theta = theta0.copy().view(_TrailTheta)
    theta.trail = trail
    inputs = Snapshot(rows=rows)
    call_local(fn, theta, problem, rows, lr, _TrailLock(trail), locked)
    got, want = np.asarray(theta), _serial(problem, theta0, rows, lr)
    message = inputs.changed(name)
    if message:
        fail(f"{message} [{case}]")
    if np.array_equal(got, theta0):
        fail(f"after {name}(theta, problem, rows, ...) theta is unchanged: the loop must "
             f"update the `theta` it is given — the shared vector, not a copy. {_COPY_HINT} "
             f"[{case}]")
    rtol = tolerance(problem.val, problem.y)          # float32 data: float32 steps are fair
    diff = differs(want, got, rtol=rtol)
    if diff is not None:
        hint = explain(got, rtol=rtol, mistakes={
            f" — that is SGD with problem.lr ({problem.lr:g}): use the lr argument ({lr:g})":
                _serial(problem, theta0, rows, problem.lr),
            " — that is SGD over the rows in sorted order: keep the order of `rows`":
                _serial(problem, theta0, np.sort(rows), lr),
            " — that is SGD over examples 0, 1, 2, …: use the example numbers in `rows` "
            "(problem.idx[i] for i in rows)": _serial(problem, theta0, np.arange(len(rows)), lr),
        })
        hint = hint or ". Apply one update per row, in the order of `rows`, with the given lr"
        fail(f"{'locked' if locked else 'lock-free'}: θ after one pass differs from plain SGD "
             f"over the same rows in the same order: {diff}{hint} [{case}].")
    if not locked and trail.taken:
        fail(f"lock-free mode (locked=False): {name} took the lock {trail.taken:,} times "
             f"during {len(rows):,} updates. Hogwild! never locks: the workers write the "
             f"shared θ at the same time, and that is the point [{case}].")
    if locked and trail.taken != len(rows):
        fail(f"locked=True: the lock was taken {trail.taken:,} times for {len(rows):,} "
             "updates. The locked baseline holds it around each update (read θ, compute, "
             f"write) — once per row, so the other workers can take turns [{case}].")
    if locked and trail.outside:
        what = ("reads" if "read" in trail.outside else "writes")
        fail(f"locked=True: {trail.outside.count('read')} of {trail.reads} reads and "
             f"{trail.outside.count('write')} of {trail.writes} writes of θ happened while "
             f"the lock was NOT held ({what} outside it): hold the lock around the whole "
             "update — the read of θ[idx] for z, the step, and the write — or another worker "
             f"can change θ[idx] between your read and your write [{case}].")


def _on_processes(fn: Callable, name: str) -> tuple[float, dict[bool, float]]:
    """Lock-free and locked runs on the warm workers sharing θ and a file lock; returns
    the start loss and each run's final loss."""
    from ddl_lab.hogwild.engine import sparse_problem
    problem = sparse_problem(m=3000, d=200, nnz=5, lr=0.2, seed=1)
    rows = np.random.default_rng(0).permutation(len(problem))
    shards = [rows[r::PROCESSES] for r in range(PROCESSES)]
    start = problem.loss(np.zeros(problem.d))
    serial = problem.loss(_serial(problem, np.zeros(problem.d), rows, problem.lr))
    losses = {}
    for locked in (True, False):
        with shared_file(8 * (problem.d + 1)) as path:
            lock = FileLock(path)
            run_on_workers(_worker_on_process, PROCESSES, fn, path, lock, problem, shards,
                           locked, learner_fn=fn, timeout=30.0)
            theta = np.fromfile(path, np.float64)[1:].copy()
            taken = lock.acquisitions
        losses[locked] = problem.loss(theta)
        mode = "locked" if locked else "lock-free"
        if locked and taken != len(rows):
            fail(f"{PROCESSES} processes, locked: the shared lock was taken {taken:,} times for "
                 f"{len(rows):,} updates; hold it around each update, once per row.")
        if not locked and taken:
            fail(f"{PROCESSES} processes, lock-free: the shared lock was taken {taken:,} times; "
                 "Hogwild! never locks.")
        if not losses[locked] < start - 0.5 * (start - serial):
            fail(f"{PROCESSES} processes, {mode}: the shared θ ends with training loss "
                 f"{losses[locked]:.4f} (start {start:.4f}; serial SGD reaches {serial:.4f}). "
                 f"Did every worker write its updates into the shared theta?")
    return start, losses


def _worker_on_process(fn: Callable, path: str, lock: FileLock, problem: "Problem",
                       shards: list[np.ndarray], locked: bool) -> None:
    """On a warm worker: the learner's loop over this rank's rows on the shared θ."""
    import torch.distributed as dist
    theta = np.memmap(path, np.float64, "r+", offset=8, shape=(problem.d,))
    fn(theta, problem, shards[dist.get_rank()], problem.lr, lock, locked)
    theta.flush()


# ------------------------------------------------------------------ task 3 (reasoning)

# ------------------------------------------------------------------ task 4 (design)

