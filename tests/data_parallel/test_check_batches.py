"""check.noise_scale passes right answers written in several styles and names the mistakes
learners make (lesson 05, large batches), on real per-example gradients of the digits MLP."""
import numpy as np
import pytest
import torch

from ddl_lab import check
from ddl_lab.check import CheckFailed
from ddl_lab.data_parallel.batches import digits_noise, per_example_grads
from ddl_lab.data_parallel.workloads import build


def stub(grads, factor):
    raise NotImplementedError("replace this line with your code")


def _b_max(b, f):
    return b * (2 - f) / (2 * (f - 1))


def noise_numpy(grads, factor):
    """Another right style: numpy, the covariance's trace from centred rows, a numpy array."""
    g = grads.numpy().astype(np.float64)
    n = len(g)
    centred = g - g.mean(0)
    trace = (centred ** 2).sum() / (n - 1)
    g2 = g.mean(0) @ g.mean(0) - trace / n
    b = trace / g2
    return np.array([b, _b_max(b, factor)])


def noise_float32(grads, factor):
    """Another right style: stays in the gradients' dtype, returns tensors in a list."""
    n = grads.shape[0]
    trace = grads.var(dim=0, correction=1).sum()
    g2 = (grads.mean(0) ** 2).sum() - trace / n
    b = trace / g2
    x = (factor - 1) / (1 - factor / 2)              # S(B)/S(2B) >= f  <=>  B_simple/B >= x
    return [b, b / x]


def _parts(grads):
    g = grads.double()
    return g, len(g), float(g.var(0).sum()), float(g.mean(0).pow(2).sum())


def biased(grads, f):
    g, n, tr, m2 = _parts(grads)
    return tr / m2, _b_max(tr / m2, f)


def population(grads, f):
    g, n, _, m2 = _parts(grads)
    tr = float(g.var(0, unbiased=False).sum())
    b = tr / (m2 - tr / n)
    return b, _b_max(b, f)


def mean_square(grads, f):
    g, n, tr, m2 = _parts(grads)
    b = float(g.pow(2).sum(1).mean()) / (m2 - tr / n)
    return b, _b_max(b, f)


def not_squared(grads, f):
    g, n, tr, m2 = _parts(grads)
    b = tr / (m2 - tr / n) ** 0.5
    return b, _b_max(b, f)


def of_the_mean(grads, f):
    g, n, tr, m2 = _parts(grads)
    b = tr / n / (m2 - tr / n)
    return b, _b_max(b, f)


def critical(grads, f):
    g, n, tr, m2 = _parts(grads)
    b = tr / (m2 - tr / n)
    return b, b


def upside_down(grads, f):
    g, n, tr, m2 = _parts(grads)
    b = tr / (m2 - tr / n)
    return b, b * 2 * (f - 1) / (2 - f)


def steps_factor(grads, f):
    g, n, tr, m2 = _parts(grads)
    b = tr / (m2 - tr / n)
    return b, b / (f - 1)


def test_right_answers_pass(solution, capsys):
    check.noise_scale(noise_numpy, seed=1)
    check.noise_scale(noise_float32, seed=2)
    assert capsys.readouterr().out.count("✔ noise_scale: passed") == 2


@pytest.mark.parametrize("wrong, fault", [
    (stub, "not implemented yet"),
    (lambda g, f: None, "returned None"),
    (lambda g, f: 3.0, "return two numbers"),
    (biased, "over-estimates"),
    (population, "population variance"),
    (mean_square, "mean squared norm"),
    (not_squared, "is not squared"),
    (of_the_mean, "variance of the MEAN"),
    (critical, "critical batch B_simple itself"),
    (upside_down, "upside down"),
    (steps_factor, r"solved S\(B\) = f·S_min"),
])
def test_wrong_answers_name_the_fault(wrong, fault):
    with pytest.raises(CheckFailed, match=fault):
        check.noise_scale(wrong)


def test_per_example_gradients_are_the_gradients_of_single_examples():
    model, train, _, loss_fn = build("digits-mlp", 0)
    X, y = train.tensors()
    g = per_example_grads(model, X[:8], y[:8], loss_fn)
    model.zero_grad()
    loss_fn(model(X[:8]), y[:8]).backward()
    whole = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    assert torch.allclose(g.mean(0), whole, atol=1e-6)     # mean loss: mean of the rows
    assert g.shape == (8, whole.numel())


def test_noise_scale_is_a_batch_size_of_tens_of_examples_on_digits():
    ns = digits_noise(steps_trained=30, n=128)
    assert ns.g2 > 0 and 10 < ns.b_simple < 1000
