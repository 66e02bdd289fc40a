"""Lesson 01's checks: right answers in several styles pass (vectorised and looped, numpy
and torch, float32 and float64); the stub, hard-coded hyper-parameters, mutated inputs, the
slips of the best-step reasoning (1/L, the ends of an unsorted list, ρ²) and SGD plans that
take too few steps, too small a rate or too much noise fail with a message naming the fault."""
import numpy as np
import pytest
import torch

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.ml import models, optim
from tests.learner_types import STYLES, in_learner_types

NB = "01_gradient_descent"


def stub(*args, **kwargs):
    raise NotImplementedError("replace this line with your code")


# ------------------------------------------------------------ task 1: batch gradient

def gradient_loop(theta, X, y):
    g = np.zeros_like(theta)
    for xi, yi in zip(X, y):
        g += (xi @ theta - yi) * xi
    return g / len(y)


def gradient_torch(theta, X, y):
    X, y, theta = (torch.from_numpy(a) for a in (X, y, theta))
    return torch.einsum("nd,n->d", X, X @ theta - y) / len(y)


def gradient_float64(theta, X, y):
    X, y, theta = X.astype(np.float64), y.astype(np.float64), theta.astype(np.float64)
    return X.T @ (X @ theta - y) / len(y)


def gradient_mutates_y(theta, X, y):
    y -= X @ theta
    return -X.T @ y / len(y)


@pytest.mark.parametrize("right", [gradient_loop, gradient_torch, gradient_float64])
def test_gradient_right_answers_pass(right, solution, capsys):
    check.batch_gradient(right)
    assert capsys.readouterr().out.count("✔ batch_gradient: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (lambda th, X, y: X.T @ (X @ th - y), "you summed over the batch: divide by the batch size"),
    (lambda th, X, y: (X * (X @ th - y)[:, None]).mean(axis=1), r"averaged over the features \(axis=1\)"),
    (lambda th, X, y: X.T @ (X @ th - y) / X.shape[1], "divided by the number of features d"),
    (lambda th, X, y: 2 * X.T @ (X @ th - y) / len(y), "the ½ in J cancels the 2"),
    (lambda th, X, y: X.T @ (y - X @ th) / len(y), "the sign is flipped"),
    (lambda th, X, y: float(np.mean(X @ th - y)), "a single number"),
    (lambda th, X, y: X.T @ (X @ th) / len(y), "the targets y are missing"),
    (lambda th, X, y: X.T @ (X @ th - y) / 7, r"your gradient is [\d.]+ × the right one"),
    (lambda th, X, y: None, "returned None: the function has no `return`"),
    (gradient_mutates_y, "changed its argument `y` in place"),
    (models.linreg_grad, "the package's own implementation"),
])
def test_gradient_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.batch_gradient(wrong)


def test_gradient_hard_coded_n_passes_one_case_and_fails_the_next_replayably():
    with pytest.raises(CheckFailed, match=r"case 1 \(n=1, d=4.*check.batch_gradient\(…, seed=3\)"):
        check.batch_gradient(lambda th, X, y: X.T @ (X @ th - y) / 7, seed=3)    # n = 7 in case 0


# ------------------------------------------------------------ task 2: mini-batch epoch

def epoch(theta, X, y, grad, lr, batch_size, rng):
    order = rng.permutation(len(y))
    for i in range(0, len(y), batch_size):
        batch = order[i:i + batch_size]
        theta = theta - lr * grad(theta, X[batch], y[batch])
    return theta


def epoch_in_place(theta, X, y, grad, lr, batch_size, rng):       # the lecture's `+=` form
    idx = np.arange(len(y))
    rng.shuffle(idx)
    starts = list(range(0, len(y), batch_size))
    for lo in starts:
        hi = min(lo + batch_size, len(y))
        theta -= lr * grad(theta, X[idx[lo:hi]], y[idx[lo:hi]])
    return theta


def no_shuffle(theta, X, y, grad, lr, batch_size, rng):
    for i in range(0, len(y), batch_size):
        theta = theta - lr * grad(theta, X[i:i + batch_size], y[i:i + batch_size])
    return theta


def fixed_seed(theta, X, y, grad, lr, batch_size, rng):
    return epoch(theta, X, y, grad, lr, batch_size, np.random.default_rng(0))


