"""Lesson 00's checks: right answers in several styles pass; the stub, hard-coded world
sizes, closed forms, the slips of the π reasoning (the total on every rank, p(1 − p) without
the 16, eps not squared) and plans that miss a limit fail with a message naming the fault."""
import math

import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed, _core
from tests.learner_types import STYLES, in_learner_types


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    monkeypatch.setattr(_core, "DEFAULT_TIMEOUT", 4.0)


def stub(*args):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------------ task 1: my_rank

def test_rank_accepts_a_tensor_style_answer(cell, capsys):
    ns = cell("""
def my_rank():
    return torch.tensor(dist.get_rank())
""", torch=torch, dist=dist)
    check.rank(ns["my_rank"])
    assert "✔ rank: passed" in capsys.readouterr().out


def right_only_with_four_ranks():
    return [0, 1, 2, 3][dist.get_rank()] if dist.get_world_size() == 4 else 0


@pytest.mark.parametrize("wrong, hint", [
    (dist.get_world_size, "that is the world size, not the rank"),
    (lambda: dist.get_rank() + 1, "They start at 0"),
    (lambda: 0, "every rank returned the same number"),
    (lambda: str(dist.get_rank()), "return the value as a plain int"),
    (lambda: None, "returned None: the function has no `return`"),
    (right_only_with_four_ranks, "right for 4 ranks but not for 3 ranks: does the code assume "
                                 "one world size"),
])
def test_rank_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.rank(wrong)


def test_learner_exception_names_the_rank():
    def broken():
        return 1 // (dist.get_rank() - 1)
    with pytest.raises(CheckFailed, match="broken failed on rank 1 of 4: ZeroDivisionError"):
        check.rank(broken)


# ------------------------------------------------------------ task 2: my_offsets

def float_tensor_style(count):
    t = torch.zeros(dist.get_world_size(), dtype=torch.float64)
    t[dist.get_rank()] = count
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t[:dist.get_rank()].sum()), float(t.sum())


def no_allreduce(count):
    return 0, count


def max_instead_of_sum(count):
    t = torch.zeros(dist.get_world_size(), dtype=torch.int64)
    t[dist.get_rank()] = count
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t[:dist.get_rank()].sum()), int(t.sum())


def inclusive_start(count):
    t = torch.zeros(dist.get_world_size(), dtype=torch.int64)
    t[dist.get_rank()] = count
    dist.all_reduce(t)
    return int(t[:dist.get_rank() + 1].sum()), int(t.sum())


def ranks_above(count):
    t = torch.zeros(dist.get_world_size(), dtype=torch.int64)
    t[dist.get_rank()] = count
    dist.all_reduce(t)
    return int(t[dist.get_rank() + 1:].sum()), int(t.sum())


def the_sum_only(count):                 # the lesson's collective: the total, and a guess
    t = torch.tensor([count])
    dist.all_reduce(t)
    return dist.get_rank() * int(t.item()) // dist.get_world_size(), int(t.item())


def two_allreduces(count):
    t = torch.zeros(dist.get_world_size(), dtype=torch.int64)
    t[dist.get_rank()] = count
    dist.all_reduce(t)
    u = torch.tensor([count])
    dist.all_reduce(u)
    return int(t[:dist.get_rank()].sum()), int(u.item())


def all_gather_too(count):
    got = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(got, torch.tensor([count]))
    t = torch.tensor([count])
    dist.all_reduce(t)
    return int(sum(g.item() for g in got[:dist.get_rank()])), int(t.item())


def forgets_return(count):
    t = torch.zeros(dist.get_world_size(), dtype=torch.int64)
    t[dist.get_rank()] = count
    dist.all_reduce(t)


def only_rank_zero_reduces(count):       # the others never join: a deadlock
    t = torch.zeros(dist.get_world_size(), dtype=torch.int64)
    t[dist.get_rank()] = count
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    return int(t[:dist.get_rank()].sum()), int(t.sum())


def test_offsets_accept_floats_and_a_list_from_a_cell(cell, capsys):
    check.offsets(float_tensor_style)
    ns = cell("""
import torch.distributed as D
from torch.distributed import get_rank, get_world_size
def my_offsets(count):
    t = torch.zeros(get_world_size())
    t[get_rank()] = count
    D.all_reduce(t)
    return [t[:get_rank()].sum().item(), t.sum().item()]
""", torch=torch)
    check.offsets(ns["my_offsets"])
    assert capsys.readouterr().out.count("✔ offsets: passed") == 2


@pytest.mark.parametrize("wrong, hint", [
    (no_allreduce, "dist.all_reduce was never called"),
    (max_instead_of_sum, "op=MAX.*use the default op, ReduceOp.SUM"),
    (inclusive_start, "counts the rank's own examples too"),
    (ranks_above, "counts the ranks above it"),
    (the_sum_only, "one summed number cannot tell"),
    (two_allreduces, r"called dist.all_reduce \[2, 2, 2, 2\] times"),
    (all_gather_too, "called allgather: the task is one dist.all_reduce"),
    (forgets_return, "returned None: the function has no `return`"),
])
def test_offsets_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.offsets(wrong)


def test_a_deadlock_is_a_timeout_message_not_a_hang():
    with pytest.raises(CheckFailed, match=r"timed out after 4 s.*rank\(s\) \[0\].*deadlock"):
        check.offsets(only_rank_zero_reduces)


