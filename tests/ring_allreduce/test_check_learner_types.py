"""Every check of lesson 06 accepts its solution returning float32 or numpy numbers (issue 26,
"one rule for numbers"): the number's own dtype sets the tolerance, integral floats count as
whole numbers."""
import pytest

from ddl_lab import check
from tests.learner_types import STYLES, in_learner_types

# ring_allreduce works in place on the tensor it is given: no number to convert.


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task", ["ring_cost", "tree_ring_crossover", "bucket_bytes"])
def test_solution_in_learner_types_passes(task, style, solution, capsys):
    getattr(check, task)(in_learner_types(solution("06_ring_allreduce", f"my_{task}"), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
