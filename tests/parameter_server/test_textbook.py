"""The replica loops lesson 07 prints train exactly the model the instrumented ones do."""
import numpy as np
import pytest

from ddl_lab.parameter_server import downpour as D

LOOPS = """
from ddl_lab.parameter_server import textbook

def textbook_downpour(client, problem, setup, rid, tl):
    textbook.downpour_replica(client, problem, setup, rid)

def textbook_easgd(client, problem, setup, rid, tl):
    textbook.easgd_replica(client, problem, setup, rid)
"""


@pytest.fixture(scope="module")
def problem():
    return D.digits_problem(example_cost=0.0)


@pytest.mark.parametrize("changes", [
    dict(rule="sgd", lr=0.3, n_fetch=1, n_push=1, steps=25),
    dict(rule="adagrad", lr=0.1, n_fetch=3, n_push=2, steps=23, batch=7),
    dict(algorithm="easgd", lr=0.2, tau=3, steps=20)])
def test_one_replica_ends_with_the_same_model(problem, cell, changes):
    loops = cell(LOOPS)
    mine = loops["textbook_easgd" if changes.get("algorithm") == "easgd" else "textbook_downpour"]
    setup = D.Setup(replicas=1, shards=2, timeout=15.0, **changes)
    engine = D.run(problem, setup)
    book = D.run(problem, setup, replica=mine)
    assert engine.updates == book.updates > 0
    np.testing.assert_array_equal(book.theta, engine.theta)

