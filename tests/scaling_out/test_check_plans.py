"""Lesson 11's design check: a FedAvg plan (local epochs E, fraction C of clients) that reaches
85 % within R rounds under an upload and a compute budget, run on 3 real workers. Right plans
in two styles pass; the usual slips are named (most before any worker starts)."""
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed

STEM = "11_scaling_out"


def stub(*args):
    raise NotImplementedError("replace this line with your code")


def epochs_per_round(rounds, uploads, epochs):
    """Another right style: the clients the uploads allow (as a float count), then the epochs
    each can run a round, from the epochs budget spread over the rounds."""
    k = min(10.0, float(uploads // rounds))
    return {"C": k / 10, "E": float(min(20, epochs // (k * rounds)))}


def test_right_fedavg_plans_pass(solution, capsys):
    check.fedavg_plan(epochs_per_round)
    out = capsys.readouterr().out
    assert out.count("✔ fedavg_plan: passed") == 1
    assert "18 of 18 uploads" in out


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda R, U, W: {"E": 1, "C": U // R / 10}, "Local epochs cost no bytes"),
    (lambda R, U, W: {"E": 5, "C": 0.5}, r"upload 30 models, over 18\. Each round uploads ⌊C·K⌋"),
    (lambda R, U, W: {"E": 20, "C": U // R / 10}, "local epochs, over 180"),
    (lambda R, U, W: {"E": W // U, "C": min(1.0, U / 10)}, "for the whole run, not one round"),
    (lambda R, U, W: {"E": 25, "C": 0.3}, "from 1 to 20"),
    (lambda R, U, W: {"E": 10, "C": 0}, "0 < C ≤ 1"),
    (lambda R, U, W: (10, 0.3), "return a dict with the keys E"),
])
def test_fedavg_plan_mistakes_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.fedavg_plan(wrong)


def looked_up_or_none(rounds, uploads, epochs):
    """A table with .get: None for budgets it does not hold."""
    return {(6, 18, 180): {"E": 10, "C": 0.3}, (8, 16, 240): {"E": 15, "C": 0.2}}.get(
        (rounds, uploads, epochs))


def looked_up(rounds, uploads, epochs):
    """Plans found by trial at the prompt's budgets, kept in a table."""
    return {(6, 18, 180): {"E": 10, "C": 0.3}, (8, 16, 240): {"E": 15, "C": 0.2}}[
        rounds, uploads, epochs]


@pytest.mark.parametrize("wrong, fault", [
    (looked_up, r"raised KeyError: \(9, 35, 423\) for case .* — budgets the prompt never showed: a "
                "plan must be a function of its inputs"),
    (looked_up_or_none, r"returned None for case \d \(rounds=9, uploads=35, epochs=423.* — budgets the "
                        "prompt never showed: a plan must be a function of its inputs"),
    (lambda R, U, W: {"E": 10, "C": 0.2}, r"18 rounds upload 36 models, over 23\..*drawn by the "
     r"check.*the same plan, \(10, 0.2\), for all 10 budgets"),
])
def test_plans_that_ignore_their_inputs_are_named(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.fedavg_plan(wrong)
