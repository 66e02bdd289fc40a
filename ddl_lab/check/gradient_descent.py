"""Checks for lesson 01 (gradient descent): the batch gradient, the mini-batch SGD epoch,
Adagrad, a learning rate that converges, the best fixed step (reasoning), a mini-batch
SGD plan within budgets (design) and AdamW by hand, on seeded cases in this process."""
from __future__ import annotations

import functools
import math
import os
import sys
from typing import Any, Callable

import numpy as np

from . import _answers as answers
from ._core import CheckFailed, call_local, fail, judge, run_beside, task
from ._diagnose import (Case, Snapshot, adagrad_diagnosis, as_array, describe_value,
                        differs, explain, factor_of, name_factor, returned_none, same, table)
from ._trial import Trial

__all__ = ["batch_gradient", "minibatch_sgd_epoch", "adagrad_step", "learning_rate",
           "best_step", "sgd_plan", "adamw_step"]


def _reference_gradient(theta: np.ndarray, X: np.ndarray, y: np.ndarray) -> np.ndarray:
    return X.T @ (X @ theta - y) / len(y)


# ------------------------------------------------------------------ task 1

@task("gradient_descent", refuses=("ddl_lab.ml", "linreg_grad"))
def batch_gradient(my_batch_gradient: Callable, seed: int = 0) -> None:
    """Lesson 01, task 1: ``my_batch_gradient(theta, X, y)`` is ∇J on the batch (X, y),
    J(θ) = 1/(2n) Σ_i (x_i·θ − y_i)² over the n rows of X — in the inputs' dtype."""
    fixed = table("n d scale dtype", (7, 3, 3.0, "float64"), (1, 4, 1.0, "float64"),
                  (13, 1, 0.5, "float32"), (5, 5, 2.0, "float64"))
    trial = Trial("batch_gradient", my_batch_gradient, seed, fixed, draws=4, draw=lambda rng: {
        "n": int(rng.integers(2, 65)), "d": int(rng.integers(1, 11)),
        "scale": float(10 ** rng.uniform(-1, 1)), "dtype": str(rng.choice(["float64", "float32"]))},
        name="my_batch_gradient")
    name = trial.name
    for case in trial:
        n, d, scale, dtype = (case.params[k] for k in ("n", "d", "scale", "dtype"))
        X = (case.rng.normal(size=(n, d)) * scale).astype(dtype)
        y, theta = (case.rng.normal(size=k).astype(dtype) for k in (n, d))
        want = _reference_gradient(*(a.astype(np.float64) for a in (theta, X, y)))
        inputs = Snapshot(theta=theta, X=X, y=y)
        got = trial.call(case, theta, X, y)
        where = f"{name} on {case}"
        judge(inputs.changed(name) or returned_none(got, name, f"the gradient, shape ({d},)"), case)
        if (diff := differs(want.astype(dtype), got)) is None:
            continue
        got_a = as_array(got)
        if got_a is None or got_a.size == 1 and d > 1:
            what = " — a single number" if got_a is not None else ""
            fail(f"{where} returned {describe_value(got)}{what}; expected an array of shape "
                 f"({d},): the gradient has one entry per parameter θ_j.")
        if got_a.shape != want.shape:
            axis = (" — one value per example: you averaged over the features (axis=1); "
                    "the gradient averages over the examples (axis=0)"
                    if got_a.shape == (n,) else "")
            fail(f"{where} returned shape {got_a.shape}, expected ({d},){axis}.")
        c = factor_of(want, got)
        hint = explain(got, {"the targets y are missing: the residual is Xθ − y":
                             _reference_gradient(theta, X, np.zeros_like(y))}) or (
            c is not None and (name_factor(c, {
                float(n): "you summed over the batch: divide by the batch size n (the mean "
                          "keeps the step size independent of n)",
                n / d: "you divided by the number of features d; divide by the number of "
                       "examples n",
                2.0: "twice too large: the ½ in J cancels the 2 from the square",
                -1.0: "the sign is flipped: the residual is Xθ − y (prediction minus target), "
                      "and the gradient points uphill",
                1.0 / n: "you divided by n twice"})
                or f"your gradient is {c:.4g} × the right one: the factor in front is 1/n"))
        fail(f"{where}: {hint or diff + '. Expected Xᵀ(Xθ − y)/n'}.")
    trial.passed(f"Xᵀ(Xθ − y)/n on {len(trial)} batches (n from 1 to "
                 f"{max(c.params['n'] for c in trial)}, float64 and float32, data of scale 0.1–10)")


# ------------------------------------------------------------------ task 2

class _Recorder:
    """A grad function that records the batches and the θ it was called with."""

    def __init__(self, d: int):
        self.d, self.misuse = d, None
        self.calls: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []

    def __call__(self, theta, X, y):
        X, y = np.asarray(X), np.asarray(y)
        if X.ndim != 2 or X.shape[1] != self.d or y.ndim != 1:
            self.misuse = self.misuse or (
                f"grad was called with X of shape {X.shape} and y of shape {y.shape}: call "
                "it as grad(theta, X_batch, y_batch) with X_batch = X[batch] (rows) and "
                "y_batch = y[batch].")
            return np.zeros(self.d)
        self.calls.append((np.array(theta, dtype=float), X.copy(), y.copy()))
        return _reference_gradient(np.asarray(theta, dtype=float), X, y)


def _epoch_case(rng: np.random.Generator) -> dict[str, Any]:
    m = int(rng.integers(2, 30))
    return {"m": m, "batch_size": int(rng.integers(1, m + 3)),
            "lr": float(10 ** rng.uniform(-2.5, -1))}