def global_random(theta, X, y, grad, lr, batch_size, rng):
    order = np.random.permutation(len(y))
    for i in range(0, len(y), batch_size):
        theta = theta - lr * grad(theta, X[order[i:i + batch_size]], y[order[i:i + batch_size]])
    return theta


def shuffled_separately(theta, X, y, grad, lr, batch_size, rng):
    X, y = X[rng.permutation(len(y))], y[rng.permutation(len(y))]
    return no_shuffle(theta, X, y, grad, lr, batch_size, rng)


def shuffles_the_data_in_place(theta, X, y, grad, lr, batch_size, rng):
    order = rng.permutation(len(y))
    X[:], y[:] = X[order], y[order]
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


def ignores_lr(theta, X, y, grad, lr, batch_size, rng):
    return epoch(theta, X, y, grad, 0.01, batch_size, rng)


def forgets_to_return(theta, X, y, grad, lr, batch_size, rng):
    epoch(theta, X, y, grad, lr, batch_size, rng)


def wrong_argument_order(theta, X, y, grad, lr, batch_size, rng):
    order = rng.permutation(len(y))
    return theta - lr * grad(X[order], y[order], theta)


@pytest.mark.parametrize("right", [epoch, epoch_in_place])
def test_epoch_right_answers_pass(right, solution, capsys):
    check.minibatch_sgd_epoch(right)
    assert capsys.readouterr().out.count("✔ minibatch_sgd_epoch: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (no_shuffle, "visited in their stored order"),
    (fixed_seed, "generators in different states gave the same order"),
    (global_random, "shuffle with the rng you are given, not np.random"),
    (shuffled_separately, "X and y were shuffled separately"),
    (shuffles_the_data_in_place, "changed its argument `X` in place"),
    (with_replacement, r"used \d times in one epoch.*from ONE permutation"),
    (drops_last, "the last, smaller batch was dropped"),
    (stale_theta, "every gradient was taken at the starting θ"),
    (uphill, "moved uphill"),
    (ignores_lr, r"the step was [\d.]+ × lr·g: use the lr you are given"),
    (forgets_to_return, "returned None"),
    (wrong_argument_order, r"call it as grad\(theta, X_batch, y_batch\)"),
    (optim.minibatch_sgd_epoch, "the package's own implementation"),
])
def test_epoch_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.minibatch_sgd_epoch(wrong)


# ------------------------------------------------------------ task 1: Adagrad step

def adagrad_eps_inside(theta, g, G, lr, eps):
    G = G + g ** 2
    return theta - lr * g / np.sqrt(G + eps), G


def adagrad_torch_list(theta, g, G, lr, eps):
    t, g, G = (torch.from_numpy(a) for a in (theta, g, G))
    G = G + g * g
    return [t - lr * g / (G.sqrt() + eps), G]


def adagrad_copies_then_in_place(theta, g, G, lr, eps):
    theta, G = theta.copy(), G.copy()
    G += g * g
    theta -= lr * g / (np.sqrt(G) + eps)
    return theta, G


def adagrad_mutates_G(theta, g, G, lr, eps):
    G += g * g
    return theta - lr * g / (np.sqrt(G) + eps), G


@pytest.mark.parametrize("right", [adagrad_eps_inside, adagrad_torch_list,
                                   adagrad_copies_then_in_place])
