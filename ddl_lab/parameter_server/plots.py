"""Lesson 07's pictures: Downpour runs (loss, timelines, staleness, where the time went)
and DistBelief's comparison with Sandblaster L-BFGS.

``plot_x(data, ax=None) -> Axes`` draws one panel; ``figure_x(data) -> Figure`` several.
"""
from __future__ import annotations

from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from ddl_lab.parameter_server.downpour import DownpourRun
from ddl_lab.parameter_server.sandblaster import SandblasterRun
from ddl_lab.timeline import COLORS, Span, Timeline, plot_timeline

__all__ = ["emulated", "plot_loss", "plot_staleness", "plot_time_split", "figure_timelines",
           "figure_consistency", "figure_run", "figure_distbelief", "plot_batch_times"]


def emulated(runs: Sequence[Any]) -> str:
    """What the runs' times emulate (padded compute, stragglers), read from the runs;
    '' if their compute was real."""
    notes = dict.fromkeys(r.emulated.removeprefix("emulated: ") for r in runs if r.emulated)
    return "emulated: " + "; ".join(notes) if notes else ""


def _note_figure(fig: Figure, runs: Sequence[Any]) -> Figure:
    """Say above the figure what its times emulate (if anything)."""
    if note := emulated(runs):
        fig.suptitle(f"times {note}", fontsize=9)
    return fig


def plot_loss(runs: dict[str, Any], ax: Axes | None = None, target: float | None = None,
              x: str = "time", note: bool = True) -> Axes:
    """Training loss of several runs against wall time (``x='time'``) or updates applied
    (``x='updates'``); kills marked ×, warm-start joins dotted. ``note``: the time axis
    says what the runs emulated."""
    if x not in ("time", "updates"):
        raise ValueError(f"x must be 'time' or 'updates', got {x!r}")
    ax = ax or plt.gca()
    for i, (label, r) in enumerate(runs.items()):
        color = f"C{i}"
        xs = r.t if x == "time" else r.versions
        ax.plot(xs, r.loss, color=color, lw=1.5, label=label)
        if x != "time":
            continue
        for rep, at in getattr(r, "killed", {}).items():
            y = np.interp(at, r.t, r.loss)
            ax.plot([at], [y], "x", color=color, ms=10, mew=2)
            ax.annotate(f"replica {rep} killed", (at, y), textcoords="offset points",
                        xytext=(5, 8), fontsize=8, color=color)
        for rep, at in getattr(r, "started", {}).items():
            if at > 0.01:
                ax.axvline(at, color=color, ls=":", lw=1)
    if target is not None:
        ax.axhline(target, color="k", ls="--", lw=0.8, label=f"target {target:g}")
    ax.set_yscale("log")
    wall = "wall time (s)" + (f"\n{tail}" if note and (tail := emulated(runs.values())) else "")
    return _finish(ax, wall if x == "time" else "updates applied by the shards",
                   "training loss")


def _window(r: DownpourRun, window: float) -> tuple[list[Timeline], float]:
    """The replicas' spans during ``window`` seconds from the moment the last replica
    started computing (before that, replicas connect and join), and that origin."""
    tls = r.timelines()
    firsts = [min(s.start for s in tl.spans if s.kind == "compute") for tl in tls
              if any(s.kind == "compute" for s in tl.spans)]
    origin = max(firsts, default=r.t0)
    end = origin + window
    return [Timeline(tl.rank, [Span(s.kind, max(s.start, origin), min(s.end, end), s.step)
                               for s in tl.spans if s.start < end and s.end > origin])
            for tl in tls], origin


