"""Lesson 02's pictures: memory architectures, a schedule's chunks per thread, the GIL,
the lost-update race and its fixes, Amdahl's law against measured speedups (strong
scaling) and Gustafson's against a measured weak-scaling run.

``plot_x(data, ax=None) -> Axes`` draws one panel; ``figure_x(data) -> Figure`` several.
"""
from __future__ import annotations

from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

from ddl_lab.parallel_models.shared_memory import RaceResult
from ddl_lab.parallel_models.speedup import (OVERSUBSCRIBED, Scaling, WeakScaling, amdahl,
                                             gustafson)
from ddl_lab.parallel_models.threads import ForResult

__all__ = ["figure_memory_architectures", "plot_schedule", "plot_gil", "figure_race",
           "figure_speedup", "plot_speedup", "plot_amdahl_model", "plot_weak_scaling"]


def figure_memory_architectures() -> Figure:
    """Lesson 02's first picture: UMA, NUMA, distributed and hybrid memory, side by side."""
    fig, axes = plt.subplots(1, 4, figsize=(13, 2.9))
    _smp(axes[0], 0.0, 1.0, 4)
    axes[0].set_title("shared, UMA (SMP)\nsame access time for every CPU", fontsize=9)
    _smp(axes[1], 0.0, 0.48, 2, "memory A")
    _smp(axes[1], 0.52, 0.48, 2, "memory B")
    _line(axes[1], 0.43, 0.26, 0.57, 0.26, color="tab:red", lw=2.5)
    axes[1].text(0.5, 0.05, "link: remote memory is slower", ha="center", fontsize=7,
                 color="tab:red")
    axes[1].set_title("shared, NUMA\ntwo SMPs linked", fontsize=9)
    _networked(axes[2], [0.02 + k * 0.33 for k in range(3)], 0.28, ("CPU", 0.62, 0.2),
               ("own\nmemory", 0.34, 0.2), "network: send / receive messages")
    axes[2].set_title("distributed memory\neach processor its own", fontsize=9)
    _networked(axes[3], [0.03 + k * 0.5 for k in range(2)], 0.42,
               ("shared-memory\nnode (CPUs\n+ GPU)", 0.55, 0.3), ("node memory", 0.3, 0.16),
               "network between nodes")
    axes[3].set_title("hybrid\n(today's largest machines)", fontsize=9)
    for ax in axes:
        ax.set(xlim=(-0.03, 1.03), ylim=(0, 0.95))
        ax.axis("off")
    fig.tight_layout()
    return fig


def _box(ax: Axes, x: float, y: float, w: float, h: float, text: str, color: str) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02", fc=color,
                                ec="black", lw=0.8))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=7)


def _line(ax: Axes, x0: float, y0: float, x1: float, y1: float, **kw: Any) -> None:
    ax.plot([x0, x1], [y0, y1], color=kw.pop("color", "black"), lw=kw.pop("lw", 1), **kw)


def _smp(ax: Axes, x0: float, w: float, cpus: int, label: str = "memory") -> None:
    """CPUs with caches on one bus to one memory."""
    cw = w / cpus
    for c in range(cpus):
        _box(ax, x0 + c * cw + 0.02, 0.68, cw - 0.04, 0.16, "CPU\n+cache", "#cde4f7")
        _line(ax, x0 + (c + 0.5) * cw, 0.66, x0 + (c + 0.5) * cw, 0.5)
    _line(ax, x0 + 0.02, 0.5, x0 + w - 0.02, 0.5, lw=2)
    _box(ax, x0 + 0.05, 0.18, w - 0.1, 0.16, label, "#fde3b5")
    _line(ax, x0 + w / 2, 0.5, x0 + w / 2, 0.36)


def _networked(ax: Axes, xs: Sequence[float], w: float, top: tuple[str, float, float],
               memory: tuple[str, float, float], network: str) -> None:
    """Machines (a ``top`` box over its ``memory``: text, y, height) joined by a network."""
    for x in xs:
        _box(ax, x, top[1], w, top[2], top[0], "#cde4f7")
        _box(ax, x, memory[1], w, memory[2], memory[0], "#fde3b5")
        _line(ax, x + w / 2, memory[1] - 0.02, x + w / 2, 0.16)
    _line(ax, 0.05, 0.16, 0.95, 0.16, color="tab:green", lw=2.5)
    ax.text(0.5, 0.04, network, ha="center", fontsize=7, color="tab:green")