def test_adagrad_right_answers_pass(right, solution, capsys):
    check.adagrad_step(right)
    assert capsys.readouterr().out.count("✔ adagrad_step: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (lambda th, g, G, lr, eps: (th - lr * g / (G + g ** 2 + eps), G + g ** 2), "take the square root"),
    (lambda th, g, G, lr, eps: (th - lr * g / np.sqrt(G + g ** 2), G + g ** 2), "add eps to the denominator"),
    (lambda th, g, G, lr, eps: (th - lr * g / (np.sqrt(G) + eps), G + g ** 2), "OLD G"),
    (lambda th, g, G, lr, eps: (th - lr * g / (np.abs(g) + eps), g ** 2), "not just this one's g²"),
    (lambda th, g, G, lr, eps: (th - lr * g / (np.sqrt(G + g) + eps), G + g), "SQUARED gradient"),
    (lambda th, g, G, lr, eps: (th - lr * g, G + g ** 2), "plain SGD with one global rate"),
    (lambda th, g, G, lr, eps: (th + lr * g / (np.sqrt(G + g ** 2) + eps), G + g ** 2), "uphill"),
    (lambda th, g, G, lr, eps: th - lr * g / (np.sqrt(G + g ** 2) + eps), "return a pair"),
    (lambda th, g, G, lr, eps: None, "returned None"),
    (lambda th, g, G, lr, eps: (th, G), "that is the old G"),
    (lambda th, g, G, lr, eps: (th - lr * g / (np.sqrt(G + g ** 2) + 1e-8), G + g ** 2),
     "another eps than the one passed in"),
    (lambda th, g, G, lr, eps: (th - 0.1 * g / (np.sqrt(G + g ** 2) + eps), G + g ** 2),
     r"its step is [\d.]+ × lr·g/\(√G' \+ eps\): use the lr passed in"),
    (adagrad_mutates_G, "changed its argument `G` in place"),
    (lambda th, g, G, lr, eps: optim.Adagrad(lr, eps).step(th, g), "package's own implementation"),
])
def test_adagrad_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.adagrad_step(wrong)


# ------------------------------------------------------------ task 3: learning rate

def one_over_L(X):
    return 1.0 / np.linalg.eigvalsh(X.T @ X / len(X)).max()


def by_power_iteration(X):
    v = np.ones(X.shape[1])
    for _ in range(100):
        v = X.T @ (X @ v) / len(X)
        v /= np.linalg.norm(v)
    return 1.0 / float(v @ (X.T @ (X @ v)) / len(X))


def by_spectral_norm(X):
    return len(X) / np.linalg.norm(X, 2) ** 2


def standardises_in_place(X):
    X /= X.std(axis=0)
    return 1.0


def one_over_trace(X):
    """Always stable (trace ≥ L), but about d times too small on a well-conditioned X."""
    return len(X) / np.trace(X.T @ X)


@pytest.mark.parametrize("right", [one_over_L, by_power_iteration, by_spectral_norm])
def test_learning_rate_right_answers_pass(right, solution, capsys):
    check.learning_rate(right)
    assert capsys.readouterr().out.count("✔ learning_rate: passed") == 1


@pytest.mark.parametrize("wrong, hint", [
    (lambda X: 0.1, r"γ = 0.1 diverges.*the same γ for every X"),
    (lambda X: 0.01, "the same γ for every X"),
    (lambda X: one_over_L(X) if X.std() > 0.5 else 1.0,
     r"has not converged within 50 steps.*too slow. Which curvature limits the step.*"
     r"\[case 2 \(scale=0.1"),
    (lambda X: 2 * one_over_L(X), "diverges|close to 2/L"),
    (lambda X: 0.3 * one_over_L(X), "far below 1/L: too slow"),
    (one_over_trace, r"that is 1/trace\(XᵀX/m\) = 1/Σλ: always stable, but the trace adds up "
                     r"all 12 curvatures.*about 12 times smaller than 1/L"),
    (lambda X: -one_over_L(X), "must be > 0"),
    (lambda X: "fast", "return a number"),
    (lambda X: None, "returned None"),
    (standardises_in_place, "changed its argument `X` in place"),
    (lambda X: 1 / optim.lipschitz(X), "package's own implementation"),
])
def test_learning_rate_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.learning_rate(wrong)


# ------------------------------------------------------------ task 4: the best fixed step

def best_step_sorted(curvatures):
    lams = np.sort(np.asarray(curvatures))
    gamma = 2 / (lams[0] + lams[-1])
    return gamma, abs(1 - gamma * lams[0])


def best_step_by_kappa(curvatures):
    kappa = max(curvatures) / min(curvatures)
    return (2 / (max(curvatures) + min(curvatures)), float((kappa - 1) / (kappa + 1)))


def best_step_torch(curvatures):
    lams = torch.as_tensor(curvatures)
    mu, L = lams.min(), lams.max()
    return [2 / (L + mu), (L - mu) / (L + mu)]            # 0-d tensors in a list


def best_step_in_float32(curvatures):
    lams = np.asarray(curvatures, dtype=np.float32)
    mu, L = lams.min(), lams.max()
    return np.float32(2) / (L + mu), (L - mu) / (L + mu)


@pytest.mark.parametrize("right", [best_step_sorted, best_step_by_kappa, best_step_torch,
                                   best_step_in_float32])
