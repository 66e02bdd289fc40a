"""Lesson 06's pictures: the ring step by step (figures 3–11 of the ID2223 review answers), the bytes each
rank sends, the α–β model against the clock, and every allreduce against the memcpy floor.

``plot_x(data, ax=None) -> Axes`` draws one panel; ``figure_x(data) -> Figure`` several.
"""
from __future__ import annotations

import math
from typing import Sequence

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, Rectangle

from ddl_lab.ring_allreduce.cost import cost_model
from ddl_lab.ring_allreduce.engine import ALGORITHMS, Recorder, ring_bytes

__all__ = ["plot_ring_step", "figure_cost_model", "plot_bytes_sent", "plot_allreduce_comparison",
           "plot_winner_map"]

_COLORS = {"reduce_broadcast": "tab:red", "tree": "tab:purple", "ring": "tab:blue"}


def plot_ring_step(states: np.ndarray, step: int, recorders: Sequence[Recorder] | None = None,
                   ax: Axes | None = None, colorbar: bool = True) -> Axes:
    """Ranks on a ring, each with its n chunks coloured by how many ranks' data they hold.

    Step 0 is the start; steps 1..n−1 are share-reduce, n..2(n−1) share-only, as in
    figures 3–11 of the ID2223 review answers (Teta & Zangis; for n = 5). Arrows show the chunk each rank sent to get here
    (for another recorded algorithm, e.g. halving/doubling, the recorded messages and bytes).
    """
    total, n, _ = states.shape
    if not 0 <= step < total:
        raise ValueError(f"step must be in 0..{total - 1}, got {step}")
    ax = ax or plt.gca()
    cmap = matplotlib.colormaps["YlGn"].resampled(n + 1)
    angles = [math.pi / 2 - 2 * math.pi * r / n for r in range(n)]
    pos = [(math.cos(a), math.sin(a)) for a in angles]
    w, h = 0.16, 0.12
    for r, (x, y) in enumerate(pos):
        x0 = x - n * w / 2
        for c in range(n):
            mask = int(states[step, r, c])
            count = bin(mask).count("1")
            ax.add_patch(Rectangle((x0 + c * w, y - h / 2), w, h, facecolor=cmap(count),
                                   edgecolor="black", lw=0.8))
            label = "".join(chr(ord("a") + k) for k in range(n) if mask >> k & 1)
            ax.text(x0 + c * w + w / 2, y, label if count < n else "all",
                    ha="center", va="center", fontsize=7 if n <= 5 else 6)
        ax.text(x, y + h / 2 + 0.07, f"rank {r} (data {chr(ord('a') + r)})", ha="center",
                fontsize=9, weight="bold")
    ring = recorders is None or recorders[0].steps[0].phase.startswith("share")
    if step > 0:
        for r in range(n):
            sent = recorders[r].steps[step - 1].sent if recorders is not None else \
                [(-1, (r + 1) % n, 0)]
            for chunk, to, nbytes in sent:
                (x1, y1), (x2, y2) = pos[r], pos[to]
                arrow = FancyArrowPatch((x1, y1 - h / 2 - 0.03), (x2, y2 - h / 2 - 0.03),
                                        connectionstyle="arc3,rad=-0.25", arrowstyle="-|>",
                                        mutation_scale=12, color="tab:red", lw=1.2)
                ax.add_patch(arrow)
                if recorders is not None:
                    ax.text((x1 + x2) / 2 * 0.72, (y1 + y2) / 2 * 0.72 - 0.05,
                            f"chunk {chunk}" if ring else f"{nbytes} B", ha="center",
                            fontsize=8, color="tab:red")
    phase = ("start: every rank holds only its own data" if step == 0 else
             f"{recorders[0].steps[step - 1].phase}, step {step}" if not ring else
             f"share-reduce (reduce-scatter) {step}/{n - 1}" if step <= n - 1 else
             f"share-only (allgather) {step - n + 1}/{n - 1}")
    fig_no = f" — Teta & Zangis, figure {3 + step}" if n == 5 and ring else ""
    ax.set_title(f"Step {step}: {phase}{fig_no}", fontsize=10)
    ax.set_xlim(-1.6, 1.6)
    ax.set_ylim(-1.45, 1.45)
    ax.set_aspect("equal")
    ax.axis("off")
    if colorbar:
        sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(-0.5, n + 0.5))
        bar = plt.colorbar(sm, ax=ax, ticks=range(1, n + 1), fraction=0.04, pad=0.02)
        bar.set_label("ranks whose data the chunk holds")
    return ax


