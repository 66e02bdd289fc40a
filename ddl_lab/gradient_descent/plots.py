"""Lesson 01's pictures: paths of θ on the contours of J, the learning rate's regimes, the
cost of a full gradient, batch sizes, Adagrad on sparse features, non-convex fits, and
Adam's moments.

``plot_x(data, ax=None) -> Axes`` draws one panel; ``figure_x(data) -> Figure`` several.
"""
from __future__ import annotations

from typing import Callable

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ddl_lab.gradient_descent.experiments import gd_path, lr_regime
from ddl_lab.ml.models import linreg_grad, linreg_loss, wave_loss
from ddl_lab.ml.optim import lipschitz

__all__ = ["plot_paths", "figure_learning_rate", "plot_gradient_cost", "plot_batch_sizes",
           "figure_adagrad", "plot_wave_fits", "figure_adam"]


def plot_paths(loss: Callable, X: np.ndarray, y: np.ndarray, paths: dict[str, np.ndarray],
               extent: tuple[float, float, float, float], ax: Axes | None = None,
               levels: int = 30, log_levels: bool = True) -> Axes:
    """Contours of J(θ₁, θ₂) over ``extent`` (x0, x1, y0, y1) and each path of θ on them."""
    ax = ax or plt.gca()
    a, b = np.meshgrid(np.linspace(extent[0], extent[1], 120),
                       np.linspace(extent[2], extent[3], 120))
    Z = np.array([[loss(np.array([u, v]), X, y) for u, v in zip(ru, rv)]
                  for ru, rv in zip(a, b)])
    lv = (np.geomspace(Z.min() + 1e-3, Z.max(), levels) if log_levels
          else np.linspace(Z.min(), Z.max(), levels))
    ax.contourf(a, b, Z, levels=lv, cmap="viridis", alpha=0.85)
    ax.contour(a, b, Z, levels=lv, colors="white", linewidths=0.3, alpha=0.5)
    for (label, path), color in zip(paths.items(), ["#ff7f0e", "#d62728", "#e377c2", "w"]):
        p = np.asarray(path)
        ax.plot(p[:, 0], p[:, 1], "-o", ms=2.5, lw=1.5, color=color, label=label)
        ax.plot(*p[0], "s", ms=8, color=color, mec="k")
        ax.plot(*p[-1], "*", ms=14, color=color, mec="k")
    ax.set_xlim(extent[:2])
    ax.set_ylim(extent[2:])
    ax.set_xlabel("θ₁")
    ax.set_ylabel("θ₂")
    ax.legend(loc="upper right", fontsize=8)
    return ax


def figure_learning_rate(X: np.ndarray, y: np.ndarray, theta0: np.ndarray, lr: float,
                         extent: tuple[float, float, float, float], steps: int = 25) -> Figure:
    """Lesson 01's learning-rate picture: batch GD's path for ``lr`` on the contours of a
    2-parameter J (left), and J − J* per step beside a slow, a good and a diverging rate."""
    L = lipschitz(X)
    j_star = linreg_loss(np.linalg.lstsq(X, y, rcond=None)[0], X, y)
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 4.6))
    path = gd_path(theta0, X, y, linreg_grad, lr, steps)
    plot_paths(linreg_loss, X, y, {f"γ = {lr:.3g}": path}, extent, a)
    a.set_title(f"γ = {lr:.3g}: {lr_regime(lr, L)}")
    excess = lambda p: [linreg_loss(t, X, y) - j_star for t in p]      # noqa: E731
    for f, name in ((0.05, "slow"), (1.0, "good"), (2.1, "diverges")):
        ref = gd_path(theta0, X, y, linreg_grad, f / L, steps)
        b.semilogy(excess(ref), "--", alpha=0.6, label=f"γ = {f:g}/L ({name})")
    b.semilogy(excess(path), "k-o", ms=3, lw=2, label=f"γ = {lr:.3g} = {lr * L:.2g}/L")
    b.set_ylim(1e-8, 1e3)
    b.set_xlabel("step")
    b.set_ylabel("J(θ) − J*")
    b.set_title(f"L = {L:.3g}: converges for γ < 2/L = {2 / L:.3g}")
    b.legend(fontsize=8, loc="lower left")
    b.grid(True, alpha=0.3)
    return fig


def plot_gradient_cost(cost: dict[str, np.ndarray], ax: Axes | None = None) -> Axes:
    """Log-log: seconds for one full gradient vs m, beside one example's gradient."""
    ax = ax or plt.gca()
    m = cost["m"]
    ax.loglog(m, cost["full"] * 1e3, "o-", label="full gradient (batch GD, 1 update)")
    ax.loglog(m, cost["one"] * 1e3, "s-", label="one example (SGD, 1 update)")
    k = len(m) // 2                                    # the ∝ m guide through a middle point
    ax.loglog(m, cost["full"][k] * 1e3 * m / m[k], "k:", lw=1, label="∝ m")
    ax.set_xlabel("training examples m")
    ax.set_ylabel("milliseconds per gradient")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return ax


