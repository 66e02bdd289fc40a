"""Every check of lesson 04 accepts its solution returning float32 or numpy numbers (issue 26,
"one rule for numbers"): the number's own dtype sets the tolerance, integral floats count as
whole numbers."""
import pytest

from ddl_lab import check
from tests.learner_types import STYLES, in_learner_types

# gather, scatter, tree_gather and chain_bcast return the values the ranks were given (no
# number of the learner's own); pagerank_compute writes vertex.value and returns nothing:
# they hold no numbers to convert.


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task", ["parallel_gradient", "tree_gather_time", "pipeline_chunks"])
def test_solution_in_learner_types_passes(task, style, solution, capsys):
    getattr(check, task)(in_learner_types(solution("04_message_passing", f"my_{task}"), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
