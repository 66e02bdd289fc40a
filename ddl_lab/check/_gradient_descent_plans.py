"""Lesson 01's reasoning and design checks (``check/gradient_descent.py`` exports them): the
best fixed step of a quadratic bowl and its contraction, and a mini-batch SGD plan that meets
a target loss within a budget of examples and of steps, trained for real on the lesson's data.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from . import _answers as answers
from ._core import call_local, fail, passed, task
from ._diagnose import Case, Cases, same
from ._parallel_models_plans import answer_rtol, two_numbers

# ------------------------------------------------------------------ the best fixed step


def _bowl(case: Case) -> np.ndarray:
    """The case's curvatures, in no particular order: a drawn bowl has its smallest and
    largest curvature at positions 1 and 2, never first or last."""
    p = case.params
    if "values" in p:
        return np.array(p["values"], dtype=float)
    L, d = p["L"], p["d"]
    inner = case.rng.permutation(case.rng.uniform(L / p["kappa"], L, size=d - 2))
    return np.array([inner[0], L / p["kappa"], L, *inner[1:]])


def _bowl_case(rng: np.random.Generator) -> dict[str, Any]:
    return {"d": int(rng.integers(4, 13)), "L": float(10 ** rng.uniform(-1.5, 1.5)),
            "kappa": float(10 ** rng.uniform(0.3, 3))}


@task("gradient_descent")
def best_step(my_best_step: Callable, seed: int = 0) -> None:
    """Lesson 01, task 5: ``my_best_step(curvatures)`` — the curvatures (eigenvalues of
    XᵀX/m) in no particular order — returns ``(gamma, rate)``: the fixed step 2/(L + μ) that
    minimises the worst per-step factor max |1 − γλ|, and that factor (L − μ)/(L + μ)."""
    fn = my_best_step
    name = getattr(fn, "__name__", "my_best_step")
    fixed = [{"values": (0.5, 8.0, 2.0, 1.0)}, {"values": (2.5,)}, {"values": (3.0, 3.0, 3.0)},
             {"values": (0.74, 0.11, 1.05, 0.28, 0.52, 0.2, 0.16, 0.37, 0.14, 0.12)}]
    cases = Cases("best_step", seed, fixed, draws=3, draw=_bowl_case)
    for case in cases:
        lams = _bowl(case)
        got = call_local(fn, lams.copy())
        gamma, rate = two_numbers(got, ("gamma", "rate"), name, case)
        rtol = answer_rtol(got)
        mu, L = float(lams.min()), float(lams.max())
        want_g, want_r = 2 / (L + mu), (L - mu) / (L + mu)
        if not same(want_g, gamma, rtol=rtol):
            fail(f"γ = {gamma:.6g}, expected 2/(L + μ) = {want_g:.6g} with L = {L:.4g} and "
                 f"μ = {mu:.4g}: {_gamma_fault(gamma, lams)} [{case}].")
        if not same(want_r, rate, rtol=rtol, scale=1.0):
            fail(f"γ = {gamma:.6g} is right; the contraction {rate:.6g} is not: expected "
                 f"(L − μ)/(L + μ) = {want_r:.6g} — {_rate_fault(rate, lams)} [{case}].")
    passed("best_step", f"on {len(cases)} bowls (one curvature, equal ones, κ up to 1000, in no "
           "particular order): γ = 2/(L + μ), and the distance to θ* shrinks by "
           "(L − μ)/(L + μ) = (κ − 1)/(κ + 1) per step")


def _gamma_fault(gamma: float, lams: np.ndarray) -> str:
    mu, L = float(lams.min()), float(lams.max())
    first, last = float(lams[0]), float(lams[-1])
    named = {
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
    }
    return next((why for why, v in named.items() if not same(v, 2 / (L + mu), rtol=1e-6)
                 and same(v, gamma, rtol=1e-6)),
                "each direction's error is multiplied by |1 − γλ| per step; make the worst "
                "of λ = μ and λ = L as small as possible")


def _rate_fault(rate: float, lams: np.ndarray) -> str:
    mu, L = float(lams.min()), float(lams.max())
    right = (L - mu) / (L + mu)
    first, last = sorted((float(lams[0]), float(lams[-1])))
    named = {
        "that is ρ², the factor for J − J* (a square of the distance): the distance "
        "‖θ − θ*‖ shrinks by ρ": right ** 2,
        "1 − μ/L = 1 − 1/κ is the rate at γ = 1/L; at γ = 2/(L + μ) both ends shrink by "
        "(L − μ)/(L + μ)": 1 - mu / L,
        "you took the first and the last curvature as μ and L: use the smallest and the "
        "largest": (last - first) / (last + first),
        "that is (L + μ)/(L − μ), upside down": (L + mu) / (L - mu) if L > mu else None,
        "that is 2μ/(L + μ), how much the flattest direction shrinks BY; the factor it is "
        "multiplied by is 1 − 2μ/(L + μ)": 2 * mu / (L + mu),
    }
    return next((why for why, v in named.items() if v is not None
                 and not same(v, right, rtol=1e-6, scale=1.0)
                 and same(v, rate, rtol=1e-6, scale=1.0)),
                "with γ = 2/(L + μ), the flattest direction is multiplied by 1 − γμ and the "
                "steepest by γL − 1 each step: both equal (L − μ)/(L + μ)")


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


def _exact_gradients(lr: float, steps: int) -> float:
    """J − J* after ``steps`` batch-GD steps at ``lr``: the plan without the batches' noise."""
    from ddl_lab.ml import models
    X, y, J_star, _, _ = lesson_data()
    X64, y64 = X.astype(np.float64), y.astype(np.float64)
    theta = np.zeros(X.shape[1])
    with np.errstate(all="ignore"):
        for _ in range(steps):
            theta = theta - lr * models.linreg_grad(theta, X64, y64)
        return float(models.linreg_loss(theta, X64, y64)) - J_star