def test_verdicts_are_the_same_5_times(solution):
    right, wrong = solution("00_welcome", "my_offsets"), ranks_above
    for _ in range(5):
        check.offsets(right)
        check.rank(dist.get_rank)
        with pytest.raises(CheckFailed, match="with 4 ranks holding.*counts the ranks above"):
            check.offsets(wrong)


def test_check_failed_renders_as_one_line_in_ipython():
    lines = CheckFailed("rank 2 returned 5, expected 2")._render_traceback_()
    assert len(lines) == 1 and "rank 2 returned 5" in lines[0]


NB = "00_welcome"
VAR = math.pi * (4 - math.pi)


# ------------------------------------------------------------ task 3: darts per rank

def exact_real_number(eps, workers):          # not rounded: its standard error is eps exactly
    return VAR / (workers * eps ** 2)


def total_then_share(eps, workers):
    return -(-math.ceil(VAR / eps ** 2) // workers)


def bisection(eps, workers):
    lo, hi = 1, 10 ** 12
    while lo < hi:
        mid = (lo + hi) // 2
        if math.sqrt(VAR / (workers * mid)) <= eps:
            hi = mid
        else:
            lo = mid + 1
    return lo


@pytest.mark.parametrize("style", [exact_real_number, total_then_share, bisection])
def test_darts_right_answers_pass(style, solution, capsys):
    check.darts_per_rank(style)
    assert capsys.readouterr().out.count("✔ darts_per_rank: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (stub, "stub is not implemented yet"),
    (lambda eps, w: math.ceil(VAR / eps ** 2), "that is the total for all ranks"),
    (lambda eps, w: math.ceil(math.pi / 4 * (1 - math.pi / 4) / (w * eps ** 2)),
     r"p\(1 − p\)/eps², the variance of one hit"),
    (lambda eps, w: math.ceil(VAR / (w * eps)), "eps must be squared"),
    (lambda eps, w: math.ceil(math.sqrt(VAR) / (w * eps ** 2)), "uses the standard deviation"),
    (lambda eps, w: math.floor(VAR / (w * eps ** 2)), "round up, not down"),
    (lambda eps, w: None, "returned None"),
    (lambda eps, w: 2 * math.ceil(VAR / (w * eps ** 2)), "more than needed"),
])
def test_darts_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.darts_per_rank(wrong)


# ------------------------------------------------------------ task 4: a plan for π

def all_four_workers_at_two_sigma(tol, per_rank_max, budget):
    return 4, math.ceil(4 * VAR / tol ** 2 / 4)


def with_the_reasoning_task(tol, per_rank_max, budget):
    for workers in range(1, 5):
        darts = math.ceil(VAR / (workers * (tol / 1.96) ** 2))
        if darts <= per_rank_max:
            return workers, darts


def sigma_equals_tol(tol, per_rank_max, budget):
    total = math.ceil(VAR / tol ** 2)
    workers = math.ceil(total / per_rank_max)
    return workers, math.ceil(total / workers)


def total_on_every_rank(tol, per_rank_max, budget):
    return 2, math.ceil(1.645 ** 2 * VAR / tol ** 2)


def workers_rounded_down(tol, per_rank_max, budget):
    total = math.ceil(1.645 ** 2 * VAR / tol ** 2)
    workers = max(1, total // per_rank_max)         # right only when per_rank_max divides
    return workers, math.ceil(total / workers)


def one_worker_does_it_all(tol, per_rank_max, budget):
    return 1, math.ceil(1.645 ** 2 * VAR / tol ** 2)


def test_plan_solution_and_other_styles_pass(solution, capsys):
    check.pi_plan(solution(NB, "my_pi_plan"))
    check.pi_plan(all_four_workers_at_two_sigma)
    check.pi_plan(with_the_reasoning_task)
    check.pi_plan(solution(NB, "my_pi_plan"), seed=3)       # other drawn limits
    out = capsys.readouterr().out
    assert out.count("✔ pi_plan: passed — on real workers") == 4


LOOKED_UP = {0.02: (2, 6000), 0.01: (3, 16000)}       # the real runs' fixed tolerances


@pytest.mark.parametrize("wrong, hint", [
    (stub, "stub is not implemented yet"),
    # issue 26: plans that ignore their inputs
    (lambda tol, m, b: (4, 20_000), "the same plan, \\(4, 20000\\), for all \\d budgets.*a plan "
                                     "must be a function of its inputs"),
    (lambda tol, m, b: LOOKED_UP[tol], "raised KeyError.*budgets the prompt never showed"),
    (sigma_equals_tol, r"within 0.02 of π in 1\d\d of 200 runs.*about 68 % of the runs"),
    (total_on_every_rank, "over the budget.*on EVERY rank: the all_reduce pools"),
    (one_worker_does_it_all, "a rank can throw at most per_rank_max = 9,100"),
    (workers_rounded_down, "rounding down is right only when per_rank_max divides the darts"),
    (lambda tol, m, b: (5, 1000), "the lesson's cluster has 4"),
    (lambda tol, m, b: 3, "return a pair \\(workers, darts\\)"),
    (lambda tol, m, b: (2, 0.5), "whole numbers ≥ 1"),
])
def test_plan_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.pi_plan(wrong)


# ------------------------------------------------------------ one rule for numbers (issue 26)

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task, name", [
    ("rank", "my_rank"), ("offsets", "my_offsets"),
    ("darts_per_rank", "my_darts_per_rank"), ("pi_plan", "my_pi_plan")])
def test_solutions_pass_in_the_learner_s_number_types(task, name, style, solution, capsys):
    getattr(check, task)(in_learner_types(solution(NB, name), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
