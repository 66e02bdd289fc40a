"""One rule for numbers (issue 26): every check of lesson 11 passes its solution returning
float32 numbers (integral floats for whole numbers: a resumed step, n, E) and numpy ones.
check.rendezvous_env is left out: its answers are strings (the env:// variables)."""
import pytest

from ddl_lab import check
from tests.learner_types import STYLES, in_learner_types

STEM = "11_scaling_out"


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task, names", [
    ("fedavg", ["my_fedavg"]), ("resume", ["my_save_checkpoint", "my_resume"]),
    ("best_workers", ["my_best_workers"]), ("fedavg_plan", ["my_fedavg_plan"])])
def test_checks_accept_the_solution_in_learner_types(task, names, style, solution, capsys):
    getattr(check, task)(*(in_learner_types(solution(STEM, n), style) for n in names))
    assert f"✔ {task}: passed" in capsys.readouterr().out
