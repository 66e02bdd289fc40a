"""Lesson 03's pictures: the loss against time, who wrote which coordinate when, stale
updates ("slow learners are fast"), and what sharing θ costs the caches.

``plot_x(data, ax=None) -> Axes`` draws one panel; ``figure_x(data) -> Figure`` several.
"""
from __future__ import annotations

import math
from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure

from ddl_lab.hogwild.engine import HogwildRun, Problem

__all__ = ["plot_loss_vs_time", "figure_writes", "plot_delays", "plot_contention"]


def plot_loss_vs_time(runs: Sequence[HogwildRun], target: float | None = None,
                      ax: Axes | None = None, title: str = "") -> Axes:
    """Lesson 03's picture: the training loss against wall time, one line per run."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.6))
    for i, r in enumerate(runs):
        ax.plot(1e3 * r.times, r.losses, color=f"C{i}", label=r.label)
        if target is not None and math.isfinite(r.time_to(target)):
            ax.plot(1e3 * r.time_to(target), target, "o", color=f"C{i}")
    if target is not None:
        ax.axhline(target, color="grey", ls=":", lw=1, label=f"target loss {target:.3f}")
    ax.set(xlabel="wall time (ms)", ylabel="training loss", title=title or runs[0].kind,
           yscale="log" if runs[0].kind == "dense" else "linear")
    ax.legend(fontsize=8)
    return ax


def figure_writes(run_: HogwildRun, problem: Problem, coords: int = 24, span_ms: float = 3.0,
                  bins: int = 120) -> Figure:
    """Lesson 03's picture: which worker wrote which coordinate when.

    Left: the ``span_ms`` of the run in which every worker wrote most (on a busy
    machine the workers take turns on the cores), on the most-used coordinates, one
    cell per time bin, coloured by the worker that wrote it (black where several
    workers wrote it in the same bin). Right: collided updates per coordinate against
    how many examples use it.
    """
    if not run_.windows:
        raise ValueError("this run was made with record=False: nothing was recorded")
    counts = problem.coordinate_counts()
    top = np.argsort(-counts, kind="stable")[:coords]
    where = {c: k for k, c in enumerate(top)}
    grid = np.zeros((len(top), bins), dtype=int)              # 0 nobody, w+1 worker w, -1 both
    begin = _busiest_span(run_.windows, span_ms / 1e3)
    edges = begin + np.linspace(0.0, span_ms / 1e3, bins + 1)
    for w, (_, t_write, rows) in enumerate(run_.windows):
        keep = (t_write >= edges[0]) & (t_write < edges[-1])
        for t, i in zip(t_write[keep], rows[keep]):
            b = min(bins - 1, int(np.searchsorted(edges, t, side="right") - 1))
            cols = problem.cols(i)
            cols = top if isinstance(cols, slice) else cols
            for c in cols:
                k = where.get(int(c))
                if k is not None:
                    grid[k, b] = w + 1 if grid[k, b] in (0, w + 1) else -1
    colors = ["black", "white"] + [f"C{w}" for w in range(run_.processes)]
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [2, 1]})
    a.imshow(grid + 1, aspect="auto", interpolation="nearest", vmin=0,
             vmax=run_.processes + 1, cmap=ListedColormap(colors),
             extent=(1e3 * begin, 1e3 * begin + span_ms, len(top) - 0.5, -0.5))
    a.set(xlabel="time since start (ms)", ylabel="coordinate (most used at the top)",
          title=f"{run_.label}: who wrote what, when")
    handles = [plt.Rectangle((0, 0), 1, 1, color=f"C{w}") for w in range(run_.processes)]
    a.legend(handles + [plt.Rectangle((0, 0), 1, 1, color="black")],
             [f"worker {w}" for w in range(run_.processes)] + ["two workers, same bin"],
             fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16),
             ncol=run_.processes + 1)
    b.scatter(counts + 1, run_.collided + 1, s=8, alpha=0.6)
    b.set(xscale="log", yscale="log", xlabel="examples using the coordinate (+1)",
          ylabel="collided updates on it (+1)",
          title=f"{run_.collisions:,} updates collided; {run_.overwritten} coords. lost a step")
    fig.tight_layout()
    return fig


def _busiest_span(windows: list, span: float) -> float:
    """Start of the ``span`` seconds in which the least active worker wrote the most."""
    end = max(float(w[1][-1]) for w in windows if len(w[1]))
    edges = np.arange(0.0, end + span, span / 4)
    counts = np.array([np.histogram(w[1], edges)[0] for w in windows])
    per_span = np.array([np.convolve(c, np.ones(4), "valid") for c in counts])
    return float(edges[int(np.argmax(per_span.min(axis=0)))])


def plot_delays(runs: Sequence[HogwildRun], ax: Axes | None = None, title: str = "") -> Axes:
    """Lesson 03's "slow learners are fast" picture: loss against updates for each delay."""
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 3.4))
    for i, r in enumerate(runs):
        ax.plot(r.steps, r.losses, color=f"C{i}", label=f"delay τ = {r.delay}")
    ax.set(xlabel="updates applied", ylabel="training loss", title=title or runs[0].kind,
           yscale="log" if runs[0].kind == "dense" else "linear")
    ax.legend(fontsize=8)
    return ax


def plot_contention(rows: Sequence[dict[str, float]], processes: int = 2,
                    ax: Axes | None = None) -> Axes:
    """Lesson 03's picture: time ratio against one process, shared vs private θ, per size."""
    own = ax is None
    if own:
        ax = plt.subplots(figsize=(6.5, 3.2))[1]
    xs = np.arange(len(rows))
    ax.bar(xs - 0.2, [r["private"] for r in rows], 0.4, label="each process its own θ")
    ax.bar(xs + 0.2, [r["shared"] for r in rows], 0.4, label="one shared θ (Hogwild!)")
    ax.axhline(1 / processes, color="k", ls="--", lw=1, label=f"ideal 1/{processes}")
    ax.axhline(1, color="grey", lw=1)
    ax.set(xticks=xs, xticklabels=[f"d = {r['d']:,}\n({8 * r['d'] / 1024:.1f} KiB/update)"
                                   for r in rows],
           ylabel=f"time, {processes} processes / 1", ylim=(0, 1.2),
           title="dense updates: sharing θ costs more as updates grow")
    ax.legend(fontsize=8)
    if own:
        ax.figure.tight_layout()
    return ax
