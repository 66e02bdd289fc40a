"""Checks for lesson 03 (Hogwild!): the sparse update in place; the worker loop, watched access by
access, then on 3 processes; the coordinates updates share (reasoning); a lock-free plan."""
from __future__ import annotations

import functools
import math
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import _answers as answers
from ._core import call_local, fail, judge, on_workers, run_beside, task
from ._diagnose import (Case, Snapshot, as_array, differs, explain, factor_of, returned_none,
                        same, table, tolerance)
from .parallel_models import PROCESSES, FileLock, SpyLock, Watched, shared_file
from ._trial import Trial

if TYPE_CHECKING:
    from ddl_lab.hogwild.engine import Problem

__all__ = ["hogwild_update", "hogwild_worker", "expected_overlap", "hogwild_plan"]

_COPY_HINT = ("`w = theta[idx]` (fancy indexing) and `theta = theta - ...` both make a new "
              "array; write into the shared one: `theta[idx] -= step`.")
_IMPLEMENTATIONS = ("sgd_update", "sparse_step", "hogwild_loop", "reference_sgd")


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + np.exp(-z))


# ------------------------------------------------------------------ task 1: the update

@task("hogwild", refuses=("ddl_lab.hogwild", *_IMPLEMENTATIONS))
def hogwild_update(my_hogwild_update: Callable, seed: int = 0) -> None:
    """Lesson 03, task 1: ``my_hogwild_update(theta, idx, val, y, lr)`` does one SGD step of
    logistic regression on a sparse example, in place, touching only θ[idx]:
    θ[idx] −= lr (σ(θ[idx]·val) − y) val. ``idx`` and ``val`` stay as they were."""
    fixed = table("d nnz lr y dtype", (200, 5, 0.2, 1, "float64"), (50, 8, 0.7, 0, "float64"),
                  (7, 1, 0.05, 1, "float64"), (100, 6, 0.3, 0, "float32"))
    trial = Trial("hogwild_update", my_hogwild_update, seed, fixed, draws=4, draw=lambda rng: {
        "d": int(rng.integers(5, 300)), "nnz": int(rng.integers(1, 11)),
        "lr": float(10 ** rng.uniform(-2, 0)), "y": int(rng.integers(0, 2)),
        "dtype": str(rng.choice(["float64", "float32"]))}, name="my_hogwild_update")
    name = trial.name
    for case in trial:
        p, rng = case.params, case.rng
        theta = rng.normal(size=p["d"]).astype(p["dtype"])
        idx = rng.choice(p["d"], size=min(p["nnz"], p["d"]), replace=False)
        val = rng.normal(size=len(idx)) * 10 ** rng.uniform(-0.5, 0.5)
        y, lr, before = float(p["y"]), p["lr"], theta.astype(np.float64)
        step = lr * (_sigmoid(float(before[idx] @ val)) - y) * val
        inputs = Snapshot(idx=idx, val=val)
        out = trial.call(case, theta, idx, val, y, lr)
        judge(inputs.changed(name), case)
        if np.array_equal(theta, before.astype(p["dtype"])):
            want = before.copy()
            want[idx] -= step
            if out is not None and differs(want, out) is None:
                fail(f"{name} returned the new θ but left `theta` unchanged: the workers share "
                     f"`theta`, so the update must be written into it. {_COPY_HINT} [{case}]")
            fail(f"theta did not change: {name} updated a copy. {_COPY_HINT} [{case}]")
        outside = np.setdiff1d(np.flatnonzero(theta != before.astype(p["dtype"])), idx)
        if len(outside):
            fail(f"the example uses features {sorted(idx.tolist())}, but coordinate "
                 f"{outside[0]} changed too: a Hogwild! update reads and writes only the "
                 f"example's own features — that is why workers rarely collide [{case}].")
        got_step = before[idx] - theta[idx].astype(np.float64)
        ulps = 50 * np.finfo(p["dtype"]).eps * float(np.abs(before[idx]).max())  # θ's rounding
        diff = differs(step, got_step, scale=float(np.abs(step).max()) + ulps / tolerance(theta),
                       rtol=tolerance(theta))
        if diff is not None:
            fail(f"after one update: θ[idx] moved by {np.round(-got_step, 6).tolist()}, "
                 f"expected {np.round(-step, 6).tolist()} — "
                 f"{_update_fault(got_step, step, before[idx], val, y, lr, diff)} [{case}].")
    trial.passed(f"{len(trial)} sparse updates (1–10 features, lr 0.01–1, feature values not "
                 "1, float32 θ too) match θ[idx] −= lr (σ(θ[idx]·val) − y) val, written in "
                 "place, touching only the example's features")