def plot_schedule(result: ForResult, ax: Axes | None = None, title: str | None = None) -> Axes:
    """Lesson 02's picture: a timeline per thread, one box per chunk, coloured by iteration."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 1.2 + 0.5 * result.num_threads))
        fig.subplots_adjust(bottom=0.3 if result.num_threads < 3 else 0.2)
    cmap = colormaps["viridis"]
    for c in result.chunks:
        ax.barh(c.thread, 1e3 * (c.t1 - c.t0), left=1e3 * c.t0, height=0.7,
                color=cmap(c.start / max(1, result.n)), edgecolor="white", linewidth=0.5)
        if c.t1 - c.t0 > 0.06 * result.seconds:
            ax.text(1e3 * (c.t0 + c.t1) / 2, c.thread, f"{c.start}–{c.stop - 1}",
                    ha="center", va="center", fontsize=7, color="white")
    chunk = f", {result.chunk}" if result.chunk else ""
    ax.set(yticks=range(result.num_threads),
           yticklabels=[f"thread {t}" for t in range(result.num_threads)],
           xlabel="time (ms)", ylim=(result.num_threads - 0.5, -0.5),
           title=title or (f"schedule({result.schedule}{chunk}): {1e3 * result.seconds:.0f} ms, "
                           f"busiest thread {result.imbalance:.2f}× the average"))
    return ax


def plot_gil(speedups: dict[str, dict], num_threads: int = 2, ax: Axes | None = None) -> Axes:
    """Lesson 02's GIL picture: measured speedup of each kind of work against the ideal."""
    own = ax is None
    if own:
        ax = plt.subplots(figsize=(6, 3))[1]
    kinds = list(speedups)
    vals = [speedups[k]["speedup"] for k in kinds]
    ax.barh(kinds, vals, color=["tab:red", "tab:green"][:len(kinds)])
    ax.axvline(num_threads, color="k", ls="--", lw=1, label=f"ideal ({num_threads}×)")
    ax.axvline(1, color="grey", lw=1)
    for i, v in enumerate(vals):
        ax.text(v, i, f" {v:.2f}×", va="center")
    ax.set(xlabel=f"speedup with {num_threads} threads", xlim=(0, num_threads * 1.25),
           title="threads and the GIL (measured)")
    ax.legend(loc="lower right", fontsize=8)
    if own:
        ax.figure.tight_layout()
    return ax



def figure_race(results: Sequence[RaceResult]) -> Figure:
    """Lesson 02's picture: updates lost and time taken, for the race and each fix."""
    names = [r.method for r in results]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2))
    lost = [100 * r.lost / r.expected for r in results]
    a.bar(names, lost, color=["tab:red" if v > 0 else "tab:green" for v in lost])
    for i, r in enumerate(results):
        a.text(i, lost[i], f"{r.lost:,}", ha="center", va="bottom", fontsize=9)
    a.set(ylabel="updates lost (%)", title=f"{results[0].processes} processes × "
          f"{results[0].increments:,} increments")
    b.bar(names, [r.ns_per_increment for r in results], color="tab:blue")
    b.set(yscale="log", ylabel="ns per increment (wall × processes)", title="what each costs")
    fig.tight_layout()
    return fig



def figure_speedup(scalings: Sequence[Scaling], max_n: int = 64,
                   weak: WeakScaling | None = None) -> Figure:
    """Lesson 02's picture: measured speedups with Amdahl's curve fitted on n <= cores
    (left), what the model predicts for many more cores (middle), and with ``weak`` — the
    weak-scaling run of ``scalings[0]``'s program — its scaled speedup against Gustafson's
    law with that program's fitted serial fraction (right)."""
    fig, axes = plt.subplots(1, 2 if weak is None else 3,
                             figsize=(11, 3.6) if weak is None else (16, 3.8))
    plot_speedup(scalings, axes[0])
    plot_amdahl_model(scalings, max_n, axes[1])
    if weak is not None:
        plot_weak_scaling(weak, 1.0 - scalings[0].parallel_fraction(), axes[2])
    fig.tight_layout()
    return fig


