"""One rule for numbers (issue 26): every check of lesson 09 passes its solution returning
float32 numbers (integral floats for whole numbers: micro-batch indices, m) and numpy ones."""
import pytest

from ddl_lab import check
from tests.learner_types import STYLES, in_learner_types

STEM = "09_model_parallel"


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task, name", [
    ("stage_step", "my_stage_step"), ("one_f_one_b", "my_one_f_one_b"),
    ("row_parallel", "my_row_parallel"), ("bytes_per_rank", "my_bytes_per_rank"),
    ("pipeline_plan", "my_pipeline_plan")])
def test_checks_accept_the_solution_in_learner_types(task, name, style, solution, capsys):
    getattr(check, task)(in_learner_types(solution(STEM, name), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
