"""Lesson 07's reasoning and design checks: the worst staleness SSP admits (a real shard driven
through the worst schedule agrees) and a Downpour plan within a message budget (real shard and
replica processes). Right answers in several styles pass; the usual slips are named."""
import math

import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed
from tests.learner_types import STYLES, in_learner_types

STEM = "07_parameter_server"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------------ the worst staleness

def staleness_by_counting(s, replicas):
    """Another right style: count the others' pushes clock by clock, a numpy int back."""
    behind, ahead = s, s + 1                 # clocks behind at my pull, ahead at my push
    return np.int64(sum(behind + ahead for _ in range(replicas - 1)))


def test_right_worst_staleness_passes(solution, capsys):
    check.worst_staleness(staleness_by_counting)
    check.worst_staleness(lambda s, n: float((n - 1) * (2 * s + 1)))
    out = capsys.readouterr().out
    assert out.count("✔ worst_staleness: passed") == 2
    assert "measured a staleness of 10" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda s, n: (n - 1) * (s + 1), "start level with you"),
    (lambda s, n: (n - 1) * 2 * s, "one push short per replica"),
    (lambda s, n: n * (2 * s + 1), "count only the OTHER replicas"),
    (lambda s, n: 2 * s + 1, "not just one"),
    (lambda s, n: None, "returned None"),
    (lambda s, n: (n - 1) * (s + 0.5), "whole number of updates"),
])
def test_worst_staleness_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.worst_staleness(wrong)


# ------------------------------------------------------------------ the Downpour plan

def plan_by_search(steps, budget):
    """Another right style: the smallest interval whose messages fit, numpy ints, lr·k = 0.4."""
    k = next(k for k in range(1, steps + 1) if 2 * math.ceil(steps / k) <= budget)
    return {"n_fetch": np.int64(k), "n_push": np.int64(k), "lr": 0.4 / k}


def test_right_downpour_plans_pass(solution, capsys):
    check.downpour_plan(plan_by_search)
    out = capsys.readouterr().out
    assert out.count("✔ downpour_plan: passed") == 1
    assert "120 steps, 40 messages: 40 sent" in out


def _prompt_table():
    def k(budget):
        return math.ceil(240 / budget)
    return {(120, b): {"n_fetch": k(b), "n_push": k(b), "lr": 0.3 / k(b)} for b in (120, 60, 40)}


TABLE = _prompt_table()


@pytest.mark.parametrize("wrong, fault", [
    (lambda steps, budget: TABLE[steps, budget],
     r"raised KeyError: .* — budgets the prompt never showed: a plan must be a function "
     "of its inputs"),
    (lambda steps, budget: TABLE.get((steps, budget)), "returned None for case .* — budgets the "
                                                       "prompt never showed"),
    (lambda steps, budget: {"n_fetch": 6, "n_push": 6, "lr": 0.05},
     r"a budget the prompt does not show\)\. .*It returned the same plan, \(6, 6, 0.05\), for "
     r"all \d+ budgets"),
    (lambda steps, budget: {"n_fetch": 2 * steps // budget or 1, "n_push": 2 * steps // budget or 1,
                            "lr": 0.3 / (2 * steps // budget or 1)}, "was rounded DOWN"),
    (lambda steps, budget: {"n_fetch": math.ceil(2 * steps / budget),
                            "n_push": math.ceil(2 * steps / budget),
                            "lr": 0.3 / math.ceil(2 * steps / budget)}, "With an odd budget"),
])
def test_plans_that_ignore_their_inputs_are_named(wrong, fault):
    """Issue 26: a table of the prompt's budgets, a constant plan and integer arithmetic right
    only when the budget divides 2·steps fail, saying so (a seed whose draws show it)."""
    with pytest.raises(CheckFailed, match=fault):
        check.downpour_plan(wrong, seed=1)


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task", ["worst_staleness", "downpour_plan"])
def test_solutions_in_learner_number_types_pass(task, style, solution, capsys):
    """Issue 26's rule for numbers: float32 (whole numbers as 4.0) and numpy results pass."""
    getattr(check, task)(in_learner_types(solution(STEM, f"my_{task}"), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda steps, budget: {"n_fetch": 1, "n_push": 1, "lr": 0.1},
     "Pulls count as well as pushes"),
    (lambda steps, budget: {"n_fetch": 1, "n_push": steps, "lr": 0.1},
     "a fetch is a message as much as a push"),
    (lambda steps, budget: {"n_fetch": math.ceil(2 * steps / budget),
                            "n_push": math.ceil(2 * steps / budget), "lr": 0.2},
     "a push carries the SUM"),          # diverged or unstable: the verdict names the sum
    (lambda steps, budget: (4, 4, 0.1), "return a dict with the keys n_fetch"),
    (lambda steps, budget: {"n_fetch": 2.5, "n_push": 4, "lr": 0.1}, "whole numbers ≥ 1"),
])
def test_downpour_plan_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.downpour_plan(wrong)
