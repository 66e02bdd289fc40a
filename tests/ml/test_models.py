"""Models: output shapes, numpy gradients against autograd, flat parameters."""
import numpy as np
import pytest
import torch

from ddl_lab.ml import data, models


@pytest.mark.parametrize("model, shape", [
    (models.LinearRegression(64), (5,)), (models.LogisticRegression(64), (5,)),
    (models.LogisticRegression(64, classes=10), (5, 10)), (models.MLP(), (5, 10)),
    (models.SmallCNN(), (5, 10))])
def test_output_shapes(model, shape):
    x = torch.rand(5, 64)
    assert model(x).shape == shape
    assert model(x.reshape(5, 1, 8, 8)).shape == shape


@pytest.mark.parametrize("loss, grad, labels", [
    (models.linreg_loss, models.linreg_grad, "real"),
    (models.logistic_loss, models.logistic_grad, "binary")])
def test_numpy_gradients_match_autograd(loss, grad, labels):
    rng = np.random.default_rng(0)
    X, theta = rng.normal(size=(30, 4)), rng.normal(size=4)
    y = rng.normal(size=30) if labels == "real" else (rng.random(30) < 0.5).astype(float)
    t = torch.tensor(theta, requires_grad=True)
    Xt, yt = torch.tensor(X), torch.tensor(y)
    z = Xt @ t
    ref = (0.5 * ((z - yt) ** 2).mean() if labels == "real"
           else torch.nn.functional.binary_cross_entropy_with_logits(z, yt))
    ref.backward()
    assert loss(theta, X, y) == pytest.approx(ref.item())
    np.testing.assert_allclose(grad(theta, X, y), t.grad.numpy(), rtol=1e-10)


def test_linreg_loss_is_the_seeds_formula():
    X, y = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([1.0, 1.0])
    assert models.linreg_loss(np.zeros(2), X, y) == 0.5       # (1² + 1²) / (2·2)


def test_wave_is_non_convex_with_a_suboptimal_minimum():
    ds = data.wave()
    from ddl_lab.ml import optim
    ends = [optim.batch_gd(np.array(t0), ds.X, ds.y, models.wave_grad, 0.1, 300)
            for t0 in ([2.5, 0.5], [0.7, 0.5])]
    losses = [models.wave_loss(e, ds.X, ds.y) for e in ends]
    assert abs(ends[0][0] - ds.theta[0]) < 0.05 and losses[1] > 5 * losses[0]


def test_flat_params_round_trip():
    model = models.SmallCNN()
    vec = models.flat_params(model)
    assert vec.dim() == 1 and vec.numel() == sum(p.numel() for p in model.parameters())
    models.set_flat_params(model, torch.arange(vec.numel(), dtype=torch.float32))
    assert models.flat_params(model)[:3].tolist() == [0.0, 1.0, 2.0]
    model(torch.rand(2, 64)).sum().backward()
    assert models.flat_grads(model).shape == vec.shape
    with pytest.raises(ValueError, match="expected a 1-D vector"):
        models.set_flat_params(model, vec[:-1])
