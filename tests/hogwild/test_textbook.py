"""The Hogwild! loop lesson 03 prints trains the θ the instrumented engine trains."""
import threading

import numpy as np
import pytest

from ddl_lab.hogwild import engine as hogwild
from ddl_lab.hogwild.textbook import hogwild_loop


@pytest.mark.parametrize("kind, seed, epochs", [("sparse", 0, 1), ("sparse", 3, 2), ("dense", 1, 1)])
def test_one_worker_gives_the_engines_theta_bit_for_bit(kind, seed, epochs):
    problem = (hogwild.sparse_problem(m=2000, d=200, nnz=4, seed=seed) if kind == "sparse"
               else hogwild.dense_problem(m=500, d=40, seed=seed))
    engine = hogwild.run(problem, "serial", epochs=epochs, seed=seed, record=False)
    theta = np.zeros(problem.d)
    hogwild_loop(theta, problem, hogwild.deal_rows(len(problem), 1, epochs, seed)[0], problem.lr)
    np.testing.assert_array_equal(theta, engine.theta)


def test_with_a_lock_it_takes_the_lock_once_per_update():
    problem = hogwild.sparse_problem(m=300, d=50, nnz=3)
    taken = []

    class Lock:
        def __enter__(self):
            taken.append(1)

        def __exit__(self, *exc):
            return False

    theta, free = np.zeros(problem.d), np.zeros(problem.d)
    rows = np.arange(len(problem))
    hogwild_loop(theta, problem, rows, problem.lr, Lock())
    hogwild_loop(free, problem, rows, problem.lr, threading.Lock())
    assert len(taken) == len(problem)
    np.testing.assert_array_equal(theta, free)
