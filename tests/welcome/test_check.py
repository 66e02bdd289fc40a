"""Lesson 00's checks accept the solution and reject the stub and plausible mistakes."""
import pytest
import torch
import torch.distributed as dist

from ddl_lab import check
from ddl_lab.check import CheckFailed, _core


@pytest.fixture(autouse=True)
def short_timeout(monkeypatch):
    monkeypatch.setattr(_core, "DEFAULT_TIMEOUT", 4.0)


def stub():
    raise NotImplementedError("replace this line with your code")


# task 1: my_rank
def test_rank_solution_passes(capsys):
    check.welcome_rank(dist.get_rank)
    assert "✔ welcome_rank: passed" in capsys.readouterr().out


def test_rank_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.welcome_rank(stub)


@pytest.mark.parametrize("wrong, hint", [
    (dist.get_world_size, "that is the world size"),
    (lambda: dist.get_rank() + 1, "Ranks start at 0"),
    (lambda: 0, r"rank 1 returned 0, expected 1"),
    (lambda: str(dist.get_rank()), "return the rank as a plain int"),
])
def test_rank_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.welcome_rank(wrong)


# task 2: sum_of_ranks
def solution():
    t = torch.tensor([dist.get_rank()])
    dist.all_reduce(t)
    return int(t.item())


def no_allreduce():
    return dist.get_rank()


def max_instead_of_sum():
    t = torch.tensor([dist.get_rank()])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def counted_from_one():
    t = torch.tensor([dist.get_rank() + 1])
    dist.all_reduce(t)
    return int(t.item())


def hard_coded_for_four_ranks():
    return 6


def only_rank_zero_reduces():            # the others never join: a deadlock
    t = torch.tensor([dist.get_rank()])
    if dist.get_rank() == 0:
        dist.all_reduce(t)
    return int(t.item())


def test_allreduce_solution_passes(capsys):
    check.welcome_allreduce(solution)
    assert "✔ welcome_allreduce: passed" in capsys.readouterr().out


def test_allreduce_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.welcome_allreduce(stub)


@pytest.mark.parametrize("wrong, hint", [
    (no_allreduce, "did you call dist.all_reduce"),
    (max_instead_of_sum, "ReduceOp.SUM, not MAX"),
    (counted_from_one, "ranks start at 0"),
    (hard_coded_for_four_ranks, r"with 3 ranks, rank 0 returned 6, expected 0\+1\+…\+2 = 3"),
])
def test_allreduce_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.welcome_allreduce(wrong)


def test_a_deadlock_is_a_timeout_message_not_a_hang():
    with pytest.raises(CheckFailed, match=r"timed out after 4 s.*rank\(s\) \[0\].*deadlock"):
        check.welcome_allreduce(only_rank_zero_reduces)


def test_learner_exception_names_the_rank():
    def broken():
        return 1 // (dist.get_rank() - 1)
    with pytest.raises(CheckFailed, match="broken failed on rank 1 of 4: ZeroDivisionError"):
        check.welcome_rank(broken)


def test_check_failed_renders_as_one_line_in_ipython():
    lines = CheckFailed("rank 2 returned 5, expected 2")._render_traceback_()
    assert len(lines) == 1 and "rank 2 returned 5" in lines[0]