def plot_batch_sizes(sweep: dict[str, np.ndarray], selected: int | None = None,
                     ax: Axes | None = None) -> Axes:
    """Seconds per epoch and seconds to reach the target loss, against the batch size."""
    ax = ax or plt.gca()
    b = sweep["size"]
    ax.loglog(b, sweep["epoch_s"] * 1e3, "o-", label="one epoch")
    ok = np.isfinite(sweep["to_target_s"])
    ax.loglog(b[ok], sweep["to_target_s"][ok] * 1e3, "s-", label="to reach the target loss"
              + ("" if ok.all() else " (no point: not reached)"))
    ax.axvspan(32, 256, color="g", alpha=0.08, label="rule of thumb 32–256")
    if selected is not None:
        ax.axvline(selected, color="k", lw=1, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("batch size")
    ax.set_ylabel("milliseconds (measured)")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    return ax


def figure_adagrad(results: dict[str, dict], counts: np.ndarray, theta_star: np.ndarray
                   ) -> Figure:
    """Three panels: test loss per epoch; |θ_j − θ*_j| by how often feature j occurs;
    Adagrad's per-feature step γ/√G_j against the feature count (SGD: one rate for all)."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for name, r in results.items():
        axes[0].plot(r["test_loss"], "o-", label=f"{name} (γ={r['lr']:g})")
    axes[0].set_xlabel("epoch")
    axes[0].set_ylabel("test loss")
    axes[0].legend(fontsize=8)
    edges = [1, 10, 30, 100, 300, 1000, np.inf]
    which = np.digitize(counts, edges)
    labels = [f"{int(lo)}–{int(hi) - 1}" if np.isfinite(hi) else f"≥{int(lo)}"
              for lo, hi in zip(edges[:-1], edges[1:])]
    used = [k for k in range(1, len(edges)) if (which == k).any()]
    width = 0.4
    for i, (name, r) in enumerate(results.items()):
        err = np.abs(r["theta"] - theta_star)
        axes[1].bar(np.arange(len(used)) + (i - 0.5) * width,
                    [err[which == k].mean() for k in used], width, label=name)
    axes[1].set_xticks(np.arange(len(used)), [labels[k - 1] for k in used], fontsize=8)
    axes[1].set_xlabel("examples in which the feature occurs")
    axes[1].set_ylabel("mean |θ_j − θ*_j|")
    axes[1].legend(fontsize=8)
    ada, sgd_ = results["Adagrad"], results["SGD"]
    seen = ada["G"] > 0
    axes[2].loglog(counts[seen], ada["lr"] / np.sqrt(ada["G"][seen]), ".", alpha=0.5,
                   label="Adagrad: γ/√G_j, one per feature")
    axes[2].axhline(sgd_["lr"], color="C0", label=f"SGD: γ = {sgd_['lr']:g} for all")
    axes[2].set_xlabel("examples in which the feature occurs")
    axes[2].set_ylabel("step size at the end")
    axes[2].legend(fontsize=8)
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig


def plot_wave_fits(ds, thetas: dict[str, np.ndarray], ax: Axes | None = None) -> Axes:
    """The data of ``data.wave`` and the curve h_θ(x) = θ₂ sin(θ₁ x) of each θ."""
    ax = ax or plt.gca()
    ax.plot(ds.X[:, 0], ds.y, ".", color="0.6", ms=4, label="data")
    x = np.linspace(ds.X.min(), ds.X.max(), 300)
    for (label, th), color in zip(thetas.items(), ["#ff7f0e", "#d62728"]):
        ax.plot(x, th[1] * np.sin(th[0] * x), color=color, lw=2,
                label=f"{label}: J = {wave_loss(th, ds.X, ds.y):.3f}")
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.legend(fontsize=8)
    return ax


def figure_adam(curves: dict[str, list], j_star: float, trace: dict[str, np.ndarray],
                scales: np.ndarray, coord: int = 0, first: int = 60) -> Figure:
    """Three panels (lesson 01 §9): J − J* per update for each rule in ``curves``; one
    coordinate's mini-batch gradient, its moment m and the bias-corrected m̂ over the
    ``first`` updates; each coordinate's √v̂ (mean of the last third) against its feature's
    scale."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 3.6))
    for name, loss in curves.items():
        axes[0].semilogy(np.maximum(np.asarray(loss) - j_star, 1e-12), label=name, lw=1)
    axes[0].set_xlabel("update")
    axes[0].set_ylabel("J − J*")
    axes[0].legend(fontsize=8)
    t = np.arange(1, first + 1)
    axes[1].plot(t, trace["g"][:first], ".", color="0.6", label="mini-batch gradient g")
    axes[1].plot(t, trace["m"][:first], label="first moment m (starts at 0)")
    axes[1].plot(t, trace["m_hat"][:first], label="m̂ = m/(1 − β₁ᵗ)")
    axes[1].set_xlabel("update t")
    axes[1].set_ylabel(f"coordinate {coord}")
    axes[1].legend(fontsize=8)
    last = trace["sqrt_v_hat"][-max(1, len(trace["sqrt_v_hat"]) // 3):]
    axes[2].plot(scales, last.mean(axis=0), "o")
    axes[2].set_xlabel("scale of the feature (its standard deviation)")
    axes[2].set_ylabel("√v̂, last third of the run")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    return fig