def figure_cost_model(measured: dict[tuple[str, int, int], float], alpha: float, beta: float,
                      gamma: float = 0.0) -> Figure:
    """Measured times (markers) against the α–β(–γ) model (lines) (lesson 06).

    ``measured`` maps (algorithm, world size, bytes) to seconds. Left: time vs message
    size at the largest world size; right: time vs world size at the largest size.
    """
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    algs = sorted({k[0] for k in measured}, key=list(ALGORITHMS).index)
    ns = sorted({k[1] for k in measured})
    sizes = sorted({k[2] for k in measured})
    a, b = axes
    nmax, smax = ns[-1], sizes[-1]
    grid = np.geomspace(sizes[0], sizes[-1], 50)
    for alg in algs:
        c = _COLORS.get(alg, "black")
        pts = [(s, measured[(alg, nmax, s)]) for s in sizes if (alg, nmax, s) in measured]
        a.plot(*zip(*pts), "o", color=c, label=f"{alg} measured")
        a.plot(grid, [cost_model(alg, nmax, s, alpha, beta, gamma) for s in grid], "-",
               color=c, alpha=0.6, label=f"{alg} model")
        pts = [(n, measured[(alg, n, smax)]) for n in ns if (alg, n, smax) in measured]
        b.plot(*zip(*pts), "o", color=c)
        b.plot(ns, [cost_model(alg, n, smax, alpha, beta, gamma) for n in ns], "-",
               color=c, alpha=0.6)
    a.set(xscale="log", yscale="log", xlabel="message size S (bytes)", ylabel="seconds",
          title=f"{nmax} ranks: time vs message size")
    b.set(xlabel="world size n", ylabel="seconds", xticks=ns,
          title=f"S = {smax / 2**20:.0f} MiB: time vs world size")
    for x in axes:
        x.grid(True, alpha=0.3)
    a.legend(fontsize=7, ncol=2)
    return fig


def plot_bytes_sent(bytes_sent: dict[str, Sequence[int]], nbytes: int,
                    ax: Axes | None = None) -> Axes:
    """Bytes each rank sent, per algorithm, against the ring's 2(n−1)/n·S (lesson 06)."""
    ax = ax or plt.gca()
    algs = list(bytes_sent)
    n = len(next(iter(bytes_sent.values())))
    width = 0.8 / len(algs)
    for i, alg in enumerate(algs):
        ax.bar(np.arange(n) + (i - (len(algs) - 1) / 2) * width,
               np.asarray(bytes_sent[alg]) / nbytes, width, label=alg, color=_COLORS.get(alg))
    ax.axhline(ring_bytes(n, nbytes) / nbytes, color="black", ls="--",
               label="2(n−1)/n · S (ring, optimal)")
    ax.set(xticks=range(n), xticklabels=[f"rank {r}" for r in range(n)],
           ylabel="bytes sent / S", title=f"bytes each rank sends, n = {n}")
    ax.legend(fontsize=8)
    return ax


def plot_allreduce_comparison(times: dict[str, float], nbytes: int, world_size: int,
                              ax: Axes | None = None) -> Axes:
    """Bandwidth S/t of each allreduce against the memcpy floor (lesson 06)."""
    ax = ax or plt.gca()
    names = list(times)
    gbps = [nbytes / times[k] / 1e9 for k in names]
    colors = ["tab:gray" if k.startswith("dist") else "tab:blue" if "ring" in k else
              "black" if "floor" in k else "tab:green" for k in names]
    bars = ax.barh(names, gbps, color=colors)
    for bar, k in zip(bars, names):
        ax.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
                f" {1e3 * times[k]:.1f} ms", va="center", fontsize=8)
    ax.invert_yaxis()
    ax.set(xlabel="bandwidth S / t (GB/s)", xlim=(0, max(gbps) * 1.25),
           title=f"allreduce of {nbytes / 2**20:.0f} MiB on {world_size} ranks")
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def plot_winner_map(winners: dict[tuple[int, int], str], ax: Axes | None = None,
                    title: str = "") -> Axes:
    """Which allreduce wins in each cell (world size × message size) (lesson 06 §7)."""
    ax = ax or plt.gca()
    ns = sorted({n for n, _ in winners})
    sizes = sorted({s for _, s in winners})
    names = sorted(set(winners.values()))
    palette = {**_COLORS, "halving_doubling": "tab:green", "pipelined_tree": "tab:orange"}
    for i, n in enumerate(ns):
        for j, s in enumerate(sizes):
            w = winners[(n, s)]
            ax.add_patch(Rectangle((j, i), 1, 1, facecolor=palette.get(w, "gray"), alpha=0.55,
                                   edgecolor="white"))
            ax.text(j + 0.5, i + 0.5, w.replace("_", "\n"), ha="center", va="center",
                    fontsize=7)
    ax.set(xlim=(0, len(sizes)), ylim=(0, len(ns)), xticks=np.arange(len(sizes)) + 0.5,
           yticks=np.arange(len(ns)) + 0.5, xlabel="message size S", ylabel="ranks n",
           title=title or f"fastest of {', '.join(names)}")
    ax.set_xticklabels([f"{s / 2**10:g} KiB" if s < 2**20 else f"{s / 2**20:g} MiB"
                        for s in sizes], fontsize=8)
    ax.set_yticklabels([str(n) for n in ns])
    return ax