def test_best_step_right_answers_pass(right, solution, capsys):
    check.best_step(right)
    assert capsys.readouterr().out.count("✔ best_step: passed") == 1


def right_step(c):
    return 2 / (max(c) + min(c)), (max(c) - min(c)) / (max(c) + min(c))


@pytest.mark.parametrize("wrong, hint", [
    (stub, "stub is not implemented yet"),
    (lambda c: (1 / max(c), 1 - min(c) / max(c)), "1/L empties the steepest direction"),
    (lambda c: (2 / max(c), 1.0), "2/L is the edge of divergence"),
    (lambda c: (2 / (c[0] + c[-1]), abs(c[-1] - c[0]) / (c[0] + c[-1])),
     "you took the first and the last curvature"),
    (lambda c: (1 / (max(c) + min(c)), 0.5), "the 2 is missing"),
    (lambda c: (right_step(c)[0], right_step(c)[1] ** 2), "that is ρ², the factor for J − J"),
    (lambda c: (right_step(c)[0], 1 - min(c) / max(c)),
     "1 − μ/L = 1 − 1/κ is the rate at γ = 1/L"),
    (lambda c: right_step(c)[0], r"must return a tuple \(gamma, rate\)"),
    (lambda c: None, "returned None"),
])
def test_best_step_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.best_step(wrong)


# ------------------------------------------------------------ task 5: a mini-batch SGD plan

def plan(batch_size, lr):
    return lambda max_examples, max_steps: {"batch_size": batch_size, "lr": lr}


def test_sgd_plan_solution_passes_on_drawn_budgets(solution, capsys):
    right = solution(NB, "my_sgd_plan")
    for seed in range(3):
        check.sgd_plan(right, seed=seed)
    out = capsys.readouterr().out
    assert out.count("✔ sgd_plan: passed — the lesson's mini-batch SGD") == 3


LOOKED_UP = {(8192, 256): {"batch_size": 64, "lr": 0.5}, (16384, 64): {"batch_size": 256, "lr": 1.0}}


@pytest.mark.parametrize("wrong, hint", [
    (stub, "stub is not implemented yet"),
    (plan(1024, 1.73), "batches of 1024 at γ = 1.73: 8 steps.*only 8 steps: even exact gradients"),
    (plan(1, 0.05), "hit the step limit after 256 of the 8,192 examples"),
    (plan(32, 1.7), "noise: exact gradients at this γ would reach ≈ 0"),
    (plan(64, 0.05), r"too slow: .*\|1 − γμ\| = 0.995 per step"),
    (plan(64, 3.0), "it diverged: exact gradients need γ < 2/L = 1.91"),
    (plan(2048, 0.5), "a whole number of examples from 1 to m = 1,024"),
    (lambda e, s: (64, 0.5), "return a dict"),
    # issue 26: plans that ignore their inputs — each passed the prompt's two budgets
    (plan(128, 0.5), r"max_steps = 20.*the same plan, \(128, 0.5\), for all 6 budgets.*a plan "
                     "must be a function of its inputs"),
    (plan(256, 0.8), r"the same plan, \(256, 0.8\), for all 6 budgets"),
    (lambda e, s: LOOKED_UP[(e, s)], r"raised KeyError: \(20480, 20\) for max_examples = "
                                     "20,480, max_steps = 20 — budgets the prompt never showed"),
    (lambda e, s: LOOKED_UP.get((e, s)), "returned None for max_examples = 20,480"),
])
def test_sgd_plan_wrong_answers_are_explained(wrong, hint):
    with pytest.raises(CheckFailed, match=hint):
        check.sgd_plan(wrong)


# ------------------------------------------------------------ one rule for numbers (issue 26)

@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("task, name", [
    ("batch_gradient", "my_batch_gradient"), ("minibatch_sgd_epoch", "my_minibatch_sgd_epoch"),
    ("adagrad_step", "my_adagrad_step"), ("learning_rate", "my_learning_rate"),
    ("best_step", "my_best_step"), ("sgd_plan", "my_sgd_plan")])
def test_solutions_pass_in_the_learner_s_number_types(task, name, style, solution, capsys):
    getattr(check, task)(in_learner_types(solution(NB, name), style))
    assert f"✔ {task}: passed" in capsys.readouterr().out
