"""Lesson 01's experiments and pictures (ddl_lab.gradient_descent.experiments, .plots)."""
import matplotlib.pyplot as plt
import numpy as np
import pytest

from ddl_lab.gradient_descent import experiments as gradient_descent
from ddl_lab.gradient_descent import plots
from ddl_lab.ml import data, models, optim


def test_record_run_logs_every_update_and_observes_plateaus():
    ds = data.linear_regression(100, 3)
    sched = optim.ReduceOnPlateau(0.1, factor=0.5, threshold=10.0)     # never "improves"
    _, h = gradient_descent.record_run(ds.X, ds.y, models.linreg_grad, models.linreg_loss,
                            optim.GD(sched), epochs=3, batch_size=32)
    assert len(h) == 3 * 4 and h.epoch_end == [4, 8, 12]
    assert h.loss0 == pytest.approx(models.linreg_loss(np.zeros(3), ds.X, ds.y))
    np.testing.assert_allclose(h.epochs()[[3, 7, 11]], [1, 2, 3])
    assert sched(0) == pytest.approx(0.1 / 2 ** 2)       # epochs 2 and 3 did not improve


def test_spread_sets_the_condition_number():
    for spread in (1.0, 3.0):
        X = data.linear_regression(5000, 8, spread=spread).X
        eig = np.linalg.eigvalsh(X.T @ X / len(X))
        assert eig[-1] / eig[0] == pytest.approx(spread ** 2, rel=0.25)


def test_full_gradient_cost_grows_with_m_and_one_example_does_not():
    cost = gradient_descent.gradient_cost([1_000, 300_000], d=10)
    assert cost["full"][1] > 5 * cost["full"][0]
    assert cost["one"][1] < 5 * cost["one"][0]


def test_batch_size_sweep_finds_that_few_full_steps_do_not_reach_the_target():
    ds = data.linear_regression(512, 5, noise=0.5, spread=3)
    j_star = models.linreg_loss(np.linalg.lstsq(ds.X, ds.y, rcond=None)[0], ds.X, ds.y)
    sweep = gradient_descent.batch_size_sweep(ds.X, ds.y, [16, 512], [0.1, 1.0], j_star, target=1e-2,
                                   epochs=2)
    assert np.isfinite(sweep["to_target_s"][0]) and np.isinf(sweep["to_target_s"][1])
    assert sweep["epoch_s"][0] > sweep["epoch_s"][1] > 0


def test_adagrad_beats_one_global_rate_on_sparse_features():
    full = data.sparse_logistic(m=6000, d=500, nnz=10, seed=0)
    train, test = full.subset(np.arange(3000)), full.subset(np.arange(3000, 6000))
    res = gradient_descent.adagrad_vs_sgd(train, test, lrs=[0.3, 1.0, 3.0], epochs=2)
    assert res["Adagrad"]["test_loss"][-1] < res["SGD"]["test_loss"][-1]
    counts = train.feature_counts()
    step = res["Adagrad"]["lr"] / np.sqrt(res["Adagrad"]["G"][counts > 0])
    assert step[counts[counts > 0] < 10].mean() > 5 * step[counts[counts > 0] > 500].mean()


def test_lr_regimes_and_paths():
    assert gradient_descent.lr_regime(0.01, 1.0).startswith("converges painfully slowly")
    assert gradient_descent.lr_regime(1.0, 1.0).startswith("converges well")
    assert gradient_descent.lr_regime(1.5, 1.0).startswith("overshoots")
    assert gradient_descent.lr_regime(2.0, 1.0).startswith("diverges")
    ds = data.wave()
    path = gradient_descent.gd_path(np.array([2.5, 0.5]), ds.X, ds.y, models.wave_grad, 0.1, 50)
    assert path.shape == (51, 2) and np.allclose(path[0], [2.5, 0.5])


def test_pictures_draw(tmp_path):
    ds = data.linear_regression(200, 2, spread=3)
    fig = plots.figure_learning_rate(ds.X, ds.y, np.zeros(2), 0.5, (-3, 3, -3, 3), steps=5)
    assert len(fig.axes[1].lines) == 4
    fig.savefig(tmp_path / "lr.png")
    plt.close("all")
    _, ax = plt.subplots()
    cost = {"m": np.array([10, 100]), "full": np.array([1e-6, 1e-5]), "one": np.array([1e-6, 1e-6])}
    assert len(plots.plot_gradient_cost(cost, ax).lines) == 3
    w = data.wave()
    assert plots.plot_wave_fits(w, {"truth": w.theta}, ax).lines[-1].get_label().startswith("truth")
    plt.close("all")


def test_sweep_and_adagrad_pictures_draw_what_was_measured():
    ds = data.linear_regression(256, 4, seed=3)
    j_star = models.linreg_loss(np.linalg.lstsq(ds.X, ds.y, rcond=None)[0], ds.X, ds.y)
    sweep = gradient_descent.batch_size_sweep(ds.X, ds.y, [1, 16, 256], [0.1], j_star, 1.0, 1)
    ax = plots.plot_batch_sizes(sweep, selected=16)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), sweep["epoch_s"] * 1e3)
    sparse = data.sparse_logistic(m=400, d=50, nnz=3, seed=0)
    train, test = sparse.subset(np.arange(200)), sparse.subset(np.arange(200, 400))
    res = gradient_descent.adagrad_vs_sgd(train, test, lrs=[0.3], epochs=1)
    fig = plots.figure_adagrad(res, train.feature_counts(), sparse.theta)
    assert len(fig.axes) == 3 and [t.get_text() for t in fig.axes[0].get_legend().texts] == [
        "SGD (γ=0.3)", "Adagrad (γ=0.3)"]
    plt.close("all")