def _update_fault(got: np.ndarray, step: np.ndarray, theta: np.ndarray, val: np.ndarray,
                  y: float, lr: float, diff: str) -> str:
    """The named mistake behind a wrong step on θ[idx] (``theta``), else what differs."""
    c = factor_of(step, got)
    return explain(got, {
        "the step has the wrong sign: subtract lr·(σ(z) − y)·val (or add lr·(y − σ(z))·val)":
            -step,
        "the step is missing the factor val: the gradient of the logistic loss is "
        "(σ(z) − y)·x, and x's values here are not 1":
            lr * (_sigmoid(float(theta @ val)) - y) * np.ones_like(val),
        "z must be θ[idx]·val (the dot product with the feature values), not sum(θ[idx])":
            lr * (_sigmoid(float(theta.sum())) - y) * val,
        f"lr is missing: multiply the step by lr (= {lr:g})": step / lr}) or (
        f"the step is {c:.4g} × lr·(σ(z) − y)·val: use the lr passed in ({lr:g})"
        if c is not None else diff + "; is it σ(z) − y with z = θ[idx]·val, times val and lr?")


# ------------------------------------------------------------------ task 2: the worker loop

class _Trail(SpyLock):
    """The lock the worker gets in this process, and what the worker did to θ and to it: it
    counts acquisitions, knows when it is held, and notes the accesses to θ outside it."""
    stuck = ("the lock was still held after 2 s: release it after each update (`with lock:` "
             "does that for you)")

    def __init__(self) -> None:
        super().__init__()
        self.reads, self.writes, self.outside = 0, 0, []

    def note(self, what: str) -> None:
        if what == "read":
            self.reads += 1
        else:
            self.writes += 1
        if not self.held:
            self.outside.append(what)


