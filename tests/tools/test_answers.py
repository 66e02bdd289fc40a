"""The answer readers every check uses (``check._answers``): one rule each."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from ddl_lab.check._answers import pair, plan, scalar, whole

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
