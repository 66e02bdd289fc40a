"""Lesson 01's checks accept the solutions and reject the stub and plausible mistakes."""
import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import CheckFailed


def stub(*args, **kwargs):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------ task 1: batch gradient

def gradient(theta, X, y):
    return X.T @ (X @ theta - y) / len(y)


def test_gradient_solution_passes(capsys):
    check.gd_batch_gradient(gradient)
    assert "✔ gd_batch_gradient: passed" in capsys.readouterr().out


def test_gradient_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.gd_batch_gradient(stub)


@pytest.mark.parametrize("wrong, hint", [
    (lambda th, X, y: X.T @ (X @ th - y), "you summed over the batch: divide by the batch size"),
    (lambda th, X, y: (X * (X @ th - y)[:, None]).mean(axis=1), r"averaged over the features \(axis=1\)"),
    (lambda th, X, y: X.T @ (X @ th - y) / X.shape[1], "divided by the number of features d"),
    (lambda th, X, y: 2 * X.T @ (X @ th - y) / len(y), "the ½ in J cancels the 2"),
    (lambda th, X, y: X.T @ (y - X @ th) / len(y), "the sign is flipped"),
    (lambda th, X, y: float(np.mean(X @ th - y)), "a single number"),
    (lambda th, X, y: X.T @ (X @ th) / len(y), "element 0 is"),
])
def test_gradient_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.gd_batch_gradient(wrong)


# ------------------------------------------------------------ task 2: mini-batch epoch

def epoch(theta, X, y, grad, lr, batch_size, rng):
    order = rng.permutation(len(y))
    for i in range(0, len(y), batch_size):
        batch = order[i:i + batch_size]
        theta = theta - lr * grad(theta, X[batch], y[batch])
    return theta


def epoch_in_place(theta, X, y, grad, lr, batch_size, rng):       # the seed's `+=` form
    order = rng.permutation(len(y))
    for i in range(0, len(y), batch_size):
        batch = order[i:i + batch_size]
        theta -= lr * grad(theta, X[batch], y[batch])
    return theta


def no_shuffle(theta, X, y, grad, lr, batch_size, rng):
    for i in range(0, len(y), batch_size):
        theta = theta - lr * grad(theta, X[i:i + batch_size], y[i:i + batch_size])
    return theta


def fixed_seed(theta, X, y, grad, lr, batch_size, rng):
    return epoch(theta, X, y, grad, lr, batch_size, np.random.default_rng(0))


def shuffled_separately(theta, X, y, grad, lr, batch_size, rng):
    X, y = X[rng.permutation(len(y))], y[rng.permutation(len(y))]
    return no_shuffle(theta, X, y, grad, lr, batch_size, rng)


