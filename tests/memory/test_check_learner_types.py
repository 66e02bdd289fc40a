"""One rule for numbers (issue 26): the checks of lesson 10 pass their solution returning
float32 numbers (integral floats for whole numbers: the stage) and numpy ones.
check.zero2_step is left out: it returns nothing (it updates param in place)."""
import pytest

from ddl_lab import check
from tests.learner_types import STYLES, in_learner_types

STEM = "10_memory"


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task, name", [("zero_bytes", "my_zero_bytes"),
                                        ("memory_plan", "my_memory_plan")])
def test_checks_accept_the_solution_in_learner_types(task, name, style, solution, capsys):
    getattr(check, task)(in_learner_types(solution(STEM, name), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
