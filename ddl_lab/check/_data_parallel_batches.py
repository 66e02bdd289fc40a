"""Lesson 05's large-batch reasoning task (``check/data_parallel.py`` exports it): from real
per-example gradients, the gradient noise scale B_noise = tr(Σ)/|G|² (McCandlish et al. 2018)
and the largest batch at which doubling it still cuts the steps by a given factor.

The gradients are measured here on the course's digits MLP (torch.func, one row per
example) at several points of a real training run, on drawn subsets of examples, in float32
or float64; two small hand-made cases pin the edges (two examples; all gradients equal)."""
from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np
import torch

from ddl_lab.data_parallel.batches import one_thread

from . import _answers as answers
from ._core import call_local, fail, passed, task
from ._diagnose import Case, Cases, describe_value, returned_none

_STATES = (30, 100, 300)         # SGD steps trained before the gradients are measured
_FIXED = [{"grads": "two examples", "factor": 1.6},
          {"grads": "all equal", "factor": 1.8},
          {"grads": "digits MLP", "steps": 30, "N": 256, "dtype": "float32", "factor": 1.5},
          {"grads": "digits MLP", "steps": 300, "N": 128, "dtype": "float64", "factor": 4 / 3}]


def _draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"grads": "digits MLP", "steps": int(rng.choice(_STATES)),
            "N": int(rng.choice([128, 192, 256])), "dtype": str(rng.choice(["float32", "float64"])),
            "factor": round(float(rng.uniform(1.1, 1.9)), 3)}


@functools.lru_cache(maxsize=1)
def _snapshots() -> tuple[dict[int, torch.Tensor], torch.Tensor, torch.Tensor]:
    """The digits MLP's flat parameters after each of ``_STATES`` steps, and the data."""
    from ddl_lab.data_parallel.workloads import batch_indices, build
    from ddl_lab.ml.models import flat_params
    model, train, _, loss_fn = build("digits-mlp", 0)
    X, y = train.tensors()
    idx, states = batch_indices(len(y), 32, max(_STATES), 0, 0), {}
    for t in range(max(_STATES) + 1):
        if t in _STATES:
            states[t] = flat_params(model).clone()
        if t < max(_STATES):
            model.zero_grad()
            loss_fn(model(X[idx[t]]), y[idx[t]]).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
    return states, X, y


def _grads(case: Case) -> torch.Tensor:
    """The case's (N, d) per-example gradients."""
    p = case.params
    if p["grads"] == "two examples":
        return torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 4.0]], dtype=torch.float64)
    if p["grads"] == "all equal":
        return torch.tensor([[0.5, -1.0, 2.0, 0.25]] * 5, dtype=torch.float32)
    from ddl_lab.data_parallel.batches import per_example_grads
    from ddl_lab.data_parallel.workloads import build
    from ddl_lab.ml.models import set_flat_params
    with one_thread():
        states, X, y = _snapshots()
        model, _, _, loss_fn = build("digits-mlp", 0)
        set_flat_params(model, states[p["steps"]])
        pick = torch.as_tensor(case.rng.choice(len(y), p["N"], replace=False))
        g = per_example_grads(model, X[pick], y[pick], loss_fn)
    return g.to(getattr(torch, p["dtype"]))


def _parts(g: np.ndarray) -> tuple[float, float, float, float]:
    """(tr Σ unbiased, tr Σ with N, |ḡ|², mean |g_i|²) of an (N, d) float64 array."""
    mean = g.mean(0)
    return (float(g.var(0, ddof=1).sum()), float(g.var(0).sum()), float(mean @ mean),
            float((g * g).sum(1).mean()))


def _b_max(b_noise: float, f: float) -> float:
    """Largest B with S(B)/S(2B) ≥ f, S(B) = S_min(1 + B_noise/B): B_noise(2 − f)/(2(f − 1))."""
    return b_noise * (2 - f) / (2 * (f - 1))


def _halving(b_noise: float, B: int = 32) -> float:
    """S(B)/S(2B): what doubling a batch of B does to the steps."""
    return (1 + b_noise / B) / (1 + b_noise / (2 * B))


def _ratio(a: float, b: float) -> float:
    return a / b if b else (0.0 if a == 0 else float("inf"))


def _want(g: np.ndarray, f: float) -> tuple[float, float]:
    tr, _, m2, _ = _parts(g)
    b = _ratio(tr, m2 - tr / len(g))
    return b, _b_max(b, f)


