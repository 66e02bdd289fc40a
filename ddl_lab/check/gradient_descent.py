"""Checks for lesson 01 (gradient descent): the batch gradient, the mini-batch SGD epoch,
the Adagrad update and a learning rate that converges. All run in this process."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ._core import call_local, fail, first_difference, passed

__all__ = ["gd_batch_gradient", "gd_minibatch_epoch", "gd_adagrad_step", "gd_learning_rate"]


def _reference_gradient(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return X.T @ (X @ theta - y) / len(y)


def _as_array(value: Any, what: str) -> np.ndarray:
    try:
        return np.asarray(value, dtype=float)
    except (TypeError, ValueError):
        fail(f"{what} returned {type(value).__name__} {value!r:.80}; return a numpy array.")


# ------------------------------------------------------------------ task 1

def gd_batch_gradient(batch_gradient: Callable) -> None:
    """Lesson 01, task 1: ``batch_gradient(theta, X, y)`` is ∇J on the batch (X, y), where
    J(θ) = 1/(2n) Σ_i (x_i·θ − y_i)² over the n rows of X."""
    __tracebackhide__ = True
    rng = np.random.default_rng(11)
    for n, d in ((7, 3), (1, 4), (64, 10)):
        X, y, theta = rng.normal(size=(n, d)), rng.normal(size=n), rng.normal(size=d)
        want = _reference_gradient(theta, X, y)
        got = _as_array(call_local(batch_gradient, theta.copy(), X.copy(), y.copy()),
                        "batch_gradient")
        where = f"on a batch of n={n} examples with d={d} features"
        if got.shape != want.shape:
            hint = (" — one value per example: you averaged over the features (axis=1); "
                    "the gradient averages over the examples (axis=0) and has one entry "
                    "per parameter" if got.shape == (n,) and n != d else
                    " — a single number: the gradient has one entry per parameter θ_j"
                    if got.size == 1 else "")
            fail(f"batch_gradient returned shape {got.shape} {where}, expected ({d},){hint}.")
        if first_difference(want, got) is None:
            continue
        hints = {n: "you summed over the batch: divide by the batch size n (the mean "
                    "keeps the step size independent of n)",
                 n / d: "you divided by the number of features d; divide by the number "
                        "of examples n",
                 2.0: "twice too large: the ½ in J cancels the 2 from the square",
                 -1.0: "the sign is flipped: the residual is Xθ − y (prediction minus "
                       "target), and the gradient points uphill"}
        for factor, hint in hints.items():
            if factor != 1 and first_difference(factor * want, got) is None:
                fail(f"batch_gradient {where}: {hint}.")
        fail(f"batch_gradient {where}: {first_difference(want, got)}. Expected "
             "Xᵀ(Xθ − y)/n.")
    passed("gd_batch_gradient", "Xᵀ(Xθ − y)/n on batches of 7, 1 and 64 examples")


# ------------------------------------------------------------------ task 2

class _Recorder:
    """A grad function that records the batches and the θ it was called with."""

    def __init__(self, d: int):
        self.d = d
        self.calls: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def __call__(self, theta, X, y):
        X, y = np.asarray(X), np.asarray(y)
        if X.ndim != 2 or X.shape[1] != self.d or y.ndim != 1:
            fail(f"grad was called with X of shape {X.shape} and y of shape {y.shape}: call "
                 "it as grad(theta, X_batch, y_batch) with X_batch = X[batch] (rows) and "
                 "y_batch = y[batch].")
        self.calls.append((np.array(theta, dtype=float), X.copy(), y.copy()))
        return _reference_gradient(np.asarray(theta, dtype=float), X, y)


def _epoch_problem(m: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(5)
    X = np.column_stack([np.arange(m, dtype=float), rng.normal(size=(m, 2))])
    X[:, 0] /= m                        # column 0 = id/m, and y = 10·id + 0.5: the check
    y = 10 * np.arange(m) + 0.5         # can tell which examples a batch holds, and pairs
    return X, y


def gd_minibatch_epoch(minibatch_sgd_epoch: Callable, m: int = 10, batch_size: int = 4,
                       lr: float = 0.01) -> None:
    """Lesson 01, task 2: ``minibatch_sgd_epoch(theta, X, y, grad, lr, batch_size, rng)``
    shuffles the examples with ``rng``, takes them in consecutive batches (the last may be
    smaller), updates θ ← θ − lr·grad(θ, X_B, y_B) after each batch and returns θ."""
    __tracebackhide__ = True
    X, y = _epoch_problem(m)
    theta0 = np.array([0.5, -0.3, 0.2])
    rng = np.random.default_rng(0)
    orders = []
    for epoch in range(2):
        rec = _Recorder(X.shape[1])
        theta_in = theta0.copy()
        out = call_local(minibatch_sgd_epoch, theta_in, X.copy(), y.copy(), rec, lr,
                         batch_size, rng)
        if out is None:
            fail("minibatch_sgd_epoch returned None: return the updated θ.")
        out = _as_array(out, "minibatch_sgd_epoch")
        _check_batches(rec, X, y, m, batch_size)
        orders.append(np.concatenate([np.rint(c[1][:, 0] * m) for c in rec.calls]))
        _check_updates(rec, theta0, out, lr)
    if np.array_equal(orders[0], np.arange(m)):
        fail(f"the examples were visited in their stored order {orders[0].astype(int).tolist()}:"
             " shuffle them at the start of every epoch (e.g. order = rng.permutation(m)),"
             " or SGD sees the data in the same biased sequence every time.")
    if np.array_equal(orders[0], orders[1]):
        fail("two epochs with the same generator visited the examples in the same order "
             f"{orders[0].astype(int).tolist()}: shuffle with the rng you are given (do not "
             "create a new generator with a fixed seed inside the function).")
    passed("gd_minibatch_epoch", f"shuffled every epoch, {len(rec.calls)} batches of ≤ "
           f"{batch_size} covering all {m} examples once, θ updated after each batch")


def _check_batches(rec: _Recorder, X: np.ndarray, y: np.ndarray, m: int, b: int) -> None:
    __tracebackhide__ = True
    if not rec.calls:
        fail("minibatch_sgd_epoch never called grad: compute grad(θ, X_batch, y_batch) for "
             "each mini-batch.")
    sizes = [len(c[2]) for c in rec.calls]
    ids = [np.rint(c[1][:, 0] * m).astype(int) for c in rec.calls]
    for k, (bx, by) in enumerate(zip(ids, (c[2] for c in rec.calls))):
        if len(bx) != len(by):
            fail(f"batch {k}: X_batch has {len(bx)} rows but y_batch {len(by)} values.")
        if not np.allclose(by, 10 * bx + 0.5):
            fail(f"batch {k}: the targets y_batch do not belong to the rows of X_batch — X and "
                 "y were shuffled separately. Shuffle one index array and use it for both: "
                 "X[batch], y[batch].")
    used = np.concatenate(ids)
    counts = np.bincount(used, minlength=m)
    if (counts > 1).any():
        fail(f"example {int(np.argmax(counts > 1))} was used {counts.max()} times in one epoch "
             f"(batch sizes {sizes}): take the batches from ONE permutation, consecutively "
             "(order[i:i + batch_size]), so each example is used exactly once.")
    if (counts == 0).any():
        missing = np.flatnonzero(counts == 0).tolist()
        hint = (" — the last, smaller batch was dropped: with range(0, m, batch_size) the "
                "final slice holds the remaining examples" if len(missing) == m % b and
                all(s == b for s in sizes) else "")
        fail(f"examples {missing} were never used in the epoch (batch sizes {sizes}){hint}.")
    want = [b] * (m // b) + ([m % b] if m % b else [])
    if sizes != want:
        fail(f"batch sizes were {sizes}, expected {want} for m={m} and batch_size={b}.")


def _check_updates(rec: _Recorder, theta0: np.ndarray, out: np.ndarray, lr: float) -> None:
    __tracebackhide__ = True
    theta, up = theta0.copy(), None
    for k, (seen, Xb, yb) in enumerate(rec.calls):
        if first_difference(theta, seen) is not None:
            hint = (" — every gradient was taken at the starting θ: update θ after each "
                    "batch, before computing the next gradient"
                    if first_difference(theta0, seen) is None else
                    " — it moved uphill: the update is θ − lr·g, not θ + lr·g"
                    if first_difference(up, seen) is None else "")
            fail(f"the gradient of batch {k} was computed at θ = {np.round(seen, 4).tolist()}, "
                 f"expected the θ after the previous updates, {np.round(theta, 4).tolist()}"
                 f"{hint}.")
        g = _reference_gradient(theta, Xb, yb)
        theta, up = theta - lr * g, theta + lr * g
    if first_difference(theta, out) is not None:
        uphill = first_difference(theta0 + (theta0 - theta), out) is None
        same = first_difference(theta0, out) is None
        fail("the θ returned after the epoch is "
             f"{np.round(out, 4).tolist()}, expected {np.round(theta, 4).tolist()}"
             + (" — it moved uphill: the update is θ − lr·g, not θ + lr·g" if uphill else
                " — that is the starting θ: return the updated θ" if same else "") + ".")


# ------------------------------------------------------------------ task 3

def _adagrad(theta, g, G, lr, eps, inside=False):
    G2 = G + g * g
    den = np.sqrt(G2 + eps) if inside else np.sqrt(G2) + eps
    return theta - lr * g / den, G2


def gd_adagrad_step(adagrad_step: Callable, eps: float = 1e-8) -> None:
    """Lesson 01, task 3: ``adagrad_step(theta, g, G, lr, eps)`` returns (θ', G') with
    G' = G + g² and θ' = θ − lr·g/(√G' + eps), element by element."""
    __tracebackhide__ = True
    rng = np.random.default_rng(3)
    theta, lr = rng.normal(size=6), 0.1
    g = np.array([0.5, -2.0, 0.01, 0.0, 0.3, 0.0])     # feature 3: not in this batch
    G = np.array([4.0, 1.0, 0.0, 2.0, 0.0, 0.0])       # features 2, 4, 5: never seen so far
    with np.errstate(all="ignore"):
        res = call_local(adagrad_step, theta.copy(), g.copy(), G.copy(), lr, eps)
    if not isinstance(res, tuple) or len(res) != 2:
        fail(f"adagrad_step returned {type(res).__name__}; return a pair (theta, G): the new "
             "parameters and the new accumulated squared gradients.")
    got_t, got_G = _as_array(res[0], "adagrad_step θ"), _as_array(res[1], "adagrad_step G")
    want_t, want_G = _adagrad(theta, g, G, lr, eps)
    if got_G.shape != G.shape or got_t.shape != theta.shape:
        fail(f"adagrad_step returned θ of shape {got_t.shape} and G of shape {got_G.shape}; "
             f"both must have the parameters' shape {theta.shape}.")
    if first_difference(want_G, got_G) is not None:
        hint = (" — G must accumulate: G + g², not just this step's g²"
                if first_difference(g * g, got_G) is None else
                " — accumulate the SQUARED gradient, g², not g"
                if first_difference(G + g, got_G) is None else
                " — that is the old G: add g² to it" if first_difference(G, got_G) is None
                else "")
        fail(f"the new G: {first_difference(want_G, got_G)}{hint}.")
    if not np.all(np.isfinite(got_t)):
        bad = int(np.flatnonzero(~np.isfinite(got_t))[0])
        fail(f"θ[{bad}] became {got_t[bad]} for a feature with G = {G[bad]} and g = {g[bad]}: "
             "a feature not seen yet has √G = 0, and 0/0 is nan — add eps to the denominator "
             "(√G + eps).")
    if first_difference(want_t, got_t) is None or first_difference(
            _adagrad(theta, g, G, lr, eps, inside=True)[0], got_t) is None:
        passed("gd_adagrad_step", "G' = G + g², θ' = θ − lr·g/(√G' + eps); a feature seen "
               f"for the first time moves by ≈ lr ({abs(got_t[4] - theta[4]):.3g}), an "
               "absent one not at all")
        return
    alternatives = {
        "without the square root: divide by √G' + eps, not G' + eps":
            theta - lr * g / (want_G + eps),
        "with the OLD G in the denominator: add g² to G first, then divide by √G'":
            theta - lr * g / (np.sqrt(G) + eps),
        "with one global rate (plain SGD): divide each coordinate by its own √G' + eps":
            theta - lr * g,
        "moving uphill: the update is θ − lr·g/(√G' + eps)":
            theta + lr * g / (np.sqrt(want_G) + eps),
    }
    with np.errstate(all="ignore"):
        for why, wrong in alternatives.items():
            if first_difference(wrong, got_t) is None:
                fail(f"the new θ is the update {why}.")
    fail(f"the new θ: {first_difference(want_t, got_t)}; expected θ − lr·g/(√G' + eps).")


# ------------------------------------------------------------------ task 4

LR_STEPS, LR_TOL = 50, 1e-6


def _lr_problems() -> list[tuple[str, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(21)
    out = []
    for name, scale in (("unit-scale features", 1.0), ("features ×10", 10.0),
                        ("features ×0.1", 0.1), ("features of mixed scale",
                                                 np.array([1.0, 2.0, 0.8, 1.5]))):
        X = rng.normal(size=(200, 4)) * scale
        out.append((name, X, X @ rng.normal(size=4) + 0.1 * rng.normal(size=200)))
    return out


def _gd_excess(lr: float, X: np.ndarray, y: np.ndarray, steps: int) -> tuple[float, float]:
    theta_star = np.linalg.lstsq(X, y, rcond=None)[0]
    J = lambda th: float(np.sum((X @ th - y) ** 2)) / (2 * len(y))    # noqa: E731
    theta = np.zeros(X.shape[1])
    with np.errstate(all="ignore"):
        for _ in range(steps):
            theta = theta - lr * _reference_gradient(theta, X, y)
    return J(theta) - J(theta_star), J(np.zeros(X.shape[1])) - J(theta_star)


def gd_learning_rate(choose_learning_rate: Callable, steps: int = LR_STEPS) -> None:
    """Lesson 01, task 4: ``choose_learning_rate(X)`` returns a γ with which batch gradient
    descent from θ = 0 brings J − J* below 10⁻⁶ of its start within ``steps`` steps, for
    several X of very different scales."""
    __tracebackhide__ = True
    problems, chosen = _lr_problems(), []
    rates = [call_local(choose_learning_rate, X.copy()) for _, X, _ in problems]
    for lr in rates:
        try:
            float(lr)
        except (TypeError, ValueError):
            fail(f"choose_learning_rate returned {lr!r:.60}; return a number (a float).")
    rates = [float(lr) for lr in rates]
    same = (" You returned the same γ for every X, but their L differ ×10⁴: a constant "
            "rate cannot suit every scale — compute γ from X." if len(set(rates)) == 1 else "")
    runs = []
    for (name, X, y), lr in zip(problems, rates):
        L = float(np.linalg.eigvalsh(X.T @ X / len(X))[-1])
        if not lr > 0:
            fail(f"for {name} you chose γ = {lr:g}; a learning rate must be > 0.")
        where = (f"for {name} (largest eigenvalue of XᵀX/m: L = {L:.4g}, so batch GD "
                 f"converges for γ < 2/L = {2 / L:.4g})")
        runs.append((name, lr, L, where, *_gd_excess(lr, X, y, steps)))
    for name, lr, L, where, excess, start in runs:        # divergence first: it is worse
        if not np.isfinite(excess) or excess > start:
            fail(f"γ = {lr:.4g} diverges {where}: J grew from {start:.3g} above its minimum "
                 f"to {excess:.3g} in {steps} steps.{same}")
    for name, lr, L, where, excess, start in runs:
        if excess > LR_TOL * start:
            slow = ("far below 1/L: too slow" if lr < 0.5 / L else
                    "so close to 2/L that the steepest direction barely settles"
                    if lr > 1.5 / L else "")
            fail(f"γ = {lr:.4g} has not converged within {steps} steps {where}: J − J* is "
                 f"still {excess / start:.2g} of its start (needs < {LR_TOL:g})"
                 + (f" — {slow}" if slow else "") + f".{same or ' Try γ = 1/L.'}")
        chosen.append(f"{name}: γ = {lr:.3g} (1/L = {1 / L:.3g})")
    passed("gd_learning_rate", f"converged within {steps} steps on every scale — "
           + "; ".join(chosen))
