"""Lesson 10's pictures: bytes per rank stacked by kind, measured beside the formula; the
schemes of lessons 09 and 10 side by side; recomputation's bytes and time against the number
of segments; gradients' magnitudes against fp16's range."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ddl_lab.memory.anatomy import MiB, Memory
from ddl_lab.memory.recompute import Recompute

__all__ = ["PARTS", "plot_memory", "plot_stacked", "figure_recompute", "plot_gradient_range"]

PARTS = {"params": "tab:blue", "grads": "tab:orange", "optimizer": "tab:green",
         "activations": "tab:red"}


def _ax(ax):
    import matplotlib.pyplot as plt
    return ax if ax is not None else plt.figure(figsize=(8, 3.6)).gca()


def plot_memory(table: Mapping[str, Sequence[Memory]], ax=None):
    """Per scheme, one stacked bar per rank: parameters, gradients, optimizer state and
    activations, in MiB."""
    ax = _ax(ax)
    x, ticks, labels = 0.0, [], []
    for scheme, mems in table.items():
        xs = x + np.arange(len(mems)) * 0.8
        bottom = np.zeros(len(mems))
        for part, color in PARTS.items():
            vals = np.array([getattr(mm, part) / MiB for mm in mems])
            ax.bar(xs, vals, 0.7, bottom=bottom, color=color,
                   label=part if scheme == next(iter(table)) else None)
            bottom += vals
        ticks.append(xs.mean())
        labels.append(f"{scheme}\n({len(mems)} rank{'s' * (len(mems) > 1)})")
        x = xs[-1] + 1.6
    ax.set_xticks(ticks, labels, fontsize=8)
    ax.set_ylabel("MiB per rank (one bar per rank)")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    return ax


def plot_stacked(measured: Sequence[Memory], formula: Mapping[str, float], title: str = "",
                 ax=None):
    """Each rank's measured bytes, stacked by kind, beside the formula's bar (hatched):
    parameters, gradients and optimizer state from ``formula``, activations as measured."""
    ax = _ax(ax)
    for r, mem in enumerate(measured):
        bottom = [0.0, 0.0]
        for part, color in PARTS.items():
            got = getattr(mem, part) / 1024
            want = formula.get(part, getattr(mem, part)) / 1024
            ax.bar(3 * r, got, 1, bottom=bottom[0], color=color,
                   label=part if r == 0 else None)
            ax.bar(3 * r + 1, want, 1, bottom=bottom[1], color=color, alpha=0.45, hatch="//")
            bottom = [bottom[0] + got, bottom[1] + want]
    ax.set_xticks([3 * r + 0.5 for r in range(len(measured))],
                  [f"rank {r}\nmeasured | formula" for r in range(len(measured))], fontsize=8)
    ax.set_ylabel("KiB kept by the rank")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3, axis="y")
    return ax


def figure_recompute(rows: Sequence[Recompute], depth: int):
    """Bytes kept for backward and the step's peak (left), and the time of a step (right),
    against the number of segments (0: no recomputation); √depth marked."""
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.4))
    ks = [str(r.segments) if r.segments else "none" for r in rows]
    a.bar(np.arange(len(rows)) - 0.2, [r.kept / MiB for r in rows], 0.4, label="kept for backward")
    a.bar(np.arange(len(rows)) + 0.2, [r.peak / MiB for r in rows], 0.4, label="peak of the step")
    a.set(xticks=range(len(rows)), xticklabels=ks, xlabel="segments", ylabel="MiB")
    a.legend(fontsize=8)
    base = rows[0].seconds
    b.bar(range(len(rows)), [r.seconds / base for r in rows], color="gray")
    b.axhline(1, color="k", lw=0.8)
    b.set(xticks=range(len(rows)), xticklabels=ks, xlabel="segments",
          ylabel="time of a step / without recomputation")
    for ax in (a, b):
        ax.set_title(f"{depth} layers: √{depth} ≈ {round(depth ** 0.5)} segments", fontsize=9)
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return fig


def plot_gradient_range(magnitudes: np.ndarray, scales: Sequence[float] = (1.0, 2.0 ** 16),
                        ax=None):
    """Histogram of log₂|g| for real gradients, shifted by each loss scale, against fp16's
    range: below 2⁻²⁴ a value becomes 0, above 65504 inf (Micikevicius et al., fig. 3)."""
    ax = _ax(ax)
    logs = np.log2(magnitudes[magnitudes > 0])
    bins = np.arange(-40, 20)
    for s in scales:
        ax.hist(logs + np.log2(s), bins=bins, alpha=0.55, label=f"loss × 2^{np.log2(s):.0f}")
    ax.axvspan(bins[0], -24, color="red", alpha=0.1, label="fp16: becomes 0")
    ax.axvspan(-24, -14, color="orange", alpha=0.1, label="fp16 subnormal: fewer digits")
    ax.axvspan(np.log2(65504), bins[-1], color="purple", alpha=0.1, label="fp16: inf")
    ax.set(xlabel="log₂ |gradient|", ylabel="values", yscale="log")
    ax.legend(fontsize=7)
    return ax