@task("gradient_descent", refuses=("ddl_lab.ml", "minibatch_sgd_epoch", "minibatch_gd", "sgd"))
def minibatch_sgd_epoch(my_minibatch_sgd_epoch: Callable, seed: int = 0) -> None:
    """Lesson 01, task 2: ``my_minibatch_sgd_epoch(theta, X, y, grad, lr, batch_size, rng)``
    shuffles the examples with ``rng``, takes them in consecutive batches (the last may be
    smaller), updates θ ← θ − lr·grad(θ, X_B, y_B) after each batch and returns θ. X and y
    stay unchanged; the same generator state gives the same epoch."""
    trial = Trial("minibatch_sgd_epoch", my_minibatch_sgd_epoch, seed, table(
        "m batch_size lr", (10, 4, 0.01), (13, 5, 0.03), (7, 1, 0.02), (6, 6, 0.05), (1, 3, 0.1)),
        draws=3, draw=_epoch_case, name="my_minibatch_sgd_epoch")
    name = trial.name
    for case in trial:
        m, b, lr = case.params["m"], case.params["batch_size"], case.params["lr"]
        ids = np.arange(m)      # column 0 = id/m, y = 10·id + 0.5: which examples a batch holds
        X, y = np.column_stack([ids / max(m, 1), case.rng.normal(size=(m, 2)) * 3]), 10 * ids + 0.5
        theta0, runs = case.rng.normal(size=3), []
        for generator_seed in (0, 0, 1):
            rec, inputs = _Recorder(X.shape[1]), Snapshot(X=X, y=y)
            out = trial.call(case, theta0.copy(), X, y, rec, lr, b, np.random.default_rng(
                [generator_seed, case.index]))
            judge(rec.misuse or inputs.changed(name) or returned_none(out, name, "the updated θ"),
                  case)
            if as_array(out) is None:
                fail(f"{name} returned {describe_value(out)}; return the updated θ, an array "
                     f"of shape (3,) [{case}].")
            judge(_batches_fault(rec, m, b) or _updates_fault(rec, theta0, out, lr), case, "[{}].")
            runs.append((np.concatenate([np.rint(c[1][:, 0] * m) for c in rec.calls]), out))
        (order, out), (order2, out2), (order3, _) = runs
        if not same(out, out2) or not np.array_equal(order, order2):
            fail(f"two epochs from generators in the same state visited the examples in "
                 f"different orders ({order.astype(int).tolist()} and "
                 f"{order2.astype(int).tolist()}): shuffle with the rng you are given, not "
                 f"np.random or a new unseeded generator, so a run can be reproduced [{case}].")
        if m > 6 and np.array_equal(order, np.arange(m)):      # 1/m! by chance: never
            fail(f"the examples were visited in their stored order {order.astype(int).tolist()}"
                 ": shuffle them at the start of every epoch (e.g. order = rng.permutation(m)),"
                 f" or SGD sees the data in the same biased sequence every time [{case}].")
        if m > 6 and np.array_equal(order, order3):
            fail("generators in different states gave the same order "
                 f"{order.astype(int).tolist()}: shuffle with the rng you are given (do not "
                 f"create a new generator with a fixed seed inside the function) [{case}].")
    trial.passed(f"on {len(trial)} cases (m from 1 to 29, batch sizes 1 to m + 2, random lr): "
                 "every example once per epoch in consecutive batches of one shuffle, θ updated "
                 "after each, reproducible from the generator")