def figure_timelines(runs: dict[str, DownpourRun], window: float = 0.15) -> Figure:
    """One timeline panel per run: what each replica did during the first ``window``
    seconds (computing, talking to the shards, waiting at the gate, straggling)."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 1.3 * len(runs) + 1.2),
                             squeeze=False, sharex=True)
    fig.subplots_adjust(hspace=0.45)
    _draw_timelines(runs, window, list(axes[:, 0]))
    return _note_figure(fig, list(runs.values()))


def _draw_timelines(runs: dict[str, DownpourRun], window: float, axes: Sequence[Axes]) -> None:
    for k, (ax, (label, r)) in enumerate(zip(axes, runs.items())):
        cut, origin = _window(r, window)
        if not any(tl.spans for tl in cut):
            raise ValueError(f"{label}: no replica recorded anything (did every replica die?)")
        plot_timeline(cut, ax=ax, t0=origin)
        ax.set_title(label, fontsize=9, loc="left")
        ax.set_yticks(range(r.setup.replicas),
                      [f"replica {i}" + (f" ×{f:g}" if f > 1 else "")
                       for i, f in enumerate(r.setup.slowness())], fontsize=8)
        ax.set_xlim(0, window)
        ax.get_legend().remove()
        if k < len(runs) - 1:
            ax.set_xlabel("")
    seen = {s.kind for r in runs.values() for tl in r.timelines() for s in tl.spans}
    axes[-1].legend(handles=[Patch(color=c, label=k) for k, c in COLORS.items() if k in seen],
                    loc="upper center", bbox_to_anchor=(0.5, -0.5), ncol=len(seen),
                    fontsize=8, frameon=False)


def plot_staleness(runs: dict[str, DownpourRun], ax: Axes | None = None) -> Axes:
    """How stale the applied gradients were, per run (0 = computed on the current θ)."""
    ax = ax or plt.gca()
    top = max(int(r.staleness.max(initial=0)) for r in runs.values())
    bins = np.arange(top + 2) - 0.5
    for i, (label, r) in enumerate(runs.items()):
        st = r.staleness
        ax.hist(st, bins=bins, histtype="step", lw=2, color=f"C{i}",
                weights=np.full(len(st), 1.0 / max(len(st), 1)),
                label=f"{label}: mean {st.mean():.1f}, max {st.max(initial=0)}")
    return _finish(ax, "staleness τ of an applied gradient (updates since its pull)",
                   "fraction of updates")


def plot_time_split(runs: dict[str, DownpourRun], ax: Axes | None = None,
                    legend: bool = True, note: bool = True) -> Axes:
    """Where each replica's time went, per run: computing, talking, waiting, straggling
    (``note``: the axis says what was emulated)."""
    ax = ax or plt.gca()
    kinds = ["compute", "communicate", "wait", "straggle"]
    ticks, labels, y = [], [], 0.0
    for label, r in runs.items():
        for i, tl in enumerate(r.timelines()):
            totals, left = tl.totals(), 0.0
            for kind in kinds:
                ax.barh(y, totals.get(kind, 0.0), left=left, color=COLORS[kind],
                        label=kind if not ticks else None)
                left += totals.get(kind, 0.0)
            ticks.append(y)
            labels.append(f"{label} · replica {i}" if label else f"replica {i}")
            y += 1.0
        y += 0.6
    ax.set_yticks(ticks, labels, fontsize=8)
    ax.invert_yaxis()
    tail = emulated(runs.values()) if note else ""
    ax.set_xlabel("seconds" + (f"\n{tail}" if tail else ""))
    if legend:
        ax.legend(fontsize=8, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0),
                  frameon=False)
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def figure_consistency(runs: dict[str, DownpourRun], target: float | None = None,
                       window: float = 0.15) -> Figure:
    """Lesson 07's main picture: each run's replica timeline (left), the loss against
    wall time and the staleness histogram (right)."""
    fig = plt.figure(figsize=(12, 1.3 * len(runs) + 2.6))
    grid = fig.add_gridspec(len(runs), 2, width_ratios=[1.25, 1], hspace=0.55, wspace=0.25)
    _draw_timelines(runs, window, [fig.add_subplot(grid[i, 0]) for i in range(len(runs))])
    half = max(1, len(runs) // 2)
    plot_loss(runs, fig.add_subplot(grid[:half, 1]), target, note=False)
    plot_staleness(runs, fig.add_subplot(grid[half:, 1]))
    return _note_figure(fig, list(runs.values()))


def figure_run(r: DownpourRun, window: float = 0.1) -> Figure:
    """One run at a glance: the replicas' timeline, the loss against wall time, and where
    each replica's time went."""
    fig = plt.figure(figsize=(12, 5.4))
    grid = fig.add_gridspec(2, 2, height_ratios=[1, 1.2], hspace=0.75, wspace=0.3)
    label = r.label or r.setup.describe()
    _draw_timelines({label: r}, window, [fig.add_subplot(grid[0, :])])
    plot_loss({label: r}, fig.add_subplot(grid[1, 0]), note=False)
    plot_time_split({"": r}, fig.add_subplot(grid[1, 1]), legend=False, note=False)
    return _note_figure(fig, [r])


def figure_distbelief(runs: dict[str, Any]) -> Figure:
    """Training loss and test accuracy against wall time, and the loss against the
    examples whose gradient was computed (the work done)."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for i, (label, r) in enumerate(runs.items()):
        examples = r.examples if isinstance(r, SandblasterRun) else r.examples_seen
        style = dict(color=f"C{i}", lw=1.6, label=label,
                     marker="." if isinstance(r, SandblasterRun) else None)
        axes[0].plot(r.t, r.loss, **style)
        axes[1].plot(r.t, r.accuracy, **style)
        axes[2].plot(examples, r.loss, **style)
    axes[0].set(xlabel="wall time (s)", ylabel="training loss", yscale="log")
    axes[1].set(xlabel="wall time (s)", ylabel="test accuracy", ylim=(0.8, 1.0))
    axes[2].set(xlabel="examples whose gradient was computed", ylabel="training loss",
                yscale="log")
    for ax in axes:
        ax.grid(True, alpha=0.3)
    axes[1].legend(fontsize=8, loc="lower right")
    _note_figure(fig, list(runs.values()))
    fig.tight_layout()
    return fig


def plot_batch_times(runs: dict[str, SandblasterRun], ax: Axes | None = None) -> Axes:
    """Seconds per full-batch gradient, with and without backup tasks (the title says
    what the runs emulated)."""
    ax = ax or plt.gca()
    if note := emulated(runs.values()):
        ax.set_title(note, fontsize=8)
    for i, (label, r) in enumerate(runs.items()):
        secs = [1e3 * b["seconds"] for b in r.batches]
        ax.plot(np.arange(1, len(secs) + 1), secs, ".-", color=f"C{i}",
                label=f"{label}: median {np.median(secs):.1f} ms")
    return _finish(ax, "batch (one full gradient)", "ms")


def _finish(ax: Axes, xlabel: str, ylabel: str) -> Axes:
    """Label the axes, a light grid, a small legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return ax
