"""Lesson 15's pictures: plans against the budget — bytes per worker and test accuracy."""
from __future__ import annotations

from typing import Mapping

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter

from ddl_lab.capstone.budget import size_text
from ddl_lab.capstone.meter import Result

__all__ = ["plot_bytes", "plot_accuracy", "figure_budget"]


def _bars(ax: Axes, labels: list[str], values: list[float], ok: list[bool]) -> None:
    y = np.arange(len(labels))
    ax.barh(y, values, color=["#4a9d5b" if good else "#c0504d" for good in ok])
    ax.set_yticks(y, labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)           # the first plan on top
    ax.grid(True, axis="x", alpha=0.3)


def plot_bytes(results: Mapping[str, Result], ax: Axes | None = None) -> Axes:
    """Bytes each plan's busiest worker sent (log scale), the budget as a line."""
    ax = ax or plt.gca()
    budget = next(iter(results.values())).budget.bytes
    sent = [max(r.bytes, 1.0) for r in results.values()]
    _bars(ax, list(results), sent, [s <= budget for s in sent])
    ax.axvline(budget, color="black", ls="--", lw=1)
    ax.set_xscale("log")
    ax.set_xlim(min(budget, *sent) / 3, 3 * max(budget, *sent))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda b, _: size_text(b)))
    ax.set_xlabel(f"bytes sent per worker (budget {size_text(budget)}, dashed)")
    for i, s in enumerate(sent):
        ax.text(s, i, f" {size_text(s)}", va="center", fontsize=8)
    return ax


def plot_accuracy(results: Mapping[str, Result], ax: Axes | None = None) -> Axes:
    """Test accuracy of each plan's model, the target as a line."""
    ax = ax or plt.gca()
    target = next(iter(results.values())).budget.target
    acc = [100 * r.accuracy for r in results.values()]
    _bars(ax, list(results), acc, [a >= 100 * target for a in acc])
    ax.axvline(100 * target, color="black", ls="--", lw=1)
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"test accuracy, % (target {100 * target:.0f}%, dashed)")
    for i, a in enumerate(acc):
        ax.text(2, i, f"{a:.1f}%", va="center", fontsize=8, color="white")
    return ax


def figure_budget(results: Mapping[str, Result]) -> Figure:
    """Bytes and accuracy of several plans side by side, against the budget."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 0.6 * len(results) + 1.4),
                                      sharey=True)
    plot_bytes(results, left)
    plot_accuracy(results, right)
    fig.tight_layout()
    return fig