def _mistakes(g: np.ndarray, f: float) -> dict[str, tuple[float | None, float | None]]:
    """Named wrong answers: (B_noise, B_max) they give (None: any value)."""
    tr, tr0, m2, sq = _parts(g)
    n = len(g)
    g2 = m2 - tr / n
    b = _ratio(tr, g2)
    return {
        "|ḡ|² over-estimates |G|² by tr(Σ)/N (the mean of N noisy gradients is noisier than "
        "G): take tr(Σ)/N off |ḡ|² before dividing": (_ratio(tr, m2), None),
        "tr(Σ) came from the population variance (dividing by N): the unbiased estimate "
        "divides by N − 1": (_ratio(tr0, m2 - tr0 / n), None),
        "you divided the mean squared norm E|g_i|² by |G|²: that counts |G|² itself as noise; "
        "tr(Σ) is the spread AROUND the mean (subtract ḡ first)": (_ratio(sq, g2), None),
        "|G| is not squared: B_noise = tr(Σ)/|G|², a batch size (examples), not tr(Σ)/|G|":
            (_ratio(tr, np.sqrt(max(g2, 0.0))), None),
        "you used the variance of the MEAN gradient, tr(Σ)/N: the noise scale compares ONE "
        "example's noise with the signal": (_ratio(tr / n, g2), None),
        "B_max is the critical batch B_noise itself whatever the factor: at B = B_noise "
        "doubling cuts the steps by 4/3 only; solve S(B)/S(2B) = factor for B": (b, b),
        "B_max is upside down: from (1 + B_noise/B)/(1 + B_noise/(2B)) = f, "
        "B = B_noise·(2 − f)/(2(f − 1))": (b, b * 2 * (f - 1) / (2 - f)),
        "you solved S(B) = f·S_min (B = B_noise/(f − 1)); the question is when doubling the "
        "batch, S(B)/S(2B), still gives the factor f": (b, _ratio(b, f - 1)),
    }


def _close(want: float, got: float, rtol: float) -> bool:
    return abs(got - want) <= rtol * max(abs(want), 1e-12) or got == want


def _call(fn: Callable, g: torch.Tensor, f: float, case: Case, name: str) -> tuple[float, float]:
    out = call_local(fn, g.clone(), f)
    pair = answers.pair(out)
    if pair is None:
        fail(returned_none(out, name, "(B_noise, B_max)") or
             f"{name} returned {describe_value(out)}; return two numbers, (B_noise, B_max) "
             f"({case}).")
    return pair


@task("data_parallel", refuses=("ddl_lab.data_parallel", "gradient_noise", "digits_noise"))
def noise_scale(my_noise_scale: Callable, seed: int = 0) -> None:
    """Lesson 05, task 5: ``my_noise_scale(grads, factor)`` with ``grads`` an (N, d) tensor of
    per-example gradients returns (B_noise, B_max): B_noise = tr(Σ)/|G|² with tr(Σ) the
    unbiased (N − 1) per-coordinate variance summed and |G|² = |ḡ|² − tr(Σ)/N; B_max the
    largest batch B at which doubling B still divides the steps S(B) = S_min(1 + B_noise/B)
    by at least ``factor``."""
    name = getattr(my_noise_scale, "__name__", "your function")
    cases = list(Cases("noise_scale", seed, _FIXED, draws=3, draw=_draw))
    shown = []
    for case in cases:
        g = _grads(case)
        f = case.params["factor"]
        got = _call(my_noise_scale, g, f, case, name)
        g64 = g.double().numpy()
        want = _want(g64, f)
        rtol = 2e-3 if g.dtype == torch.float32 else 1e-7
        if all(_close(w, x, rtol) for w, x in zip(want, got)):
            if case.params["grads"] == "digits MLP":
                shown.append(want[0])
            continue
        hint = next((text for text, m in _mistakes(g64, f).items()
                     if all(w is None or _close(w, x, rtol) for w, x in zip(m, got))), None)
        which = "B_noise" if not _close(want[0], got[0], rtol) else "B_max"
        fail(f"{name} returned B_noise = {got[0]:.6g}, B_max = {got[1]:.6g}; expected "
             f"{want[0]:.6g} and {want[1]:.6g} ({which} is wrong) for {len(g64)} gradients of "
             f"{g64.shape[1]:,} entries, factor {f:g}"
             + (f": {hint}." if hint else ".") + f" ({case})")
    passed("noise_scale", f"right on {len(cases)} cases (2 to 256 real per-example gradients "
           f"of the digits MLP, float32 and float64, factors 1.1 to 1.9); the digits MLP's "
           f"B_noise measured {min(shown):.0f} to {max(shown):.0f} examples on these subsets, so "
           f"doubling its batch of 32 cuts the steps S(B) = S_min(1 + B_noise/B) by only "
           f"{_halving(min(shown)):.2f}–{_halving(max(shown)):.2f}×, not 2×")
