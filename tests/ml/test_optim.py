"""The teaching optimisers follow the same trajectory as their torch.optim twins."""
import numpy as np
import pytest
import torch

from ddl_lab.ml import data, models, optim, training

STEPS = 40


@pytest.fixture(scope="module")
def problem():
    ds = data.linear_regression(m=200, d=5, seed=1)
    return ds.X.astype(np.float64), ds.y.astype(np.float64)


def _torch_trajectory(X, y, make_opt, make_sched=None, steps=STEPS):
    """Full-batch steps of a torch optimiser on J(θ) = 1/(2m)|Xθ − y|², θ₀ = 0."""
    Xt, yt = torch.from_numpy(X), torch.from_numpy(y)
    theta = torch.zeros(X.shape[1], dtype=torch.float64, requires_grad=True)
    opt = make_opt([theta])
    sched = make_sched(opt) if make_sched else None
    path = []
    for _ in range(steps):
        opt.zero_grad()
        loss = ((Xt @ theta - yt) ** 2).mean() / 2
        loss.backward()
        opt.step()
        if sched:
            sched.step()
        path.append(theta.detach().numpy().copy())
    return np.array(path)


def _our_trajectory(X, y, rule, steps=STEPS):
    theta, path = np.zeros(X.shape[1]), []
    for _ in range(steps):
        theta = rule.step(theta, models.linreg_grad(theta, X, y))
        path.append(theta)
    return np.array(path)


@pytest.mark.parametrize("ours, theirs", [
    (lambda: optim.GD(0.3), lambda p: torch.optim.SGD(p, lr=0.3)),
    (lambda: optim.Momentum(0.1, 0.9), lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9)),
    (lambda: optim.Adagrad(0.5), lambda p: torch.optim.Adagrad(p, lr=0.5, eps=1e-10)),
    (lambda: optim.AdamW(0.05, (0.8, 0.99), 1e-3, 0.2),
     lambda p: torch.optim.AdamW(p, lr=0.05, betas=(0.8, 0.99), eps=1e-3, weight_decay=0.2)),
], ids=["gd", "momentum", "adagrad", "adamw"])
def test_rule_matches_torch(problem, ours, theirs):
    X, y = problem
    want = _torch_trajectory(X, y, theirs)
    got = _our_trajectory(X, y, ours())
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    assert models.linreg_loss(got[-1], X, y) < 0.5 * models.linreg_loss(0 * got[0], X, y)


@pytest.mark.parametrize("ours, theirs", [
    (lambda: optim.step_decay(0.4, 0.5, 7),
     lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=7, gamma=0.5)),
    (lambda: optim.exponential_decay(0.4, 0.95),
     lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.95)),
    (lambda: optim.inverse_time(0.4, 0.1),
     lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda t: 1 / (1 + 0.1 * t))),
], ids=["step", "exponential", "inverse_time"])
def test_schedule_matches_torch(problem, ours, theirs):
    X, y = problem
    want = _torch_trajectory(X, y, lambda p: torch.optim.SGD(p, lr=0.4), theirs)
    got = _our_trajectory(X, y, optim.GD(ours()))
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)


def test_reduce_on_plateau_matches_torch():
    losses = [5.0, 4.0, 4.0, 3.99995, 2.0, 2.5, 1.0, 1.0]
    ours = optim.ReduceOnPlateau(1.0, factor=0.5, threshold=1e-4)
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=1.0)
    theirs = torch.optim.lr_scheduler.ReduceLROnPlateau(
        opt, mode="min", factor=0.5, patience=0, threshold=1e-4, threshold_mode="abs")
    for loss in losses:
        ours.observe(loss)
        theirs.step(loss)
        assert ours(0) == pytest.approx(opt.param_groups[0]["lr"])
    assert ours(0) == 1.0 / 2 ** 4          # 4.0, 3.99995, 2.5 and the last 1.0 did not improve


def test_torch_optimizer_drives_a_model_like_torch_adagrad():
    train, _ = data.digits()
    small = train.subset(np.arange(256))
    runs = []
    for make in (lambda m: optim.TorchOptimizer(m.parameters(), optim.Adagrad(0.05)),
                 lambda m: torch.optim.Adagrad(m.parameters(), lr=0.05, eps=1e-10)):
        torch.manual_seed(0)
        model = models.MLP(hidden=16)
        hist = training.train(model, small, "ce", optimizer=make(model), epochs=2,
                              batch_size=32)
        runs.append((models.flat_params(model), hist.loss))
    torch.testing.assert_close(runs[0][0], runs[1][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-5)


def test_get_batches_cover_every_example_once_and_shuffle():
    rng = np.random.default_rng(0)
    batches = list(optim.get_batches(10, 4, rng))
    assert [len(b) for b in batches] == [4, 4, 2]
    order = np.concatenate(batches)
    assert sorted(order) == list(range(10)) and list(order) != list(range(10))
    assert list(np.concatenate(list(optim.get_batches(10, 4)))) == list(range(10))


def test_the_three_fragments_are_one_loop(problem):
    X, y = problem
    theta0 = np.zeros(X.shape[1])
    # batch GD = full-gradient steps
    want = theta0
    for _ in range(3):
        want = want - 0.2 * models.linreg_grad(want, X, y)
    np.testing.assert_allclose(optim.batch_gd(theta0, X, y, models.linreg_grad, 0.2, 3), want)
    # SGD = one example per update, in the order the generator shuffles
    rng, want = np.random.default_rng(5), theta0
    for _ in range(2):
        for i in rng.permutation(len(y)):
            want = want - 0.01 * models.linreg_grad(want, X[i:i + 1], y[i:i + 1])
    got = optim.sgd(theta0, X, y, models.linreg_grad, 0.01, 2, np.random.default_rng(5))
    np.testing.assert_allclose(got, want)
    # mini-batch: ⌈m/b⌉ updates per epoch, recorded
    seen = []
    optim.minibatch_gd(theta0, X, y, models.linreg_grad, 0.1, 2, np.random.default_rng(0),
                       batch_size=64, record=seen.append)
    assert len(seen) == 2 * 4


def test_batch_gd_converges_below_two_over_L_and_diverges_above(problem):
    X, y = problem
    L = optim.lipschitz(X)
    theta_star = np.linalg.lstsq(X, y, rcond=None)[0]
    good = optim.batch_gd(np.zeros(X.shape[1]), X, y, models.linreg_grad, 1 / L, 200)
    np.testing.assert_allclose(good, theta_star, atol=1e-6)
    bad = optim.batch_gd(np.zeros(X.shape[1]), X, y, models.linreg_grad, 2.1 / L, 200)
    assert np.linalg.norm(bad - theta_star) > 1e3


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="lr must be > 0"):
        optim.GD(0.0)
    with pytest.raises(ValueError, match="momentum"):
        optim.Momentum(0.1, momentum=1.0)
    with pytest.raises(ValueError, match="eps"):
        optim.Adagrad(0.1, eps=0.0)
    with pytest.raises(ValueError, match="batch_size"):
        list(optim.get_batches(10, 0))
    with pytest.raises(ValueError, match="factor"):
        optim.ReduceOnPlateau(0.1, factor=1.5)
    with pytest.raises(TypeError, match=r"takes an update rule such as GD\(lr\), got float"):
        optim.minibatch_sgd_epoch(np.zeros(2), np.ones((4, 2)), np.ones(4), models.linreg_grad,
                                  0.1, 2, None)