def plot_speedup(scalings: Sequence[Scaling], ax: Axes | None = None) -> Axes:
    """Lesson 02's picture: measured speedups against the ideal and Amdahl's curve fitted on
    the counts with a core each; oversubscribed counts (n > cores) drawn apart, not fitted."""
    ax = ax or plt.subplots(figsize=(5.5, 3.6))[1]
    top = max(max(s.counts) for s in scalings)
    xs = np.arange(1, top + 1)
    ax.plot(xs, xs, "k--", lw=1, label="ideal S(n) = n")
    for i, s in enumerate(scalings):
        _measured(ax, s.counts, s.speedup, s.oversubscribed, f"C{i}", f"{s.label} (measured)")
        p = s.parallel_fraction()
        ax.plot(xs, amdahl(p, xs), ":", color=f"C{i}",
                label=f"Amdahl, p = {p:.2f} fitted on n ≤ {s.cores}")
    cores = min(s.cores for s in scalings)
    _shade_oversubscribed(ax, cores, top, "more threads\nthan cores:\nnot fitted")
    ax.set(xlabel="threads / workers", ylabel="speedup T(1)/T(n)", xticks=xs,
           title=f"strong scaling, measured ({cores} usable cores)")
    ax.legend(fontsize=7)
    return ax


def plot_amdahl_model(scalings: Sequence[Scaling], max_n: int = 64,
                      ax: Axes | None = None) -> Axes:
    """Lesson 02's picture: Amdahl's law with each fitted p, out to ``max_n`` cores."""
    ax = ax or plt.subplots(figsize=(5.5, 3.6))[1]
    nn = np.logspace(0, np.log2(max_n), 100, base=2)
    ax.plot(nn, nn, "k--", lw=1, label="ideal")
    for i, s in enumerate(scalings):
        p = s.parallel_fraction()
        ax.plot(nn, amdahl(p, nn), color=f"C{i}",
                label=f"p = {p:.2f}: at most {1 / max(1e-9, 1 - p):.0f}×" if p < 1 else "p = 1")
    ax.set(xscale="log", yscale="log", xlabel="cores (model)", ylabel="speedup",
           title="Amdahl's law with the fitted p")
    ax.legend(fontsize=7)
    return ax


def plot_weak_scaling(weak: WeakScaling, serial_fraction: float,
                      ax: Axes | None = None) -> Axes:
    """Lesson 02's picture: the measured scaled speedup of a problem grown with n against
    the ideal, Gustafson's n − f(n − 1) and Amdahl's fixed-size curve for the same f;
    oversubscribed counts (n > cores) drawn apart."""
    ax = ax or plt.subplots(figsize=(5.5, 3.6))[1]
    top = max(weak.counts)
    xs = np.arange(1, top + 1)
    ax.plot(xs, xs, "k--", lw=1, label="ideal S(n) = n")
    _measured(ax, weak.counts, weak.scaled_speedup, weak.oversubscribed, "C0",
              f"{weak.label} (measured)")
    ax.plot(xs, gustafson(serial_fraction, xs), "-", color="C3", lw=1,
            label=f"Gustafson n − f(n − 1), f = {serial_fraction:.2f}")
    ax.plot(xs, amdahl(1.0 - serial_fraction, xs), ":", color="grey",
            label="Amdahl, same f, fixed problem")
    _shade_oversubscribed(ax, weak.cores, top)
    ax.set(xlabel="threads (parallel part grown n×)", ylabel="scaled speedup T₁/Tₙ", xticks=xs,
           title="weak scaling, measured (Gustafson 1988)")
    ax.legend(fontsize=7)
    return ax


def _measured(ax: Axes, counts: Sequence[int], values: np.ndarray, over: np.ndarray,
              color: str, label: str) -> None:
    """Points with a core each as a line; oversubscribed ones as crosses, joined dotted
    (labelled once per panel)."""
    n, v = np.asarray(counts), np.asarray(values)
    ax.plot(n[~over], v[~over], "o-", color=color, label=label)
    if over.any():
        joined = max(0, int(np.argmax(over)) - 1)
        ax.plot(n[joined:], v[joined:], ":", color=color, lw=1, label="_nolegend_")
        ax.plot(n[over], v[over], "x", color=color, ms=8, mew=2,
                label="_nolegend_" if any(line.get_label() == OVERSUBSCRIBED
                                          for line in ax.lines) else OVERSUBSCRIBED)


def _shade_oversubscribed(ax: Axes, cores: int, top: int,
                          text: str = "more threads\nthan cores") -> None:
    if cores < top:
        ax.axvspan(cores + 0.5, top + 0.5, color="grey", alpha=0.12, lw=0)
        ax.text(cores + 0.6, 1.02, text, fontsize=8, va="bottom")
