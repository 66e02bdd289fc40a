"""Lesson 03's reasoning and design checks (``check/hogwild.py`` exports them): how many
coordinates an in-flight update expects to share with the other workers' (the sparsity
argument of Hogwild!), and a plan — workers, epochs, rate — that trains the lesson's sparse
problem to a target loss lock-free on real processes sharing θ, within a per-worker budget.
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from . import _answers as answers
from ._core import call_local, fail, passed, run_on_workers, task
from ._diagnose import Case, Cases, as_array, describe_value, returned_none, same, tolerance
from .parallel_models import PROCESSES, shared_file

if TYPE_CHECKING:
    from ddl_lab.hogwild.engine import Problem

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
    fn = my_expected_overlap
    name = getattr(fn, "__name__", "my_expected_overlap")
    fixed = [{"freq": "uniform", "d": 1000, "nnz": 10, "workers": 2},
             {"freq": "lesson", "d": 1000, "nnz": 10, "workers": 4},
             {"freq": "uniform", "d": 100, "nnz": 5, "workers": 1},
             {"freq": "skewed", "d": 50, "nnz": 8, "workers": 8}]
    cases = Cases("expected_overlap", seed, fixed, draws=3, draw=_overlap_case)
    for case in cases:
        freq, w = _frequencies(case), case.params["workers"]
        got = call_local(fn, freq.copy(), w)
        value = as_array(got)
        if value is None or value.size != 1 or not np.isfinite(value).all():
            fail((returned_none(got, name, "the expected number of shared coordinates") or
                  f"{name} returned {describe_value(got)}; return one number") + f" [{case}].")
        want, x = (w - 1) * float(np.sum(freq ** 2)), float(value.ravel()[0])
        if not same(want, x, rtol=max(1e-6, tolerance(got)), scale=max(want, 1e-3)):
            fail(f"{name}(freq, {w}) returned {x:.6g}, expected (workers − 1)·Σ f_j² = "
                 f"{want:.6g} — {_overlap_fault(x, freq, w)} [{case}].")
    passed("expected_overlap", f"on {len(cases)} cases (uniform, skewed and the lesson's "
           "frequencies, 1–16 workers): (workers − 1)·Σ f_j² shared coordinates — a "
           "coordinate is in two independent updates with probability f_j²")


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
    return next((why for why, v in named.items()
                 if not same(v, right, rtol=1e-6, scale=max(right, 1e-3))
                 and same(v, got, rtol=1e-6, scale=max(right, 1e-3))),
                "add up, over the coordinates, the chance that yours and another update both "
                "touch it, for each of the other updates")


# ------------------------------------------------------------------ a Hogwild! plan

PLAN_EXAMPLES = 2000            # the lesson's sparse problem, 2,000 examples
PLAN_BUDGET = 3000              # updates one worker may do (the time there is)
PLAN_TARGET = 0.20              # training loss the shared θ must reach
PLAN_SEEDS = (0, 1)             # row shuffles: both runs must reach the target
PLAN_WINDOW = 50                # updates per worker between two meetings at a barrier


@functools.lru_cache(maxsize=1)
def plan_problem() -> "Problem":
    """The lesson's sparse logistic regression (1,000 features, 10 per example), 2,000
    examples."""
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
        run_on_workers(_plan_worker, PROCESSES, path, problem, shards, lr, timeout=60.0)
        theta = np.fromfile(path, np.float64).copy()
    return problem.loss(theta)


def _real_budget(rng: np.random.Generator) -> dict[str, Any]:
    """Budgets for a second real run: 2 or 3 workers with time for at least 3 epochs."""
    w = int(rng.integers(2, PROCESSES + 1))
    return {"examples": PLAN_EXAMPLES, "max_updates_per_worker":
            int(rng.integers(-(-3 * PLAN_EXAMPLES // w), 4001)), "max_workers": w}


def _paper_budget(rng: np.random.Generator, tight: bool) -> dict[str, Any]:
    """Budgets judged by their arithmetic only: 500–20,000 examples, 2–16 workers, time for
    3–8 epochs — or, ``tight``, for e·⌊examples/workers⌋ updates and less than e epochs
    (workers not dividing the examples), where counting each worker's share of an epoch
    as ⌊examples/workers⌋ instead of rounding up breaks the budget."""
    w = int(rng.integers(2, 17))
    n = int(rng.integers(500, 20001)) // w * w + int(rng.integers(1, w))
    e = int(rng.integers(3, 9))
    if not tight:
        return {"examples": n, "max_updates_per_worker": int(-(-rng.uniform(3, 8) * n // w)),
                "max_workers": w}
    slack = -(-e * (n % w) // w)                     # e·⌊n/w⌋ + slack ≥ e·n/w
    return {"examples": n, "max_updates_per_worker": e * (n // w) + int(rng.integers(slack)),
            "max_workers": w}


def _plan_budgets(seed: int) -> list[Case]:
    """The prompt's budgets, one drawn for a real run, four drawn for their arithmetic."""
    prompt = {"examples": PLAN_EXAMPLES, "max_updates_per_worker": PLAN_BUDGET,
              "max_workers": PROCESSES}
    kinds = iter([_real_budget, lambda r: _paper_budget(r, True),
                  lambda r: _paper_budget(r, False), lambda r: _paper_budget(r, True),
                  lambda r: _paper_budget(r, False)])
    return list(Cases("hogwild_plan", seed, [prompt], draws=5, draw=lambda r: next(kinds)(r)))


