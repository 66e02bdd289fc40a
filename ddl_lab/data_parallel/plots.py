"""Lesson 05's pictures: the loss of averaging runs, every rank's timeline, the
compute-to-communication ratio, and the large-batch runs under three learning-rate rules.

``plot_x(data, ax=None) -> Axes`` draws one panel; ``figure_x(data) -> Figure`` several.
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ddl_lab.data_parallel.workloads import Run
from ddl_lab.timeline import Timeline, plot_timeline

__all__ = ["figure_loss_curves", "figure_timelines", "plot_compute_ratio", "figure_batches"]


def figure_loss_curves(runs: dict[str, Sequence[Run]]) -> Figure:
    """Training loss of the global model vs wall time and vs communication rounds
    (lesson 05's averaging periods): one curve per entry of ``runs``."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for label, rs in runs.items():
        ev = np.array(rs[0].evals)
        for ax, col in zip(axes, (1, 2)):
            ax.plot(ev[:, col], ev[:, 3], "o-", ms=3, label=label)
    axes[0].set(xlabel="wall time (s, evaluation excluded)", ylabel="training loss",
                title="loss vs wall time")
    axes[1].set(xlabel="communication rounds (allreduces)", title="loss vs communication",
                xscale="symlog")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    return fig


def figure_timelines(runs: dict[str, Sequence[Run]], steps: Sequence[int] | None = None
                     ) -> Figure:
    """One timeline per entry of ``runs`` (e.g. without / with a straggler), stacked on a
    common time axis; ``steps`` keeps only those steps, e.g. ``range(1, 6)`` (lesson 05).
    A run whose straggler sleeps says so in its title."""
    n = len(next(iter(runs.values())))
    fig, axes = plt.subplots(len(runs), 1, figsize=(11, 1.1 + 0.55 * n * len(runs)),
                             sharex=True, squeeze=False)
    axes = axes[:, 0]
    for ax, (label, rs) in zip(axes, runs.items()):
        tls = [r.timeline for r in rs]
        if steps is not None:
            keep = set(steps)
            tls = [Timeline(t.rank, [s for s in t.spans if s.step in keep]) for t in tls]
        note = next((r.emulated for r in rs if r.emulated), "")
        plot_timeline(tls, ax=ax, title=f"{label} ({note})" if note else label)
    for ax in axes[:-1]:
        ax.set_xlabel("")
        ax.get_legend().remove()
    return fig


def plot_compute_ratio(ratios: dict[str, Sequence[dict]], batches: Sequence[int], ranks: int,
                       ax: Axes | None = None) -> Axes:
    """Compute time / allreduce time against the examples per rank, one line per workload
    (``measure.compute_vs_communication`` for every batch size)."""
    if ax is None:
        ax = plt.subplots(figsize=(6.5, 3.5))[1]
    for w, rs in ratios.items():
        ax.plot(batches, [r["ratio"] for r in rs], "o-",
                label=f"{w} ({rs[0]['params']:,} parameters)")
    ax.axhline(1, color="gray", ls="--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="examples per rank (M/R)",
           ylabel="compute time / allreduce time",
           title=f"{ranks} ranks: compute-to-communication ratio")
    ax.legend()
    return ax


def figure_batches(runs: dict) -> Figure:
    """Training loss vs step of ``batches.run_batches``' runs: one panel per learning-rate
    rule, one curve per number of workers R (global batch R·b)."""
    rules = list(dict.fromkeys(rule for rule, _ in runs))
    titles = {"none": "no scaling (rate η)", "linear": "linear scaling (rate R·η)",
              "warmup": "linear scaling + warm-up"}
    fig, axes = plt.subplots(1, len(rules), figsize=(4 * len(rules), 3.4), sharey=True)
    for ax, rule in zip(np.atleast_1d(axes), rules):
        for (r, R), run in runs.items():
            if r == rule:
                ax.plot(run.eval_steps, run.loss, "o-", ms=2,
                        label=f"R = {R} (batch {run.batch}): {100 * run.accuracy:.0f}% test")
        ax.set(xlabel="step", title=titles.get(rule, rule), yscale="log")
        ax.legend(fontsize=8)
    np.atleast_1d(axes)[0].set_ylabel("training loss (all shards)")
    fig.tight_layout()
    return fig