class _TrailTheta(Watched):
    """θ as the worker gets it in this process: every read and write is noted."""
    __iter__ = np.ndarray.__iter__              # element by element, each a read

    def __getitem__(self, key: Any) -> Any:
        self.note("read")
        return np.asarray(self)[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.note("write")
        np.asarray(self)[key] = value


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
    trial = Trial("hogwild_worker", my_hogwild_worker, seed, [{"locked": False}, {"locked": True}],
                  name="my_hogwild_worker")
    for case in trial:
        rng = case.rng
        problem = sparse_problem(m=300, d=int(rng.integers(30, 120)),
                                 nnz=int(rng.integers(2, 8)), lr=0.1, seed=int(rng.integers(99)))
        case.params.update(d=problem.d, lr=round(float(rng.uniform(0.2, 0.8)), 3))
        rows = rng.permutation(len(problem))[:int(rng.integers(40, 90))]
        locked, lr = case.params["locked"], case.params["lr"]
        theta0 = rng.normal(size=problem.d) * 0.1
        got, counted, changed = run_beside(_traced, trial.fn, trial.name, theta0, problem, rows,
                                           lr, locked)
        trail = SimpleNamespace(**counted)
        want = _serial(problem, theta0, rows, lr)
        judge(changed, case)
        if np.array_equal(got, theta0):
            fail(f"after {trial.name}(theta, problem, rows, ...) theta is unchanged: the loop must "
                 f"update the `theta` it is given — the shared vector, not a copy. "
                 f"{_COPY_HINT} [{case}]")
        rtol = tolerance(problem.val, problem.y)      # float32 data: float32 steps are fair
        if diff := differs(want, got, rtol=rtol):
            hint = explain(got, rtol=rtol, mistakes={
                f" — that is SGD with problem.lr ({problem.lr:g}): use the lr argument "
                f"({lr:g})": _serial(problem, theta0, rows, problem.lr),
                " — that is SGD over the rows in sorted order: keep the order of `rows`":
                    _serial(problem, theta0, np.sort(rows), lr),
                " — that is SGD over examples 0, 1, 2, …: use the example numbers in `rows` "
                "(problem.idx[i] for i in rows)":
                    _serial(problem, theta0, np.arange(len(rows)), lr),
            }) or ". Apply one update per row, in the order of `rows`, with the given lr"
            fail(f"{'locked' if locked else 'lock-free'}: θ after one pass differs from plain "
                 f"SGD over the same rows in the same order: {diff}{hint} [{case}].")
        if not locked and trail.taken:
            fail(f"lock-free mode (locked=False): {trial.name} took the lock {trail.taken:,} times "
                 f"during {len(rows):,} updates. Hogwild! never locks: the workers write the "
                 f"shared θ at the same time, and that is the point [{case}].")
        if locked and trail.taken != len(rows):
            fail(f"locked=True: the lock was taken {trail.taken:,} times for {len(rows):,} "
                 "updates. The locked baseline holds it around each update (read θ, compute, "
                 f"write) — once per row, so the other workers can take turns [{case}].")
        if locked and trail.outside:
            fail(f"locked=True: {trail.outside.count('read')} of {trail.reads} reads and "
                 f"{trail.outside.count('write')} of {trail.writes} writes of θ happened while "
                 f"the lock was NOT held ({'reads' if 'read' in trail.outside else 'writes'} "
                 "outside it): hold the lock around the whole update — the read of θ[idx] for "
                 "z, the step, and the write — or another worker can change θ[idx] between "
                 f"your read and your write [{case}].")
    start, runs = _on_processes(my_hogwild_worker)
    trial.passed("one update per row in order with the given lr; lock-free never takes the "
                 "lock, locked holds it around each whole update (observed read by read); on "
                 f"{PROCESSES} processes sharing θ, locked took the lock once per update and "
                 f"lock-free trained the shared θ (loss {start:.3f} → {runs[False]:.3f})")


def _traced(fn: Callable, name: str, theta0: np.ndarray, problem: "Problem", rows: np.ndarray,
            lr: float, locked: bool) -> tuple[np.ndarray, dict, str | None]:
    """Where the learner's code runs (``run_beside``): its loop on a θ and a lock that note
    every access; θ after it, what the trail counted, and what it changed of its inputs."""
    theta, trail, inputs = theta0.copy().view(_TrailTheta), _Trail(), Snapshot(rows=rows)
    theta.watcher = trail
    call_local(fn, theta, problem, rows, lr, trail, locked)
    counted = {k: getattr(trail, k) for k in ("taken", "reads", "writes", "outside")}
    return np.asarray(theta).copy(), counted, inputs.changed(name)


def _on_processes(fn: Callable) -> tuple[float, dict[bool, float]]:
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
            on_workers(_worker_on_process, PROCESSES, fn, path, lock, problem, shards, locked,
                       fn=fn, timeout=30.0)
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


# ------------------------------------------------------------------ expected overlap

@functools.lru_cache(maxsize=1)
def _lesson_frequencies() -> np.ndarray:
    """How often each feature is used in the lesson's sparse problem (5,000 examples)."""
    from ddl_lab.hogwild.engine import sparse_problem
    problem = sparse_problem(m=5000)
    return problem.coordinate_counts() / len(problem)


def _frequencies(case: Case) -> np.ndarray:
    p = case.params
    if p["freq"] == "lesson":
        return _lesson_frequencies().copy()
    if p["freq"] == "uniform":
        return np.full(p["d"], p["nnz"] / p["d"])
    weights = 1.0 / np.arange(1, p["d"] + 1) ** case.rng.uniform(0.5, 1.5)
    return case.rng.permutation(np.minimum(1.0, p["nnz"] * weights / weights.sum()))


def _overlap_case(rng: np.random.Generator) -> dict[str, Any]:
    d = int(rng.integers(5, 2001))
    return {"freq": str(rng.choice(["skewed", "uniform"])), "d": d,
            "nnz": int(rng.integers(1, min(d, 40) + 1)), "workers": int(rng.integers(1, 17))}


@task("hogwild")
def expected_overlap(my_expected_overlap: Callable, seed: int = 0) -> None:
    """Lesson 03, task 3: ``my_expected_overlap(freq, workers)`` — ``freq[j]`` the fraction
    of examples that use feature j — returns how many coordinates an in-flight update expects
    to share with the other workers − 1 in-flight updates, on independent examples:
    (workers − 1)·Σ_j freq[j]²."""
    fixed = table("freq d nnz workers", ("uniform", 1000, 10, 2), ("lesson", 1000, 10, 4),
                  ("uniform", 100, 5, 1), ("skewed", 50, 8, 8))
    trial = Trial("expected_overlap", my_expected_overlap, seed, fixed, draws=3,
                  draw=_overlap_case, name="my_expected_overlap")
    for case in trial:
        freq, w = _frequencies(case), case.params["workers"]
        got = trial.call(case, freq.copy(), w)
        value = as_array(got)
        if value is None or value.size != 1 or not np.isfinite(value).all():
            fail(returned_none(got, trial.name, "the expected number of shared coordinates",
                               "one number") + f" [{case}].")
        want, x = (w - 1) * float(np.sum(freq ** 2)), float(value.ravel()[0])
        if not same(want, x, rtol=max(1e-6, tolerance(got)), scale=max(want, 1e-3)):
            fail(f"{trial.name}(freq, {w}) returned {x:.6g}, expected (workers − 1)·Σ f_j² = "
                 f"{want:.6g} — {_overlap_fault(x, freq, w)} [{case}].")
    trial.passed(f"on {len(trial)} cases (uniform, skewed and the lesson's frequencies, 1–16 "
                 "workers): (workers − 1)·Σ f_j² shared coordinates — a coordinate is in two "
                 "independent updates with probability f_j²")


def _overlap_fault(got: float, freq: np.ndarray, w: int) -> str:
    sq, k, d = float(np.sum(freq ** 2)), float(np.sum(freq)), len(freq)
    right = (w - 1) * sq
    named = {
        "that counts the coordinates the other updates touch, not the ones they share "
        "with yours: coordinate j is in both of two independent updates with probability "
        "f_j·f_j": (w - 1) * k,
        "that assumes every feature equally frequent (k²/d with k = Σ f_j): with skewed "
        "frequencies the hot features dominate Σ f_j²": (w - 1) * k * k / d,
        "your own update is no clash: there are workers − 1 other updates in flight":
            w * sq,
        "that counts the shared coordinates of every pair of workers; the question is how "
        "many YOUR update shares with the others'": w * (w - 1) / 2 * sq,
        "that is one other update's share: multiply by the workers − 1 others in flight": sq,
        "that is the chance that an update shares at least one coordinate, not the "
        "expected number of shared coordinates": (w - 1) * (1 - float(np.prod(1 - freq ** 2))),
    }
    return explain(got, named, 1e-6, right, max(right, 1e-3)) or (
        "add up, over the coordinates, the chance that yours and another update both touch "
        "it, for each of the other updates")


# ------------------------------------------------------------------ a Hogwild! plan

PLAN_EXAMPLES = 2000            # the lesson's sparse problem, 2,000 examples
PLAN_BUDGET = 3000              # updates one worker may do (the time there is)
PLAN_TARGET = 0.20              # training loss the shared θ must reach
PLAN_SEEDS = (0, 1)             # row shuffles: both runs must reach the target
PLAN_WINDOW = 50                # updates per worker between two meetings at a barrier


@functools.lru_cache(maxsize=1)
def plan_problem() -> "Problem":
    """The lesson's sparse logistic regression (1,000 features, 10 per example), 2,000 examples."""
    from ddl_lab.hogwild.engine import sparse_problem
    return sparse_problem(m=PLAN_EXAMPLES, seed=0)


def _plan_worker(path: str, problem: "Problem", shards: list[np.ndarray], lr: float) -> None:
    """On a warm worker: the lesson's Hogwild! loop over this rank's rows, lock-free, on θ in
    shared memory (ranks without rows sit it out). Every ``PLAN_WINDOW`` updates the ranks
    meet at a barrier, so a busy machine cannot let one worker run its whole share alone — on
    free cores they run side by side anyway."""
    import torch.distributed as dist

    from ddl_lab.hogwild.textbook import hogwild_loop
    rank = dist.get_rank()
    rows = shards[rank] if rank < len(shards) else np.zeros(0, dtype=np.int64)
    theta = np.memmap(path, np.float64, "r+", shape=(problem.d,))
    for start in range(0, max(len(s) for s in shards), PLAN_WINDOW):
        hogwild_loop(theta, problem, rows[start:start + PLAN_WINDOW], lr)
        dist.barrier()
    theta.flush()


def hogwild_run(workers: int, epochs: int, lr: float, seed: int) -> float:
    """Train the plan's problem lock-free on ``workers`` real processes sharing θ (from 0);
    the training loss of the shared θ."""
    from ddl_lab.hogwild.engine import deal_rows
    problem = plan_problem()
    shards = deal_rows(len(problem), workers, epochs, seed)
    with shared_file(8 * problem.d) as path:
        on_workers(_plan_worker, PROCESSES, path, problem, shards, lr, timeout=60.0)
        return problem.loss(np.fromfile(path, np.float64).copy())


def _budget(rng: np.random.Generator, kind: str) -> dict[str, Any]:
    """Budgets for a second ``real`` run: 2 or 3 workers with time for at least 3 epochs.
    Else judged by their arithmetic only: 500–20,000 examples, 2–16 workers, time for 3–8
    epochs — or, ``tight``, for e·⌊examples/workers⌋ updates and less than e epochs (workers
    not dividing the examples), where counting each worker's share of an epoch as
    ⌊examples/workers⌋ instead of rounding up breaks the budget."""
    if kind == "real":
        w = int(rng.integers(2, PROCESSES + 1))
        return {"examples": PLAN_EXAMPLES, "max_updates_per_worker":
                int(rng.integers(-(-3 * PLAN_EXAMPLES // w), 4001)), "max_workers": w}
    w = int(rng.integers(2, 17))
    n = int(rng.integers(500, 20001)) // w * w + int(rng.integers(1, w))
    e = int(rng.integers(3, 9))
    if kind != "tight":
        return {"examples": n, "max_updates_per_worker": int(-(-rng.uniform(3, 8) * n // w)),
                "max_workers": w}
    slack = -(-e * (n % w) // w)                     # e·⌊n/w⌋ + slack ≥ e·n/w
    return {"examples": n, "max_updates_per_worker": e * (n // w) + int(rng.integers(slack)),
            "max_workers": w}


@task("hogwild")
def hogwild_plan(my_hogwild_plan: Callable, seed: int = 0) -> None:
    """Lesson 03, task 4: ``my_hogwild_plan(examples, max_updates_per_worker, max_workers)``
    returns ``{"workers", "epochs", "lr"}`` with which lock-free Hogwild! — the lesson's loop
    on real processes sharing θ — trains the lesson's sparse problem (2,000 examples) to a
    training loss ≤ 0.20 on two shuffles: for the prompt's budgets (3,000 updates, 3
    workers) and one drawn budget, run for real; and no worker over its budget of updates,
    no more workers than allowed, for four more budgets drawn far from the prompt's (500 to
    20,000 examples, 1–16 workers), so that the plan must be computed from its inputs."""
    kinds = iter(["real", "tight", "loose", "tight", "loose"])
    prompt = {"examples": PLAN_EXAMPLES, "max_updates_per_worker": PLAN_BUDGET,
              "max_workers": PROCESSES}       # then one drawn budget run for real, four on paper
    trial = Trial("hogwild_plan", my_hogwild_plan, seed, [prompt], draws=5,
                  draw=lambda rng: _budget(rng, next(kinds)), name="my_hogwild_plan", plan=True)
    real, plans, reports = 2, [], []          # the first two run for real
    for case in trial:
        p = case.params
        args = (p["examples"], p["max_updates_per_worker"], p["max_workers"])
        where = (f"examples = {args[0]:,}, max_updates_per_worker = {args[1]:,}, "
                 f"max_workers = {args[2]}")
        plans.append(_valid_plan(trial.name, trial.call(case, *args, where=where), case, plans))
        if case.index >= real:
            continue
        workers, epochs, lr = plans[-1]
        seeds = [s + 10 * seed for s in PLAN_SEEDS]
        with np.errstate(all="ignore"):
            losses = [hogwild_run(workers, epochs, lr, s) for s in seeds]
        what = (f"{workers} worker(s) × {epochs} epoch(s) at γ = {lr:g}: the shared θ ended "
                f"with training loss {', '.join(f'{x:.4f}' for x in losses)} (shuffles {seeds})")
        if not all(x <= PLAN_TARGET for x in losses):
            fail(f"{what}, target ≤ {PLAN_TARGET} — {_plan_fault(epochs, lr)}."
                 f"{answers.same_for_all(plans)} [{case}]")
        reports.append(f"{what} (each worker ≤ {p['max_updates_per_worker']:,} updates)")
    trial.passed("lock-free on real processes sharing θ — " + "; ".join(reports)
                 + f"; within the budgets of {len(trial) - real} more drawn far from the prompt's")


def _valid_plan(name: str, plan: Any, case: Case, before: list) -> tuple[int, int, float]:
    """The plan's (workers, epochs, lr), or a CheckFailed naming the budget it broke."""
    p = case.params
    judge(answers.plan(plan, name, {"workers": "", "epochs": "", "lr": ""}), case)
    workers, epochs = (answers.Whole(1).read(plan[k]) for k in ("workers", "epochs"))
    for k, v in (("workers", workers), ("epochs", epochs)):
        if v is None:
            fail(f"{k} = {plan[k]!r}: a whole number ≥ 1 [{case}].")
    if (lr := answers.Real(0, closed="neither").read(plan["lr"])) is None:
        fail(f"lr = {plan['lr']!r}: a learning rate is a number > 0 [{case}].")
    same = answers.same_for_all([*before, (workers, epochs, lr)])
    if workers > p["max_workers"]:
        lends = ("this check's machine lends you" if p["max_workers"] == PROCESSES else
                 "these budgets allow")
        fail(f"workers = {workers}: {lends} {p['max_workers']} processes.{same} [{case}]")
    per_worker = math.ceil(epochs * p["examples"] / workers)
    if per_worker > p["max_updates_per_worker"]:
        floor = (epochs * (p["examples"] // workers) <= p["max_updates_per_worker"])
        why = (f" — {epochs} × ⌊{p['examples']:,}/{workers}⌋ fits, but {workers} workers do not "
               f"divide {p['examples']:,} examples: some take ⌈examples/workers⌉ per epoch, so "
               "integer arithmetic that rounds down is right only when they divide evenly"
               if floor else " — share the updates among more workers, or train fewer epochs")
        fail(f"{workers} worker(s) × {epochs} epoch(s) of {p['examples']:,} examples: the "
             f"busiest worker would do {per_worker:,} updates, but there is time for "
             f"{p['max_updates_per_worker']:,}{why}.{same} [{case}]")
    return workers, epochs, lr


def _plan_fault(epochs: int, lr: float) -> str:
    """Why the plan missed: the rate (too small, too large), too few epochs, or Hogwild!'s
    own collisions — told apart by serial SGD over the same updates."""
    from ddl_lab.hogwild.engine import deal_rows, reference_sgd
    problem = plan_problem()
    rows = deal_rows(len(problem), 1, epochs, 0)[0]

    def serial(rate: float) -> float:
        with np.errstate(all="ignore"):
            return problem.loss(reference_sgd(problem, rows, rate))

    here = serial(lr)
    if here <= PLAN_TARGET:
        return (f"serial SGD over the same updates reaches {here:.4f}: the lock-free workers' "
                "collisions on the hot features cost the rest — a somewhat smaller γ")
    best_loss, best = min((serial(rate), rate) for rate in (0.1, 0.2, 0.3, 0.5, 1.0))
    if best_loss > PLAN_TARGET:
        return (f"{epochs} epoch(s) are not enough at any rate here (serial SGD's best, at γ = "
                f"{best:g}, is {best_loss:.3f}): train more epochs — and share them among "
                "enough workers")
    if lr < best:
        return (f"too small a rate: serial SGD at γ = {lr:g} also stops at {here:.4f}, at "
                f"γ = {best:g} it reaches {best_loss:.4f}")
    hot = problem.coordinate_counts().max() / len(problem)
    return (f"too large a rate: serial SGD at γ = {lr:g} also stops at {here:.4f}, at γ = "
            f"{best:g} it reaches {best_loss:.4f}. The hottest feature is in {hot:.0%} of the "
            "examples, so its weight takes a step almost every update and overshoots")
