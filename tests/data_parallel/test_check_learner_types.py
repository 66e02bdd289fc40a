"""Every check of lesson 05 accepts its solution returning float32 or numpy numbers (issue 26,
"one rule for numbers"): the number's own dtype sets the tolerance, integral floats count as
whole numbers."""
import pytest

from ddl_lab import check
from tests.learner_types import STYLES, in_learner_types

# local_sgd works in place on the model and returns nothing: no number to convert.


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task", ["sync_sgd_step", "straggler_time", "sync_plan"])
def test_solution_in_learner_types_passes(task, style, solution, capsys):
    getattr(check, task)(in_learner_types(solution("05_data_parallel", f"my_{task}"), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
