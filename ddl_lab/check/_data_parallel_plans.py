"""Lesson 05's reasoning and design tasks: the time of local SGD with a straggler (and the
mistakes that give other times), and a plan of averaging steps for non-IID local SGD,
trained on real workers with the lesson's engine and judged by the worst replica's test
accuracy and the number of allreduces it made."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import _answers as answers
from ._core import fail
from ._diagnose import describe_value

# ------------------------------------------------------------------ the straggler

ARGS = ("n", "steps", "H", "compute", "slow", "allreduce", "rotating")


def slow_steps(n: int, H: int, rotating: bool) -> float:
    """Slow steps of the slowest rank in a period: H if rank 0 is always slow; if the slow
    rank turns, some rank meets ⌈H/n⌉ of the H steps."""
    return math.ceil(H / n) if rotating else H


def straggler_time(n: int, steps: int, H: int, c: float, k: float, a: float,
                   rotating: bool) -> float:
    """steps/H periods; each waits for the slowest rank's H steps, then one allreduce."""
    return steps // H * (H * c + (k - 1) * c * slow_steps(n, H, rotating) + a)


def _period(steps: int, H: int, body: float, a: float) -> float:
    return steps // H * (body + a)


STRAGGLER_MISTAKES: dict[str, Callable[..., float | None]] = {
    "the ranks average only every H steps, so there is one allreduce per period, "
    "steps/H in all, not one per step":
        lambda n, T, H, c, k, a, rot: straggler_time(n, T, H, c, k, 0, rot) + T * a
        if H > 1 else None,
    "the slow rank changes every step: in a period of H steps each rank is slow only in "
    "the steps t with t % n equal to its rank — at most ⌈H/n⌉ of them — and between "
    "averagings nobody waits for anybody":
        lambda n, T, H, c, k, a, rot: straggler_time(n, T, H, c, k, a, False) if rot else None,
    "rank 0 is slow at EVERY step: local SGD averages less often, but each period still "
    "waits for rank 0's H slow steps — a persistent straggler is not hidden":
        lambda n, T, H, c, k, a, rot: straggler_time(n, T, H, c, k, a, True) if not rot else None,
    "the slow steps do not share out evenly: when n does not divide H, some rank is slow "
    "⌈H/n⌉ times in a period, and the averaging waits for that rank":
        lambda n, T, H, c, k, a, rot: _period(T, H, H * c + (k - 1) * c * H / n, a)
        if rot else None,
    "some rank is slow ⌈H/n⌉ times in a period, not ⌊H/n⌋ (and the averaging waits for it)":
        lambda n, T, H, c, k, a, rot: _period(T, H, H * c + (k - 1) * c * (H // n), a)
        if rot else None,
    "a slow step takes slow × compute in all — (slow − 1) × compute more than a fast one, "
    "not slow × compute more":
        lambda n, T, H, c, k, a, rot: _period(T, H, H * c + k * c * slow_steps(n, H, rot), a),
    "the averaging waits for the slowest rank, not for the average one":
        lambda n, T, H, c, k, a, rot: _period(T, H, H * c + (k - 1) * c * H / n, a),
    "the allreduce is missing: each period ends with one, `allreduce` seconds":
        lambda n, T, H, c, k, a, rot: straggler_time(n, T, H, c, k, 0, rot),
    "that is the time without the straggler: the averaging must wait for the slow rank":
        lambda n, T, H, c, k, a, rot: _period(T, H, H * c, a),
}

STRAGGLER_FIXED = [
    {"n": 4, "steps": 12, "H": 1, "compute": 0.1, "slow": 3.0, "allreduce": 0.02,
     "rotating": False},
    {"n": 4, "steps": 12, "H": 4, "compute": 0.1, "slow": 3.0, "allreduce": 0.02,
     "rotating": True},
    {"n": 4, "steps": 12, "H": 4, "compute": 0.1, "slow": 3.0, "allreduce": 0.02,
     "rotating": False},
    {"n": 4, "steps": 24, "H": 6, "compute": 0.05, "slow": 2.5, "allreduce": 0.03,
     "rotating": True},
    {"n": 3, "steps": 10, "H": 1, "compute": 0.05, "slow": 2.0, "allreduce": 0.01,
     "rotating": True},
]


def straggler_draw(rng: np.random.Generator) -> dict[str, Any]:
    H = int(rng.integers(1, 13))
    return {"n": int(rng.integers(2, 9)), "steps": H * int(rng.integers(1, 7)), "H": H,
            "compute": round(float(rng.uniform(0.01, 0.5)), 3),
            "slow": round(float(rng.uniform(1.5, 5.0)), 2),
            "allreduce": round(float(rng.uniform(0.001, 0.3)), 4),
            "rotating": bool(rng.integers(0, 2))}


# ------------------------------------------------------------------ the averaging plan

WORKLOAD, RANKS, BATCH, LR, SKEW = "digits-logreg", 4, 64, 0.5, 1.0
PLAN_CASES = [{"steps": 96, "max_allreduces": 8, "target": 0.83},
              {"steps": 100, "max_allreduces": 6, "target": 0.80},
              {"steps": 60, "max_allreduces": 3, "target": 0.76}]
DRAWS, TRAINED = 6, 2     # budgets the prompt does not show; the first TRAINED are trained
MARGIN = 0.03             # their target: the even spread's worst replica, less 3 points


def budget_draw(rng: np.random.Generator) -> dict[str, Any]:
    """A budget the prompt does not show: 24–300 steps, 2 to min(40, steps/4) allreduces."""
    T = int(rng.integers(24, 301))
    return {"steps": T, "max_allreduces": int(rng.integers(2, min(40, T // 4) + 1))}


def unseen_budgets(seed: int) -> list[dict[str, Any]]:
    """DRAWS budgets the prompt does not show, drawn from ``seed``. The first (trained) has a
    prime number of steps: a period that must divide the steps would waste its budget."""
    rng = np.random.default_rng([0x5EED, seed])
    budgets = [budget_draw(rng) for _ in range(DRAWS)]
    T = budgets[0]["steps"]
    budgets[0]["steps"] = next(p for p in range(T, 2 * T) if all(p % d for d in range(2, p)))
    return budgets


def even_spread(steps: int, budget: int) -> list[int]:
    """The reference plan for a drawn budget: every allreduce, evenly spaced, the last one
    after the last step."""
    return sorted({round(steps * (i + 1) / budget) for i in range(budget)})


def plan_of(got: Any, call: str, steps: int, budget: int) -> int | list[int]:
    """The learner's plan as a period H or a sorted list of steps, or a failure (also for a
    plan that averages more often than the budget allows: no need to train to see it)."""
    if isinstance(got, (bool, np.bool_)) or got is None:
        fail(f"{call} returned {describe_value(got)}; return the averaging period H (a whole "
             "number) or the steps after which to average (a list of step numbers).")
    if answers.scalar(got) is not None:           # a period H: 12, np.int64(12), 12.0
        H = answers.whole(got)
        if H is None or H < 1:
            fail(f"{call} returned H = {describe_value(got)}; the averaging period is a whole "
                 "number of steps, at least 1.")
        return _within(H, call, steps, budget)
    try:
        plan = sorted({int(s) for s in got})
        exact = all(float(s) == int(s) for s in got)
    except (TypeError, ValueError):
        plan, exact = [], False
    if not exact or not plan:
        fail(f"{call} returned {describe_value(got)}; return H (a whole number) or a "
             "non-empty list of whole step numbers.")
    if plan[0] < 1 or plan[-1] > steps:
        fail(f"{call} returned the steps {plan[:8]}{'…' if len(plan) > 8 else ''}: steps "
             f"are counted from 1 to {steps} (I_T = {{H, 2H, …}}), averaging after step t; "
             f"step {plan[0] if plan[0] < 1 else plan[-1]} does not exist.")
    return _within(plan, call, steps, budget)


def _within(plan: int | list[int], call: str, steps: int, budget: int) -> int | list[int]:
    count = len(sync_steps(plan, steps))
    if count > budget:
        fail(f"{call} returned a plan that averages {count} times in {steps} steps (after "
             f"steps {sync_steps(plan, steps)[:6]}…), but the budget is {budget} allreduces.")
    return plan


def sync_steps(plan: int | list[int], steps: int) -> list[int]:
    return list(range(plan, steps + 1, plan)) if isinstance(plan, int) else plan


def plan_run(steps: int, sync: int | list[int]) -> tuple[int, Any]:
    """Worker: the lesson's local SGD on non-IID digits with this plan; (averagings, params)."""
    from ddl_lab.data_parallel.engine import local_sgd
    run = local_sgd(WORKLOAD, steps, BATCH, LR, sync_every=sync, skew=SKEW, barrier=False)
    return run.rounds, run.params


def worst_accuracy(results: list) -> float:
    """The worst replica's test accuracy, of each rank's (averagings, parameters)."""
    from ddl_lab.data_parallel.measure import replica_accuracy
    return min(replica_accuracy(WORKLOAD, params) for _, params in results)


REFERENCES: dict[tuple[int, int], float] = {}   # (steps, budget) -> the even spread's worst


def missing_references(cases: list[dict]) -> list[dict]:
    """The trained unseen budgets whose even-spread run is not known yet in this process."""
    return [c for c in cases if (c["steps"], c["max_allreduces"]) not in REFERENCES]


def unseen_targets(cases: list[dict], missing: list[dict], references: list) -> None:
    """Record the even-spread runs of ``missing`` (``references``), then give each trained
    unseen budget its target: the even spread's worst replica, less MARGIN."""
    for case, reference in zip(missing, references):
        REFERENCES[case["steps"], case["max_allreduces"]] = worst_accuracy(reference.results)
    for case in cases:
        best = REFERENCES[case["steps"], case["max_allreduces"]]
        case["target"] = round(best - MARGIN, 3)
        case["why"] = (f" — a budget the prompt does not show; spreading the "
                       f"{case['max_allreduces']} averagings evenly reaches {best:.1%}")


def judge_plan(case: dict, plan: int | list[int], results: list) -> tuple[bool, str]:
    """(True, what the run achieved) if every replica met the target, else (False, what
    went wrong). ``results``: each rank's (averagings, parameters)."""
    T, N, target = (case[k] for k in ("steps", "max_allreduces", "target"))
    rounds = results[0][0]
    accuracy = worst_accuracy(results)
    at = sync_steps(plan, T)
    where = f"{T} steps, at most {N} allreduces, target {target:.0%}" + case.get("why", "")
    times = "1 time" if rounds == 1 else f"{rounds} times"
    ran = (f"{where}: your plan averaged {times} (after steps {at[:6]}"
           f"{'…' if len(at) > 6 else ''}); the worst replica classifies {accuracy:.1%} of "
           "the test digits")
    if accuracy >= target:
        return True, f"{accuracy:.1%} with {rounds} allreduces ({where})"
    last = at[-1] if at else 0
    if last < T:
        return False, (f"{ran}. The last averaging was after step {last}: then every replica "
                       f"took {T - last} more steps on its own skewed shard and drifted toward "
                       "its own digits. Average after the last step.")
    gaps = np.diff([0] + at)
    if rounds < N:
        return False, (f"{ran}: you used {rounds} of the {N} allreduces allowed. On non-IID "
                       f"shards the replicas drift apart between averagings (here up to "
                       f"{gaps.max()} steps): use the budget.")
    return False, (f"{ran}: the longest stretch without averaging is {gaps.max()} steps. The "
                   "replicas drift apart the longer they go alone: spread the averagings out.")