@task("gradient_descent")
def sgd_plan(my_sgd_plan: Callable, seed: int = 0) -> None:
    """Lesson 01, task 6: ``my_sgd_plan(max_examples, max_steps)`` returns ``{"batch_size",
    "lr"}`` with which the lesson's mini-batch SGD on its linear regression (m = 1024),
    trained for real for as many steps as both budgets allow, ends with J − J* ≤ 0.002 on
    each of three shuffles — for the prompt's budgets (8192, 256) and (16384, 64), 20 steps
    of 20,480 examples, and three budgets drawn per call, so that the plan must be computed
    from its budgets (issue 26)."""
    fn = my_sgd_plan
    name = getattr(fn, "__name__", "my_sgd_plan")
    _, y, J_star, J_zero, _ = lesson_data()
    m, start, report = len(y), J_zero - J_star, []
    fixed = [{"max_examples": e, "max_steps": s} for e, s in SGD_BUDGETS]
    cases = list(Cases("sgd_plan", seed, fixed, draws=3, draw=_sgd_budget))
    plans = []
    for case in cases:                      # every plan first: a table fails before training
        where = f"max_examples = {case.params['max_examples']:,}, max_steps = " \
                f"{case.params['max_steps']}"
        plans.append(_valid_plan(name, answers.plan_call(
            fn, (case.params["max_examples"], case.params["max_steps"]), name, where), m, where))
    for case, (batch, lr) in zip(cases, plans):
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
                 f"≤ {SGD_TARGET:g}) — "
                 f"{_plan_fault(batch, lr, steps, used, worst, max_examples)}."
                 f"{answers.same_for_all(plans)} [{case}]")
        report.append(f"({max_examples:,}, {max_steps}): batch {batch}, γ = {lr:.3g} → "
                      f"{steps} steps, J − J* ≤ {max(gaps):.2g}")
    passed("sgd_plan", f"the lesson's mini-batch SGD, trained for real on 3 shuffles for each "
           f"of {len(cases)} budgets (3 drawn) — " + "; ".join(report))


def _valid_plan(name: str, plan: Any, m: int, where: str) -> tuple[int, float]:
    if problem := answers.plan(plan, name, {"batch_size": "", "lr": ""}, f" ({where})"):
        fail(problem)
    b, lr = answers.whole(plan["batch_size"]), answers.scalar(plan["lr"])
    if b is None or not 1 <= b <= m:
        fail(f"batch_size = {plan['batch_size']!r} ({where}): a whole number of examples from "
             f"1 to m = {m:,}.")
    if lr is None or not math.isfinite(lr) or lr <= 0:
        fail(f"lr = {plan['lr']!r} ({where}): a learning rate is a number > 0.")
    return b, lr


def _plan_fault(batch: int, lr: float, steps: int, used: int, gap: float,
                max_examples: int) -> str:
    """Why a plan missed the target: divergence, too few or too slow steps, or noise."""
    _, _, J_star, J_zero, curv = lesson_data()
    mu, L = float(curv[0]), float(curv[-1])
    if not math.isfinite(gap) or gap > J_zero - J_star:
        return (f"it diverged: exact gradients need γ < 2/L = {2 / L:.3g}, and noisy small "
                "batches want less")
    exact = _exact_gradients(lr, steps)
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
