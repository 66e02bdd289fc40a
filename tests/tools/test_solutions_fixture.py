"""The ``solution`` fixture runs the notebook's own code (the single source of the answers)."""
import pytest


def test_solution_loads_the_notebooks_function(solution):
    cost = solution("06_ring_allreduce", "my_ring_cost")
    assert cost.__module__ == "__main__"
    assert cost(4, 1000, 1.0, 0.0) == 6.0


def test_a_missing_function_is_a_clear_error(solution):
    with pytest.raises(LookupError, match="defines no 'nope'"):
        solution("06_ring_allreduce", "nope")
