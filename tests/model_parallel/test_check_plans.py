"""Lesson 09's design check: a pipeline plan (GPipe or 1F1B, and m) run on real workers, its
bubble counted in slots from the orders the stages ran and its activations measured. Right
plans in several styles pass; the usual slips are named."""
import math

import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.check.model_parallel import slot_bubble
from ddl_lab.model_parallel.pipeline import SCHEDULES, ideal_bubble

STEM = "09_model_parallel"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b", "serial"])
@pytest.mark.parametrize("p, m", [(1, 3), (2, 1), (3, 4), (4, 12), (5, 2)])
def test_slots_give_the_formula_for_every_schedule(schedule, p, m):
    orders = [SCHEDULES[schedule](r, p, m) for r in range(p)]
    want = ideal_bubble(p, m) if schedule != "serial" else 1 - 1 / p
    assert slot_bubble(orders) == pytest.approx(want)


def always_1f1b(p, batch, max_bubble, max_examples):
    """Another right style: 1F1B always, m from the two limits in closed form, numpy int."""
    for_bubble = math.ceil((p - 1) * (1 - max_bubble) / max_bubble - 1e-9)
    for_memory = math.ceil(batch / (max_examples // p))
    return {"schedule": "1f1b", "m": np.int64(min(batch, max(for_bubble, for_memory, 1)))}


def test_right_pipeline_plans_pass(solution, capsys):
    check.pipeline_plan(always_1f1b)
    out = capsys.readouterr().out
    assert out.count("✔ pipeline_plan: passed") == 1
    assert "p=4: 1f1b m=12, bubble 0.20" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda p, b, t, e: {"schedule": "gpipe", "m": math.ceil((p - 1) * (1 - t) / t - 1e-9)},
     "GPipe runs every forward before any backward"),
    (lambda p, b, t, e: {"schedule": "1f1b", "m": p},
     r"The bubble is \(p − 1\)/\(m \+ p − 1\)"),
    (lambda p, b, t, e: {"schedule": "gpipe" if b <= e else "1f1b",
                         "m": max(math.ceil((p - 1) / t - p), math.ceil(p * b / e))},
     r"falls to 0.25 only at m ≥ 6"),
    (lambda p, b, t, e: {"schedule": "1f1b", "m": 2 * b}, "from 1 to the batch size"),
    (lambda p, b, t, e: {"schedule": "pipedream", "m": 8}, "choose 'gpipe' or '1f1b'"),
    (lambda p, b, t, e: ("1f1b", 8), "return a dict with the keys schedule"),
])
def test_pipeline_plan_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.pipeline_plan(wrong)


_TABLE = {(4, 48, 0.2, 16): ("1f1b", 12), (3, 36, 0.25, 36): ("gpipe", 6),
          (2, 24, 0.1, 4): ("1f1b", 12)}


def looked_up(p, batch, max_bubble, max_examples):
    """Plans found by trial at the cases a learner has seen, kept in a table."""
    schedule, m = _TABLE[p, batch, max_bubble, max_examples]
    return {"schedule": schedule, "m": m}


def divide_only(p, batch, max_bubble, max_examples):
    """Right when max_examples // p divides the batch: floor division elsewhere keeps more."""
    for_bubble = math.ceil((p - 1) * (1 - max_bubble) / max_bubble - 1e-9)
    return {"schedule": "1f1b", "m": min(batch, max(for_bubble, batch // (max_examples // p)))}


@pytest.mark.parametrize("wrong, fault", [
    (looked_up, r"raised KeyError: \(2, 24, 0.1, 6\) for case \d .* — budgets the prompt never showed: "
                "a plan must be a function of its inputs"),
    (lambda p, b, t, e: {"schedule": "1f1b", "m": 12},
     r"drawn by the check, not shown in the prompt\. It returned the same plan, \('1f1b', 12\), "
     "for all 11 budgets"),
    (divide_only, r"kept the activations of \d+ examples at once, over \d+\..*drawn by the check"),
])
def test_plans_that_ignore_their_inputs_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.pipeline_plan(wrong)
