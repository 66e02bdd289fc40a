"""Lesson 05's reasoning and design checks: the straggler's time (right in several styles;
an allreduce per step, the wrong kind of straggler, evenly shared slow steps, the average
rank named) and the averaging plan, trained on real workers for the prompt's budgets and
for budgets it does not show (no final averaging, the budget exceeded, half the budget,
steps counted from 0, a looked-up plan, a constant plan, divide-only arithmetic named)."""
import math

import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed
from tests.learner_types import in_learner_types

NB = "05_data_parallel"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------ task 3: straggler

def straggler_by_steps(n, steps, H, compute, slow, allreduce, rotating):
    """Another right style: every rank's clock, step by step; the averaging waits for all."""
    clock = np.zeros(n)
    for t in range(steps):
        slowed = t % n if rotating else 0
        clock += compute
        clock[slowed] += (slow - 1) * compute
        if (t + 1) % H == 0:
            clock[:] = clock.max() + allreduce
    return clock.max()


def test_straggler_time_right_answers_pass(solution, capsys):
    check.straggler_time(straggler_by_steps)
    assert capsys.readouterr().out.count("✔ straggler_time: passed") == 1


def _time(body):
    """A learner's formula: steps/H periods of ``body(n, H, c, k, rot)`` plus an allreduce."""
    return lambda n, T, H, c, k, a, rot: T // H * (body(n, H, c, k, rot) + a)


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda *args: None, "returned None"),
    (lambda n, T, H, c, k, a, rot: T // H * (H * c + (k - 1) * c * (math.ceil(H / n) if rot else H))
     + T * a, "one allreduce per period"),
    (_time(lambda n, H, c, k, rot: H * k * c), "the slow rank changes every step"),
    (_time(lambda n, H, c, k, rot: H * c + (k - 1) * c * math.ceil(H / n)),
     "rank 0 is slow at EVERY step"),
    (_time(lambda n, H, c, k, rot: H * c + (k - 1) * c * (H / n if rot else H)),
     "do not share out evenly"),
    (_time(lambda n, H, c, k, rot: H * c + k * c * (math.ceil(H / n) if rot else H)),
     "slow × compute in all"),
    (_time(lambda n, H, c, k, rot: H * c + (k - 1) * c * H / n), "not for the average one"),
])
def test_straggler_time_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.straggler_time(wrong)


# --------------------------------------------------------------- task 4: plan

def plan_floor_spread(steps, max_allreduces):
    """Another right style: the whole budget in integer arithmetic, the last after step T."""
    return [steps * (i + 1) // max_allreduces for i in range(max_allreduces)]


def plan_period_float(steps, max_allreduces):
    """Another right style: a period, as an integral float, when the budget divides T;
    otherwise the spread steps."""
    if steps % max_allreduces == 0:
        return float(steps // max_allreduces)
    return [-(-steps * (i + 1) // max_allreduces) for i in range(max_allreduces)]


def plan_by_divisor(steps, max_allreduces):
    """Divide-only integer arithmetic: the shortest period that divides the steps within the
    budget — right at the prompt's budgets, a budget wasted when T has few divisors."""
    return min(H for H in range(1, steps + 1) if steps % H == 0 and steps // H <= max_allreduces)


LOOKED_UP = {(96, 8): 12, (100, 6): [17, 34, 50, 67, 84, 100], (60, 3): 20}


def plan_looked_up(steps, max_allreduces):
    """The prompt's three budgets, tried at the prompt and kept in a table."""
    return LOOKED_UP[(steps, max_allreduces)]


def test_sync_plan_right_answers_pass(solution, capsys):
    check.sync_plan(plan_floor_spread)
    check.sync_plan(plan_period_float)
    check.sync_plan(in_learner_types(plan_period_float, "numpy"), seed=3)
    out = capsys.readouterr().out
    assert out.count("✔ sync_plan: passed") == 3 and "a budget the prompt does not show" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda T, N: None, "returned None"),
    (lambda T, N: math.ceil(T / N), r"last averaging was after step 85.*after the last step"),
    (lambda T, N: 1, "averages 96 times.*the budget is 8"),
    (lambda T, N: 2 * T // N, "used 4 of the 8 allreduces"),
    (lambda T, N: [T * i // N for i in range(N)], "counted from 1"),
    (plan_looked_up, r"raised KeyError.*budgets the prompt never showed: a plan must be a "
                     r"function of its inputs"),
    (lambda T, N: 20, r"averages \d+ times in \d+ steps.*not one the prompt shows.*the same plan, "
                      r"20, for all \d+ budgets"),
    (lambda T, N: [12, 24, 36, 48, 60, 72, 84, 96][:N],
     r"step 96 does not exist.*not one the prompt shows: a plan must be a function"),
    (lambda T, N: LOOKED_UP.get((T, N), 12), r"averages \d+ times in \d+ steps.*budget is \d+ "
     r"allreduces\. That budget is not one the prompt shows: a plan must be a function"),
    (plan_by_divisor, r"\d+ steps, at most \d+ allreduces.*a budget the prompt does not show.*"
                      r"averaged 1 time.*you used 1 of the \d+ allreduces"),
])
def test_sync_plan_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.sync_plan(wrong)