def _batches_fault(rec: _Recorder, m: int, b: int) -> str | None:
    """What is wrong with the batches grad saw, or None."""
    if not rec.calls:
        return "grad was never called: compute grad(θ, X_batch, y_batch) for each mini-batch"
    sizes = [len(c[2]) for c in rec.calls]
    ids = [np.rint(c[1][:, 0] * m).astype(int) for c in rec.calls]
    for k, (bx, by) in enumerate(zip(ids, (c[2] for c in rec.calls))):
        if len(bx) != len(by):
            return f"batch {k}: X_batch has {len(bx)} rows but y_batch {len(by)} values"
        if not np.allclose(by, 10 * bx + 0.5):
            return (f"batch {k}: the targets y_batch do not belong to the rows of X_batch — X "
                    "and y were shuffled separately. Shuffle one index array and use it for "
                    "both: X[batch], y[batch]")
    counts = np.bincount(np.concatenate(ids), minlength=m)
    if (counts > 1).any():
        return (f"example {int(np.argmax(counts > 1))} was used {counts.max()} times in one "
                f"epoch (batch sizes {sizes}): take the batches from ONE permutation, "
                "consecutively (order[i:i + batch_size]), so each example is used exactly once")
    if (counts == 0).any():
        missing = np.flatnonzero(counts == 0).tolist()
        hint = (" — the last, smaller batch was dropped: with range(0, m, batch_size) the "
                "final slice holds the remaining examples" if len(missing) == m % b and
                all(s == b for s in sizes) else "")
        return f"examples {missing} were never used in the epoch (batch sizes {sizes}){hint}"
    want = [b] * (m // b) + ([m % b] if m % b else [])
    if sizes != want:
        return f"batch sizes were {sizes}, expected {want} for m={m} and batch_size={b}"
    return None


def _updates_fault(rec: _Recorder, theta0: np.ndarray, out: Any, lr: float) -> str | None:
    """What is wrong with the θ each gradient was taken at, or with the θ returned; or None."""
    theta, up = theta0.copy(), None
    uphill = " — it moved uphill: the update is θ − lr·g, not θ + lr·g"

    def scaled(c: float | None) -> str:         # a step c × lr·g: a rate of its own
        return ("" if c is None else f" — the step was {c:.4g} × lr·g: use the lr you are "
                f"given (lr = {lr:g}), not a constant")
    for k, (seen, Xb, yb) in enumerate(rec.calls):
        if not same(theta, seen):
            g_prev = _reference_gradient(rec.calls[k - 1][0], *rec.calls[k - 1][1:])
            c = factor_of(-lr * g_prev, seen - rec.calls[k - 1][0]) if k else None
            hint = (" — every gradient was taken at the starting θ: update θ after each "
                    "batch, before computing the next gradient" if same(theta0, seen) else
                    uphill if same(up, seen) else scaled(c))
            return (f"the gradient of batch {k} was computed at θ = "
                    f"{np.round(seen, 4).tolist()}, expected the θ after the previous updates, "
                    f"{np.round(theta, 4).tolist()}{hint}")
        g = _reference_gradient(theta, Xb, yb)
        theta, up = theta - lr * g, theta + lr * g
    if same(theta, out):
        return None
    c = factor_of(theta - theta0, as_array(out) - theta0)
    hint = explain(out, {uphill: theta0 + (theta0 - theta),
                         " — that is the starting θ: return the updated θ": theta0}) or scaled(c)
    return (f"the θ returned after the epoch is {np.round(as_array(out), 4).tolist()}, "
            f"expected {np.round(theta, 4).tolist()}{hint}")


# ------------------------------------------------------------------ task 1 (its Adagrad step)

@task("gradient_descent", refuses=("ddl_lab.ml", "Adagrad"))
def adagrad_step(my_adagrad_step: Callable, seed: int = 0) -> None:
    """Lesson 01, task 1: ``my_adagrad_step(theta, g, G, lr, eps)`` returns (θ', G') with
    G' = G + g² and θ' = θ − lr·g/(√G' + eps), element by element, leaving its inputs as
    they were."""
    fixed = table("d lr eps dtype", (6, 0.1, 1e-8, "float64"), (6, 0.37, 1e-3, "float64"),
                  (5, 0.05, 1e-6, "float32"))
    trial = Trial("adagrad_step", my_adagrad_step, seed, fixed, draws=3, draw=lambda rng: {
        "d": int(rng.integers(1, 12)), "lr": float(10 ** rng.uniform(-2, 0)),
        "eps": float(10.0 ** rng.integers(-10, -1)),
        "dtype": str(rng.choice(["float64", "float32"]))}, name="my_adagrad_step")
    for case in trial:
        theta, g, G = _adagrad_inputs(case)
        lr, eps = case.params["lr"], case.params["eps"]
        inputs = Snapshot(theta=theta, g=g, G=G)
        with np.errstate(all="ignore"):
            got = trial.call(case, theta, g, G, lr, eps)
        judge(inputs.changed(trial.name) or adagrad_diagnosis(
            got, *(a.astype(np.float64) for a in (theta, g, G)), lr, eps, trial.name), case)
    trial.passed(f"G' = G + g², θ' = θ − lr·g/(√G' + eps) on {len(trial)} cases (random lr "
                 "and eps, float64 and float32); a feature seen for the first time moves by ≈ "
                 "lr, an absent one not at all")


def _adagrad_inputs(case: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """θ, g, G with the edge features first: absent and never seen (g = G = 0), seen for
    the first time (G = 0), absent now (g = 0), a gradient as small as eps, a negative one."""
    d, eps, rng = case.params["d"], case.params["eps"], case.rng
    g = rng.normal(size=d) * 10 ** rng.uniform(-1, 1, size=d)
    G = rng.uniform(0, 5, size=d)
    edges = [(0.0, 0.0), (0.5, 0.0), (0.0, 2.0), (eps, 0.0), (-2.0, 1.0), (0.01, 0.0)]
    for k, (gk, Gk) in enumerate(edges[:d]):
        g[k], G[k] = gk, Gk
    dtype = case.params["dtype"]
    return rng.normal(size=d).astype(dtype), g.astype(dtype), G.astype(dtype)


# ------------------------------------------------------------------ task 3

LR_STEPS, LR_TOL = 50, 1e-6


def _lr_problem(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """X of m×d with features of about the case's scale (each within ×spread), y = Xθ + noise;
    m grows with d — drawn again until γ = 1/L converges within the budget (well conditioned)."""
    p, rng = case.params, case.rng
    d, scale, spread = p["d"], p["scale"], p.get("spread", 1.2)
    while True:
        m = int(rng.integers(max(100, 25 * d), max(300, 40 * d)))
        X = rng.normal(size=(m, d)) * scale * spread ** rng.uniform(-1, 1, size=d)
        y = X @ rng.normal(size=d) + 0.1 * rng.normal(size=m)
        L = float(np.linalg.eigvalsh(X.T @ X / len(X))[-1])
        excess, start = _gd_excess(1.0 / L, X, y, LR_STEPS)
        if excess < 1e-3 * LR_TOL * start:
            return X, y


def _gd_excess(lr: float, X: np.ndarray, y: np.ndarray, steps: int) -> tuple[float, float]:
    theta_star = np.linalg.solve(X.T @ X, X.T @ y)        # X is well conditioned
    J = lambda th: float(np.sum((X @ th - y) ** 2)) / (2 * len(y))    # noqa: E731
    theta = np.zeros(X.shape[1])
    with np.errstate(all="ignore"):
        for _ in range(steps):
            theta = theta - lr * _reference_gradient(theta, X, y)
    return J(theta) - J(theta_star), J(np.zeros(X.shape[1])) - J(theta_star)


@task("gradient_descent", refuses=("ddl_lab.ml", "lipschitz"))
def learning_rate(my_learning_rate: Callable, seed: int = 0, steps: int = LR_STEPS) -> None:
    """Lesson 01, task 3: ``my_learning_rate(X)`` returns a γ with which batch gradient
    descent from θ = 0 brings J − J* below 10⁻⁶ of its start within ``steps`` steps, for
    X of very different scales (1, ×10, ×0.1, mixed, random) and 2 to 40 features."""
    fixed = [{"scale": 1.0, "d": 3}, {"scale": 10.0, "d": 5}, {"scale": 0.1, "d": 2},
             {"scale": 1.0, "spread": 1.6, "d": 4}, {"scale": 1.0, "d": 12},
             {"scale": 3.0, "d": 24}]     # many features (12–40): 1/trace(XᵀX/m) ≈ 1/(d·L)
    trial = Trial("learning_rate", my_learning_rate, seed, fixed, draws=3, draw=lambda r: {
        "scale": float(10 ** r.uniform(-1.5, 1.5)),
        "d": int(r.choice([r.integers(2, 7), r.integers(12, 41)]))}, name="my_learning_rate")
    name, runs = trial.name, []
    for case in trial:
        X, y = _lr_problem(case)
        inputs = Snapshot(X=X)
        lr = trial.call(case, X)
        judge(inputs.changed(name) or returned_none(lr, name, "the learning rate γ"), case)
        try:
            lr = float(lr)
        except (TypeError, ValueError):
            fail(f"{name} returned {describe_value(lr)}; return a number (a float) [{case}].")
        runs.append((case, X, y, lr))
    same_rate = (" You returned the same γ for every X, but their L differ ×10⁴: a "
                 "constant rate cannot suit every scale — compute γ from X."
                 if len({r[3] for r in runs}) == 1 else "")
    results = []
    for case, X, y, lr in runs:
        L = float(np.linalg.eigvalsh(X.T @ X / len(X))[-1])
        if not lr > 0:
            fail(f"you chose γ = {lr:g}; a learning rate must be > 0 [{case}].")
        where = (f"(largest eigenvalue of XᵀX/m: L = {L:.4g}, so batch GD converges for "
                 f"γ < 2/L = {2 / L:.4g})")
        results.append((lr, L, where, case, X, *_gd_excess(lr, X, y, steps)))
    for lr, L, where, case, X, excess, start in results:   # divergence first: it is worse
        if not np.isfinite(excess) or excess > start:
            fail(f"γ = {lr:.4g} diverges {where}: J grew from {start:.3g} above its minimum "
                 f"to {excess:.3g} in {steps} steps.{same_rate} [{case}]")
    for lr, L, where, case, X, excess, start in results:
        if excess > LR_TOL * start:
            trace, d = float(np.trace(X.T @ X)) / len(X), X.shape[1]
            slow = (f"that is 1/trace(XᵀX/m) = 1/Σλ: always stable, but the trace adds up all "
                    f"{d} curvatures, so on a well-conditioned X with {d} features it is about "
                    f"{d} times smaller than 1/L — too slow"
                    if np.isclose(lr, 1 / trace, rtol=1e-3) else
                    "far below 1/L: too slow" if lr < 0.5 / L else
                    "so close to 2/L that the steepest direction barely settles"
                    if lr > 1.5 / L else "")
            fail(f"γ = {lr:.4g} has not converged within {steps} steps {where}: J − J* is "
                 f"still {excess / start:.2g} of its start (needs < {LR_TOL:g})"
                 + (f" — {slow}" if slow else "")
                 + f".{same_rate or ' Which curvature limits the step (lesson 01, §4)?'} "
                 f"[{case}]")
    trial.passed(f"converged within {steps} steps on {len(results)} scales of X — "
                 + "; ".join(f"γ = {lr:.3g} (1/L = {1 / L:.3g})" for lr, L, *_ in results[:4])
                 + " …")


# ------------------------------------------------------------------ task 4 (reasoning): the best step

def _bowl(case: Case) -> np.ndarray:
    """The case's curvatures, in no particular order: a drawn bowl has its smallest and
    largest curvature at positions 1 and 2, never first or last."""
    p = case.params
    if "values" in p:
        return np.array(p["values"], dtype=float)
    L, d = p["L"], p["d"]
    inner = case.rng.permutation(case.rng.uniform(L / p["kappa"], L, size=d - 2))
    return np.array([inner[0], L / p["kappa"], L, *inner[1:]])


@task("gradient_descent")
def best_step(my_best_step: Callable, seed: int = 0) -> None:
    """Lesson 01, task 4: ``my_best_step(curvatures)`` — the curvatures (eigenvalues of
    XᵀX/m) in no particular order — returns ``(gamma, rate)``: the fixed step 2/(L + μ) that
    minimises the worst per-step factor max |1 − γλ|, and that factor (L − μ)/(L + μ)."""
    fixed = [{"values": (0.5, 8.0, 2.0, 1.0)}, {"values": (2.5,)}, {"values": (3.0, 3.0, 3.0)},
             {"values": (0.74, 0.11, 1.05, 0.28, 0.52, 0.2, 0.16, 0.37, 0.14, 0.12)}]
    trial = Trial("best_step", my_best_step, seed, fixed, draws=3, draw=lambda rng: {
        "d": int(rng.integers(4, 13)), "L": float(10 ** rng.uniform(-1.5, 1.5)),
        "kappa": float(10 ** rng.uniform(0.3, 3))}, name="my_best_step")
    for case in trial:
        lams = _bowl(case)
        got = trial.call(case, lams.copy())
        gamma, rate = answers.two_numbers(got, ("gamma", "rate"), trial.name, case)
        judge(_best_step_fault(gamma, rate, lams, answers.answer_rtol(got)), case, "[{}].")
    trial.passed(f"on {len(trial)} bowls (one curvature, equal ones, κ up to 1000, in no "
                 "particular order): γ = 2/(L + μ), and the distance to θ* shrinks by "
                 "(L − μ)/(L + μ) = (κ − 1)/(κ + 1) per step")


def _best_step_fault(gamma: float, rate: float, lams: np.ndarray, rtol: float) -> str | None:
    """What is wrong with γ, else with the contraction — the first named mistake that gives
    the learner's value (and not the right one) — or None."""
    mu, L = float(lams.min()), float(lams.max())
    want_g, want_r = 2 / (L + mu), (L - mu) / (L + mu)
    first, last = float(lams[0]), float(lams[-1])
    if not same(want_g, gamma, rtol=rtol):
        why = explain(gamma, {
            "1/L empties the steepest direction in one step but leaves the flattest shrinking "
            "by only 1 − μ/L; the best fixed step balances the two ends, 1 − γμ = γL − 1":
                1 / L,
            "2/L is the edge of divergence: the steepest direction flips sign and never "
            "shrinks (|1 − 2| = 1)": 2 / L,
            "the 2 is missing: 1 − γμ = γL − 1 gives γ = 2/(L + μ)": 1 / (L + mu),
            "you took the first and the last curvature as μ and L, but they come in no "
            "particular order: use the smallest and the largest": 2 / (first + last),
            "1/μ: the steep directions would grow (|1 − L/μ| > 1)": 1 / mu,
            "that is 1/(mean curvature): the step is set by the two extreme curvatures, not "
            "their mean": 1 / float(lams.mean()),
        }, 1e-6, want_g) or ("each direction's error is multiplied by |1 − γλ| per step; "
                             "make the worst of λ = μ and λ = L as small as possible")
        return (f"γ = {gamma:.6g}, expected 2/(L + μ) = {want_g:.6g} with L = {L:.4g} and "
                f"μ = {mu:.4g}: {why}")
    if same(want_r, rate, rtol=rtol, scale=1.0):
        return None
    first, last = sorted((first, last))
    why = explain(rate, {
        "that is ρ², the factor for J − J* (a square of the distance): the distance "
        "‖θ − θ*‖ shrinks by ρ": want_r ** 2,
        "1 − μ/L = 1 − 1/κ is the rate at γ = 1/L; at γ = 2/(L + μ) both ends shrink by "
        "(L − μ)/(L + μ)": 1 - mu / L,
        "you took the first and the last curvature as μ and L: use the smallest and the "
        "largest": (last - first) / (last + first),
        "that is (L + μ)/(L − μ), upside down": (L + mu) / (L - mu) if L > mu else None,
        "that is 2μ/(L + μ), how much the flattest direction shrinks BY; the factor it is "
        "multiplied by is 1 − 2μ/(L + μ)": 2 * mu / (L + mu),
    }, 1e-6, want_r, 1.0) or ("with γ = 2/(L + μ), the flattest direction is multiplied by "
                              "1 − γμ and the steepest by γL − 1 each step: both equal "
                              "(L − μ)/(L + μ)")
    return (f"γ = {gamma:.6g} is right; the contraction {rate:.6g} is not: expected "
            f"(L − μ)/(L + μ) = {want_r:.6g} — {why}")


# ------------------------------------------------------------------ a mini-batch SGD plan

SGD_TARGET = 2e-3                       # J − J* the plan must reach
SGD_BUDGETS = ((8192, 256), (16384, 64), (20480, 20))  # (max_examples, max_steps): the
SGD_SEEDS = (0, 1, 2)                   # prompt's two, one with 20 steps; shuffles: all reach


def _sgd_budget(rng: np.random.Generator) -> dict[str, Any]:
    """Budgets the prompt never shows: a handful of steps with examples to spare (batch GD's
    regime), or a few thousand to tens of thousands of examples over 48–256 steps."""
    if rng.random() < 1 / 3:
        steps = int(rng.integers(16, 41))
        return {"max_examples": int(steps * 1024 * rng.uniform(1, 2)), "max_steps": steps}
    return {"max_examples": int(rng.integers(8192, 65537)), "max_steps": int(rng.integers(48, 257))}


@functools.lru_cache(maxsize=1)
def lesson_data() -> tuple[np.ndarray, np.ndarray, float, float, np.ndarray]:
    """The lesson's linear regression (m = 1024, d = 10, spread 3, noise 0.5): X, y, J*,
    J(0) and the curvatures (eigenvalues of XᵀX/m)."""
    from ddl_lab.ml import data, models
    ds = data.linear_regression(m=1024, d=10, noise=0.5, seed=0, spread=3)
    X64, y64 = ds.X.astype(np.float64), ds.y.astype(np.float64)
    best = np.linalg.lstsq(X64, y64, rcond=None)[0]
    curv = np.linalg.eigvalsh(X64.T @ X64 / len(y64))
    return (ds.X, ds.y, models.linreg_loss(best, X64, y64),
            models.linreg_loss(np.zeros(X64.shape[1]), X64, y64), curv)


def steps_within(m: int, batch: int, max_examples: int, max_steps: int) -> tuple[int, int]:
    """Updates a plan may take — batches of ``batch`` through shuffled epochs of ``m``, the
    last batch of an epoch smaller — and the examples they use."""
    sizes = [batch] * (m // batch) + ([m % batch] if m % batch else [])
    steps = used = 0
    while steps < max_steps:
        size = sizes[steps % len(sizes)]
        if used + size > max_examples:
            break
        steps, used = steps + 1, used + size
    return steps, used


def train(batch: int, lr: float, steps: int, seed: int) -> float:
    """J − J* after ``steps`` updates of the lesson's mini-batch SGD (its ``record_run``)."""
    from ddl_lab.gradient_descent.experiments import record_run
    from ddl_lab.ml import models
    X, y, J_star, _, _ = lesson_data()
    if steps == 0:
        return lesson_data()[3] - J_star
    per_epoch = -(-len(y) // batch)
    _, hist = record_run(X, y, models.linreg_grad, models.linreg_loss, lr,
                         epochs=-(-steps // per_epoch), batch_size=batch, seed=seed)
    return float(hist.loss[steps - 1]) - J_star


@task("gradient_descent")
def sgd_plan(my_sgd_plan: Callable, seed: int = 0) -> None:
    """Lesson 01, task 5: ``my_sgd_plan(max_examples, max_steps)`` returns ``{"batch_size",
    "lr"}`` with which the lesson's mini-batch SGD on its linear regression (m = 1024),
    trained for real for as many steps as both budgets allow, ends with J − J* ≤ 0.002 on
    each of three shuffles — for the prompt's budgets (8192, 256) and (16384, 64), 20 steps
    of 20,480 examples, and three budgets drawn per call, so that the plan must be computed
    from its budgets (issue 26)."""
    _, y, J_star, J_zero, _ = lesson_data()
    m, start, report, plans = len(y), J_zero - J_star, [], []
    trial = Trial("sgd_plan", my_sgd_plan, seed, table("max_examples max_steps", *SGD_BUDGETS),
                  draws=3, draw=_sgd_budget, name="my_sgd_plan")
    name = trial.name
    for case in trial:                      # every plan first: a table fails before training
        budgets = (case.params["max_examples"], case.params["max_steps"])
        where = f"max_examples = {budgets[0]:,}, max_steps = {budgets[1]}"
        plans.append(_valid_plan(name, answers.plan_call(my_sgd_plan, budgets, name, where), m,
                                 where))
    for case, (batch, lr) in zip(trial, plans):
        max_examples, max_steps = case.params["max_examples"], case.params["max_steps"]
        steps, used = steps_within(m, batch, max_examples, max_steps)
        with np.errstate(all="ignore"):
            gaps = [train(batch, lr, steps, s + 10 * seed) for s in SGD_SEEDS]
        worst = max(gaps, key=lambda g: g if math.isfinite(g) else math.inf)
        if not worst <= SGD_TARGET:
            fail(f"with max_examples = {max_examples:,}, max_steps = {max_steps}, {name} chose "
                 f"batches of {batch} at γ = {lr:g}: {steps} steps, {used:,} examples; J − J* "
                 f"ended at {worst:.3g} on the worst of shuffles "
                 f"{[s + 10 * seed for s in SGD_SEEDS]} (from {start:.3g} at θ = 0; target "
                 f"≤ {SGD_TARGET:g}) — {_plan_fault(batch, lr, steps, used, worst, max_examples)}."
                 f"{answers.same_for_all(plans)} [{case}]")
        report.append(f"({max_examples:,}, {max_steps}): batch {batch}, γ = {lr:.3g} → "
                      f"{steps} steps, J − J* ≤ {max(gaps):.2g}")
    trial.passed(f"the lesson's mini-batch SGD, trained for real on 3 shuffles for each of "
                 f"{len(trial)} budgets (3 drawn) — " + "; ".join(report))


def _valid_plan(name: str, plan: Any, m: int, where: str) -> tuple[int, float]:
    judge(answers.plan(plan, name, {"batch_size": "", "lr": ""}, f" ({where})"))
    b, lr = answers.whole(plan["batch_size"]), answers.scalar(plan["lr"])
    if b is None or not 1 <= b <= m:
        fail(f"batch_size = {plan['batch_size']!r} ({where}): a whole number of examples from "
             f"1 to m = {m:,}.")
    if lr is None or not math.isfinite(lr) or lr <= 0:
        fail(f"lr = {plan['lr']!r} ({where}): a learning rate is a number > 0.")
    return b, lr


def _plan_fault(batch: int, lr: float, steps: int, used: int, gap: float, max_examples: int) -> str:
    """Why a plan missed the target: divergence, too few or too slow steps, or noise."""
    _, _, J_star, J_zero, curv = lesson_data()
    mu, L = float(curv[0]), float(curv[-1])
    if not math.isfinite(gap) or gap > J_zero - J_star:
        return (f"it diverged: exact gradients need γ < 2/L = {2 / L:.3g}, and noisy small "
                "batches want less")
    X, y = (a.astype(np.float64) for a in lesson_data()[:2])
    exact = _gd_excess(lr, X, y, steps)[0]      # the plan without the batches' noise
    if exact > SGD_TARGET:
        if used < max_examples / 4:
            return (f"batches of {batch} hit the step limit after {used:,} of the "
                    f"{max_examples:,} examples you may use: a larger batch buys accuracy "
                    "per step at no cost in steps")
        if steps < 40:
            return (f"only {steps} steps: even exact gradients at this γ would stop at "
                    f"J − J* = {exact:.3g}. Batches this large spend the example budget in "
                    "few steps — smaller batches buy more steps")
        return (f"too slow: even exact gradients at γ = {lr:g} would stop at J − J* = "
                f"{exact:.3g}, the flattest direction shrinking by |1 − γμ| = "
                f"{abs(1 - lr * mu):.3f} per step (μ = {mu:.3g}): a larger γ")
    reach = f"{exact:.2g}" if exact > 1e-9 else "≈ 0"
    return (f"noise: exact gradients at this γ would reach {reach}; the rest is the noise "
            f"of batches of {batch}, which grows with γ/batch — a larger batch or a smaller γ")


# ------------------------------------------------------------------ task 6: AdamW by hand

_ADAM_FIXED = table(  # cases the prompt never shows: each separates some of the named mistakes
    "shapes lr betas eps weight_decay steps dtype gscale",
    ([[4], [3, 2]], 0.05, [0.9, 0.999], 1e-8, 0.0, 4, "float64", 1.0),
    ([[5]], 0.1, [0.8, 0.99], 1e-8, 0.5, 5, "float64", 1.0),
    ([[2, 3], [3]], 0.01, [0.9, 0.999], 1e-2, 0.1, 6, "float32", 1e-2),
    ([[6]], 0.003, [0.5, 0.9], 1e-6, 0.02, 3, "float32", 10.0))
_ADAM_TOL = {"float64": 1e-9, "float32": 4e-6}   # × (|θ| + lr·steps): rounding, not a mistake


def _adam_inputs(case: Case) -> tuple[list[np.ndarray], list[list[np.ndarray]]]:
    """The starting parameters and the gradients of every step, in the case's dtype; the
    first coordinate's gradient is 0 at the first step (0/(0 + ε) must stay 0)."""
    p, rng = case.params, case.rng
    params = [(rng.normal(size=s) * 2).astype(p["dtype"]) for s in p["shapes"]]
    grads = [[(rng.normal(size=s) * p["gscale"]).astype(p["dtype"]) for s in p["shapes"]]
             for _ in range(p["steps"])]
    grads[0][0].reshape(-1)[0] = 0.0
    return params, grads


def _torch_adamw(params: list[np.ndarray], grads: list[list[np.ndarray]], hp: dict
                 ) -> list[list[np.ndarray]]:
    """The truth: ``torch.optim.AdamW`` step by step, in the case's dtype."""
    import torch
    ps = [torch.tensor(a).requires_grad_(True) for a in params]
    opt = torch.optim.AdamW(ps, lr=hp["lr"], betas=tuple(hp["betas"]), eps=hp["eps"],
                            weight_decay=hp["weight_decay"], foreach=False)
    out = []
    for gs in grads:
        for p, g in zip(ps, gs):
            p.grad = torch.tensor(g)
        opt.step()
        out.append([p.detach().numpy().astype(np.float64) for p in ps])
    return out


def _adam_mistake(params: list[np.ndarray], grads: list[list[np.ndarray]], hp: dict,
                  mistake: str) -> list[list[np.ndarray]]:
    """In float64, the parameters after every step of AdamW as code making ``mistake``
    computes them (the diagnosis's catalogue; lesson 01 §9 has the right rule)."""
    (b1, b2), lr, eps, wd = hp["betas"], hp["lr"], hp["eps"], hp["weight_decay"]
    theta = [a.astype(np.float64) for a in params]
    m, v, out = [np.zeros_like(a) for a in theta], [np.zeros_like(a) for a in theta], []
    with np.errstate(all="ignore"):
        for k, gs in enumerate(grads):
            t = {"t_plus": k + 2, "t_zero": k, "first_bias": 1, "no_state": 1}.get(mistake, k + 1)
            if mistake == "no_state":
                m, v = [np.zeros_like(a) for a in theta], [np.zeros_like(a) for a in theta]
            new = []
            for i, (th, g) in enumerate(zip(theta, gs)):
                g = g + wd * th if mistake == "l2" else g.astype(np.float64)
                m[i] = b1 * m[i] + (1 - b1) * g
                v[i] = b2 * v[i] + (1 - b2) * g * g
                mh, vh = (m[i], v[i]) if mistake == "no_bias" else \
                    (m[i] / (1 - b1 ** t), v[i] / (1 - b2 ** t))
                step = mh / (np.sqrt(vh + eps) if mistake == "eps_inside" else np.sqrt(vh) + eps)
                decay = {"l2": 1.0, "no_lr": 1 - wd}.get(mistake, 1 - lr * wd)
                th = th - lr * step if mistake == "after" else th * decay - lr * step
                new.append(th * (1 - lr * wd) if mistake == "after" else th)
            theta = new
            out.append(theta)
    return out


_ADAM_MISTAKES = {
    "no_bias": "no bias correction: m and v start at 0, so in the first steps they are far "
               "too small — divide them by 1 − β₁ᵗ and 1 − β₂ᵗ",
    "l2": "that is Adam with an L2 penalty, not AdamW: the weight decay was added to the "
          "gradient (g + λθ), so it went through the moments and was divided by √v̂. AdamW "
          "decouples it: θ shrinks by lr·λ·θ outside the moments",
    "after": "the weight decay was applied after the Adam update, to the new θ; AdamW shrinks "
             "the parameters the step started from, θ_{t−1}, by lr·λ",
    "no_lr": "the decay was scaled by λ alone, θ·(1 − λ): torch's AdamW multiplies θ by "
             "1 − lr·λ",
    "eps_inside": "ε was added inside the square root, √(v̂ + ε); AdamW adds it to √v̂",
    "t_plus": "the step count is off by one: your first step used t = 2 in the bias "
              "correction; t is 1 at the first step",
    "t_zero": "the step count starts at 0: at the first step 1 − βᵗ = 0 and the bias "
              "correction divides by zero; t is 1 at the first step",
    "first_bias": "the bias correction of the first step was used at every step (t stuck "
                  "at 1): count the steps in your state",
    "no_state": "every step behaved like the first: the moments were not kept between calls "
                "— keep m, v and the step count in `state`, the dict handed back to you at "
                "every step",
}


_STATE_ELSEWHERE = ("earlier runs went further — does your function keep state outside `state` "
                    "(a global)? Each run hands you a fresh, empty dict")


_TORCH_ADAM = ("adam.py", "adamw.py", "_functional.py")    # torch.optim's Adam(W) code


def _adam_touches_optim() -> Callable[[], list[str]]:
    """A profile hook noting every call into torch.optim's Adam and AdamW (not its
    ``Optimizer`` base class, which a hand-written optimizer may subclass); returns
    ``stop()``, which removes it and gives the functions called."""
    import torch.optim
    where, seen, before = os.path.dirname(torch.optim.__file__) + os.sep, [], sys.getprofile()
    adam = tuple(where + f for f in _TORCH_ADAM)

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename in adam and len(seen) < 5:
            seen.append(f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}")
    sys.setprofile(hook)

    def stop() -> list[str]:
        sys.setprofile(before)
        return seen
    return stop


def _adam_run(fn: Callable, name: str, params: list[np.ndarray], grads: list[list[np.ndarray]],
              hp: dict, later: bool) -> tuple[list[list[np.ndarray]], str | None]:
    """Where the learner's code runs (``run_beside``): its steps from a fresh ``state`` on
    torch tensors of the case's dtype — the parameters after each (float64), and the fault
    found on the way (torch.optim's code run, gradients changed, nothing returned; a crash at
    the first step of a ``later`` run, as state kept outside ``state`` gives)."""
    import torch
    ps, state, out = [torch.tensor(a) for a in params], {}, []
    args = (hp["lr"], tuple(hp["betas"]), hp["eps"], hp["weight_decay"])
    for k, gs in enumerate(grads):
        gt = [torch.tensor(g) for g in gs]
        inputs = Snapshot(**{f"grads[{i}]": g for i, g in enumerate(gt)})
        before = [p.clone() for p in ps]
        stop = _adam_touches_optim()
        try:
            got = call_local(fn, ps, gt, state, *args)
        except CheckFailed as e:
            if k or not later:
                raise
            return out, f"{e} — {_STATE_ELSEWHERE}"
        finally:
            touched = stop()
        if touched:
            return out, (f"{name} ran torch.optim's Adam code ({', '.join(touched)}): the task is "
                         "to write the AdamW step yourself, so check.adamw_step does not "
                         "accept torch.optim.AdamW or Adam doing it.")
        if fault := inputs.changed(name):
            return out, fault.replace("compute into a new array", "torch's AdamW leaves p.grad "
                                      "as it was; compute into new tensors").replace(
                                          ".copy()", ".clone()")
        if got is None and all(torch.equal(a, b) for a, b in zip(ps, before)):
            return out, (f"{name} returned None and left the parameters as they were: return "
                         "the list of updated parameters (or update the tensors in place)")
        got = ps if got is None else got
        arrays = [as_array(g) for g in got] if isinstance(got, (list, tuple)) else None
        if arrays is None or len(arrays) != len(ps) or any(
                a is None or a.shape != tuple(p.shape) for a, p in zip(arrays, ps)):
            return out, (f"{name} returned {describe_value(got)} at step {k + 1}; expected a "
                         f"list of {len(ps)} tensors shaped like the parameters "
                         f"{[tuple(p.shape) for p in ps]}")
        out.append([a.astype(np.float64) for a in arrays])
        ps = [torch.tensor(a, dtype=p.dtype) for a, p in zip(arrays, ps)]
    return out, None


def _adam_fault(got: list[list[np.ndarray]], params: list[np.ndarray],
                grads: list[list[np.ndarray]], hp: dict, case: Case, name: str) -> str | None:
    """The first step where the learner's parameters leave torch's, worded; or None."""
    want = _torch_adamw(params, grads, hp)
    tol = _ADAM_TOL[hp["dtype"]]
    for k, (g_k, w_k) in enumerate(zip(got, want)):
        for i, (g, w) in enumerate(zip(g_k, w_k)):
            bad = ~(np.abs(g - w) <= tol * (np.abs(w) + hp["lr"] * (k + 1)))
            if not bad.any():
                continue
            j = int(np.flatnonzero(bad.reshape(-1))[0])
            a, b = float(g.reshape(-1)[j]), float(w.reshape(-1)[j])
            digits = next((d for d in range(8, 18) if f"{a:.{d}g}" != f"{b:.{d}g}"), 17)
            what = (f"after step {k + 1} of {len(want)}, parameter {i} element {j} is "
                    f"{a:.{digits}g}; torch.optim.AdamW gives {b:.{digits}g}")
            return f"{name}: {what} — {_adam_why(got[:k + 1], params, grads, hp, case)}"
    return None


def _adam_why(got: list[list[np.ndarray]], params: list[np.ndarray],
              grads: list[list[np.ndarray]], hp: dict, case: Case) -> str:
    """The named mistake whose steps give the learner's (up to the first wrong one)."""
    tol = _ADAM_TOL[hp["dtype"]]

    def near(a: list[list[np.ndarray]], b: list[list[np.ndarray]], rtol: float) -> bool:
        return all(np.allclose(x, y, rtol=rtol, atol=rtol * hp["lr"], equal_nan=True)
                   for a_k, b_k in zip(a, b) for x, y in zip(a_k, b_k))
    right = _adam_mistake(params, grads, hp, "")[:len(got)]
    for mistake, message in _ADAM_MISTAKES.items():      # one that differs from the right one
        theirs = _adam_mistake(params, grads, hp, mistake)[:len(got)]
        if near(got, theirs, 100 * tol) and not near(theirs, right, tol):
            return message
    if not all(np.isfinite(g).all() for g in got[-1]):
        return _ADAM_MISTAKES["t_zero"].replace("the step count starts at 0", "nan or inf "
                                                "appeared: does the step count start at 0?")
    if len(got) == 1 and case.index > 0:
        return f"the first step of this run is already wrong: {_STATE_ELSEWHERE}"
    return ("compare each line of your step with lesson 01 §9: the decay of θ, the two moments, "
            "their bias corrections, and ε added to √v̂")


@task("gradient_descent", refuses=("ddl_lab.ml", "AdamW"))
def adamw_step(my_adamw_step: Callable, seed: int = 0) -> None:
    """Lesson 01, task 6: ``my_adamw_step(params, grads, state, lr, betas, eps,
    weight_decay)`` — ``params`` and ``grads`` lists of torch tensors, ``state`` a dict the
    caller hands back at every step (empty at the first) — returns the parameters after one
    step of ``torch.optim.AdamW``, step for step, leaving ``grads`` unchanged."""
    trial = Trial("adamw_step", my_adamw_step, seed, _ADAM_FIXED, draws=4, draw=lambda rng: {
        "shapes": [[int(s) for s in rng.integers(1, 5, size=int(rng.integers(1, 3)))]
                   for _ in range(int(rng.integers(1, 4)))],
        "lr": float(10 ** rng.uniform(-3, -1)),
        "betas": [float(rng.uniform(0.5, 0.95)), float(1 - 10 ** rng.uniform(-4, -1))],
        "eps": float(10.0 ** rng.integers(-8, -1)),
        "weight_decay": float(rng.choice([0.0, 10 ** rng.uniform(-2, 0)])),
        "steps": int(rng.integers(3, 8)), "dtype": str(rng.choice(["float64", "float32"])),
        "gscale": float(10 ** rng.uniform(-2, 1))}, name="my_adamw_step")
    for case in trial:
        params, grads = _adam_inputs(case)
        got, fault = run_beside(_adam_run, trial.fn, trial.name, params, grads, case.params,
                                case.index > 0)
        trial.judge(fault or _adam_fault(got, params, grads, case.params, case, trial.name), case)
    trial.passed(f"equal to torch.optim.AdamW step for step on {len(trial)} runs of 3 to 7 "
                 "steps (one to three tensors, float64 and float32, weight decay 0 and > 0, "
                 "ε from 10⁻⁸ to 10⁻²)")
