"""The answer readers every check uses (``check._answers``): one rule each."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ddl_lab.check import CheckFailed
from ddl_lab.check._answers import Real, Whole, answer, pair, plan, scalar, whole

NUMBERS = [(3, 3.0), (2.5, 2.5), (np.float32(3.25), 3.25), (np.int64(-4), -4.0),
           (np.array(2.0), 2.0), (np.array([2.0]), 2.0), (torch.tensor(1.5), 1.5),
           (torch.tensor([7]), 7.0), (torch.tensor(0.1, dtype=torch.float16), 0.0999755859375)]
NOT_NUMBERS = [None, True, np.bool_(False), torch.tensor(True), "3", b"3", [1.0], (1.0,),
               {"x": 1}, np.array([1.0, 2.0]), torch.zeros(2, 2), object()]


@pytest.mark.parametrize("x, want", NUMBERS)
def test_scalar_reads_one_number_in_any_container_of_one(x, want):
    assert scalar(x) == want


@pytest.mark.parametrize("x", NOT_NUMBERS)
def test_scalar_refuses_everything_else(x):
    assert scalar(x) is None


def test_scalar_keeps_nan_and_inf_for_the_check_to_judge():
    assert math.isnan(scalar(float("nan"))) and scalar(np.float32("inf")) == math.inf


@pytest.mark.parametrize("x, want", [(3, 3), (3.0, 3), (np.float32(8.0), 8), (torch.tensor(5.0), 5),
                                     (np.array([2]), 2), (2.5, None), (float("inf"), None),
                                     (True, None), ("4", None)])
def test_whole_is_a_scalar_with_no_fraction(x, want):
    assert whole(x) == want


@pytest.mark.parametrize("x", [(1, 2.5), [np.float32(1), torch.tensor(2.5)], np.array([1.0, 2.5]),
                               torch.tensor([1.0, 2.5])])
def test_pair_reads_two_numbers_in_any_style(x):
    assert pair(x) == (1.0, 2.5)


@pytest.mark.parametrize("x", [(1,), (1, 2, 3), 3.0, (1, "a"), ([1, 2], 3), np.zeros(3), None])
def test_pair_refuses_anything_but_two_numbers(x):
    assert pair(x) is None


def test_plan_names_the_missing_keys():
    keys = {"tau": "", "error_feedback": ""}
    assert plan({"tau": 1, "error_feedback": True}, "my_plan", keys) is None
    assert plan({"tau": 1}, "my_plan", keys) == (
        "my_plan returned dict {'tau': 1}; return a dict with the keys tau and "
        "error_feedback.")


def test_declared_constraints_read_their_interval_and_say_it_in_one_wording():
    assert str(Whole(1, 64)) == "a whole number from 1 to 64"
    assert str(Real(0, 1, closed="right")) == "a number in (0, 1]"
    assert str(Real(0, what="the seconds")) == "the seconds ≥ 0"
    assert Whole(1, 64).read(np.float32(3.0)) == 3 and Whole(1, 64).read(0) is None
    assert Whole(1, 64).read(2.5) is None and Whole(1, 64).read(True) is None
    assert Real(0, 1, closed="right").read(1) == 1.0
    assert Real(0, 1, closed="right").read(0.0) is None
    assert Real(closed="neither").read(float("inf")) is None
    assert Real().read(float("nan")) is None


def test_an_answer_outside_its_constraint_fails_saying_what_came_back():
    with pytest.raises(CheckFailed, match=r"f\(n=3\) returned a list of shape \(2,\); "
                                          r"return a whole number from 1 to 64\."):
        answer([1, 2], Whole(1, 64), "f", "f(n=3)")
    with pytest.raises(CheckFailed, match="f returned None: the function has no `return`"):
        answer(None, Whole(1, 64), "f", "f(n=3)")
    assert answer(torch.tensor(5.0), Whole(1, 64), "f", "f(n=3)") == 5

