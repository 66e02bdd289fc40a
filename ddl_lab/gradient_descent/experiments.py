"""Lesson 01's experiments: the three fragments side by side, the cost of a full
gradient, learning-rate and batch-size sweeps, Adagrad on sparse features, non-convex
paths, and Adam's moments. The optimisers themselves are in ``ddl_lab.ml.optim``; the pictures in ``plots.py``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from ddl_lab.ml.optim import (GD, Adagrad, AdamW, GradFn, ReduceOnPlateau, Rule, batch_gd,
                              check_data, minibatch_sgd_epoch)

if TYPE_CHECKING:
    from ddl_lab.ml.training import History

__all__ = ["record_run", "time_it", "gradient_cost", "epoch_time", "gd_path", "lr_regime",
           "batch_size_sweep", "adagrad_vs_sgd", "adam_trace"]


def record_run(X: np.ndarray, y: np.ndarray, grad: GradFn, loss: Callable, lr: float | Rule,
               epochs: int, batch_size: int, seed: int = 0,
               theta0: np.ndarray | None = None) -> tuple[np.ndarray, "History"]:
    """Mini-batch GD (batch_size=m: batch GD; 1: SGD) recording the full loss J(θ) before
    the first (``loss0``) and after every update, and the epoch ends (lesson 01's curves).
    A ``ReduceOnPlateau`` schedule observes the loss at the end of every epoch."""
    from ddl_lab.ml.training import History
    if isinstance(epochs, bool) or not isinstance(epochs, (int, np.integer)) or epochs < 0:
        raise ValueError(f"epochs must be an integer >= 0, got {epochs!r}")
    check_data(X, y)
    theta = np.zeros(X.shape[1], dtype=X.dtype) if theta0 is None else np.asarray(theta0)
    hist = History(loss0=loss(theta, X, y))
    rule = lr if isinstance(lr, Rule) else GD(lr)
    rng = np.random.default_rng(seed)
    with np.errstate(over="ignore", invalid="ignore"):
        for _ in range(epochs):
            theta = minibatch_sgd_epoch(theta, X, y, grad, rule, batch_size, rng,
                                        record=lambda th: hist.log(loss(th, X, y)))
            hist.end_epoch()
            if isinstance(rule.lr, ReduceOnPlateau):
                rule.lr.observe(hist.loss[-1])
    return theta, hist


def time_it(fn: Callable[[], object], min_time: float = 0.02) -> float:
    """Seconds per call of ``fn``: the best of 3 rounds of enough calls to last ``min_time``."""
    from time import perf_counter
    n = 1
    while True:
        t = perf_counter()
        for _ in range(n):
            fn()
        if perf_counter() - t >= min_time:
            break
        n *= 4
    best = perf_counter() - t
    for _ in range(2):
        t = perf_counter()
        for _ in range(n):
            fn()
        best = min(best, perf_counter() - t)
    return best / n


def gradient_cost(ms: list[int], d: int = 20, seed: int = 0) -> dict[str, np.ndarray]:
    """Measured seconds for one full gradient of J over m examples, for each m, and for
    one example's gradient (what SGD pays per update) — lesson 01, "GD is very costly".
    numpy's BLAS is held to one thread, so the figure measures work, not thread start-up."""
    from threadpoolctl import threadpool_limits

    from ddl_lab.ml.data import linear_regression
    from ddl_lab.ml.models import linreg_grad
    full, one = [], []
    with threadpool_limits(1):
        for m in ms:
            ds = linear_regression(m, d, seed=seed)
            theta = np.zeros(d, dtype=np.float32)
            full.append(time_it(lambda: linreg_grad(theta, ds.X, ds.y)))
            one.append(time_it(lambda: linreg_grad(theta, ds.X[:1], ds.y[:1])))
    return {"m": np.array(ms), "full": np.array(full), "one": np.array(one)}


def epoch_time(X: np.ndarray, y: np.ndarray, grad: GradFn, lr: float, batch_size: int,
               repeat: int = 3) -> float:
    """Best-of-``repeat`` wall seconds of one mini-batch SGD epoch (no loss recorded)."""
    from time import perf_counter
    best = np.inf
    for r in range(repeat):
        rng, theta = np.random.default_rng(r), np.zeros(X.shape[1], dtype=X.dtype)
        t = perf_counter()
        minibatch_sgd_epoch(theta, X, y, grad, GD(lr), batch_size, rng)
        best = min(best, perf_counter() - t)
    return best


def gd_path(theta0: np.ndarray, X: np.ndarray, y: np.ndarray, grad: GradFn, lr: float,
            steps: int) -> np.ndarray:
    """θ₀ and the θ after each of ``steps`` batch GD steps, as a (steps+1, d) array."""
    path = [np.asarray(theta0, dtype=float)]
    with np.errstate(over="ignore", invalid="ignore"):
        batch_gd(path[0], X, y, grad, lr, steps, record=path.append)
    return np.array(path)


def lr_regime(lr: float, L: float) -> str:
    """Name batch GD's behaviour on a quadratic with curvature at most L for rate lr."""
    if lr >= 2 / L:
        return "diverges (γ ≥ 2/L)"
    if lr > 1 / L:
        return "overshoots and oscillates (1/L < γ < 2/L)"
    if lr >= 0.2 / L:
        return "converges well (γ ≈ 1/L)"
    return "converges painfully slowly (γ ≪ 1/L)"


def batch_size_sweep(X: np.ndarray, y: np.ndarray, sizes: list[int], lrs: list[float],
                     j_star: float, target: float = 0.01, epochs: int = 4
                     ) -> dict[str, np.ndarray]:
    """For each batch size: measured seconds per epoch, and the wall time to bring the
    excess loss J − J* below ``target`` with the best of ``lrs`` (updates counted exactly,
    times measured; inf when no rate gets there within ``epochs``) — lesson 01."""
    from ddl_lab.ml.models import linreg_grad, linreg_loss
    out = {k: [] for k in ("epoch_s", "update_s", "best_lr", "updates", "to_target_s")}
    for b in sizes:
        best = (np.inf, np.nan)
        for lr in lrs:
            _, h = record_run(X, y, linreg_grad, linreg_loss, lr, epochs, b)
            hit = np.flatnonzero(np.array(h.loss) - j_star < target)
            if len(hit) and hit[0] + 1 < best[0]:
                best = (hit[0] + 1, lr)
        epoch_s = epoch_time(X, y, linreg_grad, best[1] if np.isfinite(best[0]) else lrs[0], b)
        update_s = epoch_s / -(-len(y) // b)
        out["epoch_s"].append(epoch_s)
        out["update_s"].append(update_s)
        out["best_lr"].append(best[1])
        out["updates"].append(best[0])
        out["to_target_s"].append(best[0] * update_s)
    return {"size": np.array(sizes), **{k: np.array(v, dtype=float) for k, v in out.items()}}


def adagrad_vs_sgd(train, test, lrs: list[float], epochs: int = 3, batch_size: int = 10,
                   seed: int = 0) -> dict[str, dict]:
    """Logistic regression on sparse data with one global rate (SGD) and with Adagrad, each
    at its best rate from ``lrs`` (by test loss): test loss per epoch, final θ, and
    Adagrad's per-feature accumulator G (lesson 01; Adagrad returns in lesson 07)."""
    from ddl_lab.ml.models import logistic_grad, logistic_loss
    Xtr, Xte = train.dense(), test.dense()
    results = {}
    for name, make in (("SGD", GD), ("Adagrad", Adagrad)):
        best = None
        for lr in lrs:
            rule, theta = make(lr), np.zeros(train.d, dtype=np.float32)
            rng, curve = np.random.default_rng(seed), [logistic_loss(theta, Xte, test.y)]
            for _ in range(epochs):
                theta = minibatch_sgd_epoch(theta, Xtr, train.y, logistic_grad, rule,
                                            batch_size, rng)
                curve.append(logistic_loss(theta, Xte, test.y))
            if best is None or curve[-1] < best["test_loss"][-1]:
                best = {"lr": lr, "test_loss": curve, "theta": theta,
                        "G": getattr(rule, "G", None)}
        results[name] = best
    return results


def adam_trace(X: np.ndarray, y: np.ndarray, grad: GradFn, rule: AdamW, epochs: int,
               batch_size: int, coord: int = 0, seed: int = 0) -> dict[str, np.ndarray]:
    """Mini-batch training with ``rule`` (lesson 01 §9), recording after every update the
    mini-batch gradient of coordinate ``coord``, its first moment m and the bias-corrected
    m̂, and every coordinate's √v̂ (the denominators Adam divides by); and the final θ."""
    rec: dict[str, list] = {"g": [], "m": [], "m_hat": [], "sqrt_v_hat": []}
    b1, b2 = rule.betas

    def watched(theta: np.ndarray, Xb: np.ndarray, yb: np.ndarray) -> np.ndarray:
        g = grad(theta, Xb, yb)
        rec["g"].append(float(g[coord]))
        return g

    def record(theta: np.ndarray) -> None:
        rec["m"].append(float(rule.m[coord]))
        rec["m_hat"].append(float(rule.m[coord]) / (1 - b1 ** rule.t))
        rec["sqrt_v_hat"].append(np.sqrt(rule.v / (1 - b2 ** rule.t)))

    theta, rng = np.zeros(X.shape[1]), np.random.default_rng(seed)
    for _ in range(epochs):
        theta = minibatch_sgd_epoch(theta, X.astype(np.float64), y.astype(np.float64), watched,
                                    rule, batch_size, rng, record)
    return {**{k: np.array(v) for k, v in rec.items()}, "theta": theta}
