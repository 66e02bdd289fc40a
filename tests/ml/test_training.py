"""The training loop records one loss and one time per step, and learns."""
import numpy as np
import pytest
import torch

from ddl_lab.ml import data, models, optim, training


def test_train_records_every_step_and_learns_digits():
    torch.manual_seed(0)
    train, test = data.digits()
    model = models.LogisticRegression(64, classes=10)
    before = training.evaluate_accuracy(model, test)
    hist = training.train(model, train, "ce", lr=0.5, epochs=3, batch_size=64, seed=0)
    steps_per_epoch = -(-len(train) // 64)
    assert len(hist) == len(hist.time) == 3 * steps_per_epoch
    assert hist.epoch_end == [steps_per_epoch * k for k in (1, 2, 3)]
    assert np.all(np.diff(hist.time) >= 0) and hist.wall_time > 0
    assert hist.step_times().shape == (len(hist),)
    assert np.mean(hist.loss[-10:]) < 0.5 * hist.loss[0]
    assert training.evaluate_accuracy(model, test) > max(0.85, before)


def test_train_is_deterministic_under_the_seed():
    ds = data.linear_regression(300, 5)
    runs = []
    for _ in range(2):
        torch.manual_seed(1)
        model = models.LinearRegression(5)
        runs.append(training.train(model, ds, "mse", lr=0.1, epochs=2, seed=7).loss)
    assert runs[0] == runs[1]


def test_binary_accuracy_and_a_teaching_optimiser():
    ds = data.sparse_logistic(m=1000, d=100, nnz=5)
    model = models.LogisticRegression(100)
    opt = optim.TorchOptimizer(model.parameters(), optim.Adagrad(0.3))
    training.train(model, ds, "bce", optimizer=opt, epochs=5, batch_size=32)
    assert training.evaluate_accuracy(model, ds) > 0.8


def test_history_logs_numpy_runs():
    ds = data.linear_regression(100, 3)
    hist = training.History()
    optim.batch_gd(np.zeros(3), ds.X, ds.y, models.linreg_grad, 0.5, 4,
                   record=lambda th: hist.log(models.linreg_loss(th, ds.X, ds.y)))
    assert len(hist) == 4 and hist.loss == sorted(hist.loss, reverse=True)


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown loss"):
        training.train(models.LinearRegression(3), data.linear_regression(10, 3), "l1")
    with pytest.raises(ValueError, match="epochs and batch_size"):
        training.train(models.LinearRegression(3), data.linear_regression(10, 3), "mse", epochs=0)