@task("hogwild")
def hogwild_plan(my_hogwild_plan: Callable, seed: int = 0) -> None:
    """Lesson 03, task 4: ``my_hogwild_plan(examples, max_updates_per_worker, max_workers)``
    returns ``{"workers", "epochs", "lr"}`` with which lock-free Hogwild! — the lesson's loop
    on real processes sharing θ — trains the lesson's sparse problem (2,000 examples) to a
    training loss ≤ 0.20 on two shuffles: for the prompt's budgets (3,000 updates, 3
    workers) and one drawn budget, run for real; and no worker over its budget of updates,
    no more workers than allowed, for four more budgets drawn far from the prompt's (500 to
    20,000 examples, 1–16 workers), so that the plan must be computed from its inputs."""
    fn = my_hogwild_plan
    name = getattr(fn, "__name__", "my_hogwild_plan")
    cases, real = _plan_budgets(seed), 2          # the first two run for real
    plans: list[tuple[int, int, float]] = []
    reports = []
    for k, case in enumerate(cases):
        p = case.params
        args = (p["examples"], p["max_updates_per_worker"], p["max_workers"])
        where = (f"examples = {args[0]:,}, max_updates_per_worker = {args[1]:,}, "
                 f"max_workers = {args[2]}")
        out = call_local(fn, *args) if k == 0 else answers.plan_call(fn, args, name, where)
        plans.append(_valid_plan(name, out, case, plans))
        if k >= real:
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
    passed("hogwild_plan", "lock-free on real processes sharing θ — " + "; ".join(reports)
           + f"; within the budgets of {len(cases) - real} more drawn far from the prompt's")


def _valid_plan(name: str, plan: Any, case: Case, before: list) -> tuple[int, int, float]:
    """The plan's (workers, epochs, lr), or a CheckFailed naming the budget it broke."""
    p = case.params
    if problem := answers.plan(plan, name, {"workers": "", "epochs": "", "lr": ""}):
        fail(f"{problem} [{case}]")
    for k in ("workers", "epochs"):
        if answers.whole(plan[k]) is None or answers.whole(plan[k]) < 1:
            fail(f"{k} = {plan[k]!r}: a whole number ≥ 1 [{case}].")
    workers, epochs, lr = (answers.whole(plan["workers"]), answers.whole(plan["epochs"]),
                           answers.scalar(plan["lr"]))
    if lr is None or not math.isfinite(lr) or lr <= 0:
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