def with_replacement(theta, X, y, grad, lr, batch_size, rng):
    for _ in range(-(-len(y) // batch_size)):
        batch = rng.integers(0, len(y), batch_size)
        theta = theta - lr * grad(theta, X[batch], y[batch])
    return theta


def drops_last(theta, X, y, grad, lr, batch_size, rng):
    order = rng.permutation(len(y))
    for i in range(len(y) // batch_size):
        batch = order[i * batch_size:(i + 1) * batch_size]
        theta = theta - lr * grad(theta, X[batch], y[batch])
    return theta


def stale_theta(theta, X, y, grad, lr, batch_size, rng):
    order, new = rng.permutation(len(y)), theta
    for i in range(0, len(y), batch_size):
        batch = order[i:i + batch_size]
        new = new - lr * grad(theta, X[batch], y[batch])
    return new


def uphill(theta, X, y, grad, lr, batch_size, rng):
    order = rng.permutation(len(y))
    for i in range(0, len(y), batch_size):
        batch = order[i:i + batch_size]
        theta = theta + lr * grad(theta, X[batch], y[batch])
    return theta


def forgets_to_return(theta, X, y, grad, lr, batch_size, rng):
    epoch(theta, X, y, grad, lr, batch_size, rng)


def wrong_argument_order(theta, X, y, grad, lr, batch_size, rng):
    order = rng.permutation(len(y))
    return theta - lr * grad(X[order], y[order], theta)


@pytest.mark.parametrize("solution", [epoch, epoch_in_place])
def test_epoch_solution_passes(solution, capsys):
    check.gd_minibatch_epoch(solution)
    assert "✔ gd_minibatch_epoch: passed" in capsys.readouterr().out


def test_epoch_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.gd_minibatch_epoch(stub)


@pytest.mark.parametrize("wrong, hint", [
    (no_shuffle, "visited in their stored order"),
    (fixed_seed, "same order"),
    (shuffled_separately, "X and y were shuffled separately"),
    (with_replacement, r"used \d times in one epoch.*from ONE permutation"),
    (drops_last, "the last, smaller batch was dropped"),
    (stale_theta, "every gradient was taken at the starting θ"),
    (uphill, "moved uphill"),
    (forgets_to_return, "returned None"),
    (wrong_argument_order, r"call it as grad\(theta, X_batch, y_batch\)"),
])
def test_epoch_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.gd_minibatch_epoch(wrong)


# ------------------------------------------------------------ task 3: Adagrad step

def adagrad(theta, g, G, lr, eps):
    G = G + g ** 2
    return theta - lr * g / (np.sqrt(G) + eps), G


def adagrad_eps_inside(theta, g, G, lr, eps):
    G = G + g ** 2
    return theta - lr * g / np.sqrt(G + eps), G


@pytest.mark.parametrize("solution", [adagrad, adagrad_eps_inside])
def test_adagrad_solution_passes(solution, capsys):
    check.gd_adagrad_step(solution)
    assert "✔ gd_adagrad_step: passed" in capsys.readouterr().out


def test_adagrad_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.gd_adagrad_step(stub)


@pytest.mark.parametrize("wrong, hint", [
    (lambda th, g, G, lr, eps: (th - lr * g / (G + g ** 2 + eps), G + g ** 2), "without the square root"),
    (lambda th, g, G, lr, eps: (th - lr * g / np.sqrt(G + g ** 2), G + g ** 2), "add eps to the denominator"),
    (lambda th, g, G, lr, eps: (th - lr * g / (np.sqrt(G) + eps), G + g ** 2), "OLD G"),
    (lambda th, g, G, lr, eps: (th - lr * g / (np.abs(g) + eps), g ** 2), "G must accumulate"),
    (lambda th, g, G, lr, eps: (th - lr * g / (np.sqrt(G + g) + eps), G + g), "SQUARED gradient"),
    (lambda th, g, G, lr, eps: (th - lr * g, G + g ** 2), "one global rate"),
    (lambda th, g, G, lr, eps: (th + lr * g / (np.sqrt(G + g ** 2) + eps), G + g ** 2), "uphill"),
    (lambda th, g, G, lr, eps: th - lr * g / (np.sqrt(G + g ** 2) + eps), "return a pair"),
    (lambda th, g, G, lr, eps: (th, G), "that is the old G"),
])
def test_adagrad_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.gd_adagrad_step(wrong)


# ------------------------------------------------------------ task 4: learning rate

def one_over_L(X):
    return 1.0 / np.linalg.eigvalsh(X.T @ X / len(X)).max()


def test_learning_rate_solution_passes(capsys):
    check.gd_learning_rate(one_over_L)
    assert "✔ gd_learning_rate: passed" in capsys.readouterr().out


def test_learning_rate_stub_is_not_implemented_yet():
    with pytest.raises(CheckFailed, match="stub is not implemented yet"):
        check.gd_learning_rate(stub)


@pytest.mark.parametrize("wrong, hint", [
    (lambda X: 0.1, "γ = 0.1 diverges for features ×10.* the same γ for every X"),
    (lambda X: 0.01, "too slow.* the same γ for every X"),
    (lambda X: one_over_L(X) if X.std() > 0.5 else 1.0,
     "has not converged within 50 steps for features ×0.1.*too slow. Try γ = 1/L"),
    (lambda X: 2 * one_over_L(X), "diverges|close to 2/L"),
    (lambda X: 0.3 * one_over_L(X), "far below 1/L: too slow"),
    (lambda X: -one_over_L(X), "must be > 0"),
    (lambda X: "fast", "return a number"),
])
def test_learning_rate_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.gd_learning_rate(wrong)
