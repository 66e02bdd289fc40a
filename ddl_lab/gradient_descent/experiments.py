"""Lesson 01's experiments and pictures: the three fragments side by side, the cost of a
full gradient, learning-rate and batch-size sweeps, Adagrad on sparse features, and
non-convex paths. The optimisers themselves are in ``ddl_lab.ml.optim``.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from ddl_lab.ml.optim import (GD, Adagrad, GradFn, ReduceOnPlateau, Rule, batch_gd, lipschitz,
                    minibatch_sgd_epoch)

if TYPE_CHECKING:
    from ddl_lab.ml.training import History

__all__ = ["record_run", "time_it", "gradient_cost", "epoch_time", "gd_path", "lr_regime",
           "batch_size_sweep", "adagrad_vs_sgd", "plot_paths", "plot_learning_rate",
           "plot_gradient_cost", "plot_batch_sizes", "plot_adagrad", "plot_wave_fits"]


def record_run(X: np.ndarray, y: np.ndarray, grad: GradFn, loss: Callable, lr: float | Rule,
               epochs: int, batch_size: int, seed: int = 0,
               theta0: np.ndarray | None = None) -> tuple[np.ndarray, "History"]:
    """Mini-batch GD (batch_size=m: batch GD; 1: SGD) recording the full loss J(θ) before
    the first (``loss0``) and after every update, and the epoch ends (lesson 01's curves).
    A ``ReduceOnPlateau`` schedule observes the loss at the end of every epoch."""
    from ddl_lab.ml.training import History
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
        minibatch_sgd_epoch(theta, X, y, grad, lr, batch_size, rng)
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


# ------------------------------------------------------------- lesson 01's pictures

def plot_paths(loss: Callable, X: np.ndarray, y: np.ndarray, paths: dict[str, np.ndarray],
               extent: tuple[float, float, float, float], ax=None, levels: int = 30,
               log_levels: bool = True):
    """Contours of J(θ₁, θ₂) over ``extent`` (x0, x1, y0, y1) and each path of θ on them."""
    import matplotlib.pyplot as plt
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


def plot_learning_rate(X: np.ndarray, y: np.ndarray, theta0: np.ndarray, lr: float,
                       extent: tuple[float, float, float, float], steps: int = 25):
    """Lesson 01's learning-rate picture: batch GD's path for ``lr`` on the contours of a
    2-parameter J (left), and J − J* per step beside a slow, a good and a diverging rate."""
    import matplotlib.pyplot as plt
    from ddl_lab.ml.models import linreg_grad, linreg_loss
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


def plot_gradient_cost(cost: dict[str, np.ndarray], ax=None):
    """Log-log: seconds for one full gradient vs m, beside one example's gradient."""
    import matplotlib.pyplot as plt
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


def plot_batch_sizes(sweep: dict[str, np.ndarray], selected: int | None = None, ax=None):
    """Seconds per epoch and seconds to reach the target loss, against the batch size."""
    import matplotlib.pyplot as plt
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


def plot_adagrad(results: dict[str, dict], counts: np.ndarray, theta_star: np.ndarray,
                 axes=None):
    """Three panels: test loss per epoch; |θ_j − θ*_j| by how often feature j occurs;
    Adagrad's per-feature step γ/√G_j against the feature count (SGD: one rate for all)."""
    import matplotlib.pyplot as plt
    if axes is None:
        _, axes = plt.subplots(1, 3, figsize=(14, 3.8))
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
    return axes


def plot_wave_fits(ds, thetas: dict[str, np.ndarray], ax=None):
    """The data of ``data.wave`` and the curve h_θ(x) = θ₂ sin(θ₁ x) of each θ."""
    import matplotlib.pyplot as plt
    from ddl_lab.ml.models import wave_loss
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
