"""Parallel gradient descent over shards equals single-process batch GD (lesson 04)."""
import matplotlib
import numpy as np
import pytest

from ddl_lab.ml.data import linear_regression
from ddl_lab.message_passing.comm import comm_run
from ddl_lab.ml.models import linreg_grad
from ddl_lab.ml.optim import batch_gd
from ddl_lab.message_passing.parallel_gd import batch_gd_losses, run_parallel_gd, split_sizes
from ddl_lab.message_passing.plots import figure_parallel_gd

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def data():
    ds = linear_regression(m=600, d=8, seed=1)
    return ds.X.astype(np.float64), ds.y.astype(np.float64)


def test_parallel_gd_equals_batch_gd_step_for_step(data):
    X, y = data
    results = run_parallel_gd(X, y, 3, steps=40, lr=0.2, sizes=[100, 350, 150])
    theta, losses = batch_gd_losses(X, y, 40, 0.2)
    lesson01 = batch_gd(np.zeros(X.shape[1]), X, y, linreg_grad, 0.2, epochs=40)
    for r in results:                                   # every rank holds the same model
        np.testing.assert_allclose(r.theta, theta, rtol=0, atol=1e-12)
        np.testing.assert_allclose(r.losses, losses, rtol=1e-12)
        assert r.compute_s > 0 and r.comm_s > 0
    np.testing.assert_allclose(theta, lesson01, rtol=0, atol=1e-12)
    assert losses[-1] < 0.01 * losses[0]
    assert len(figure_parallel_gd(results, losses).axes) == 2


def gradient_on_shards(comm, theta, shards, parallel_gradient):
    X, y = shards[comm.rank]
    return parallel_gradient(comm, theta, X, y, sum(len(s[1]) for s in shards))


def test_exercise_04s_parallel_gradient_is_the_full_gradient_on_every_rank(data, solution):
    X, y = data
    theta = np.linspace(-1, 1, X.shape[1])
    shards = [(X[:50], y[:50]), (X[50:400], y[50:400]), (X[400:], y[400:])]
    mine = solution("04_message_passing", "my_parallel_gradient")
    for g in comm_run(gradient_on_shards, 3, theta, shards, mine):
        np.testing.assert_allclose(g, linreg_grad(theta, X, y), rtol=1e-12, atol=1e-12)


def test_bad_shards_and_rates_are_refused(data):
    X, y = data
    with pytest.raises(ValueError, match="must be 3 positive shard sizes that add up to m = 600"):
        run_parallel_gd(X, y, 3, sizes=[100, 100, 100])
    with pytest.raises(ValueError, match="need lr > 0"):
        run_parallel_gd(X, y, 3, lr=0)
    with pytest.raises(ValueError, match="cannot split 2 examples over 3 workers"):
        split_sizes(2, 3)
    assert split_sizes(10, 3) == [4, 3, 3]
