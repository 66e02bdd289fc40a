"""Pictures for lesson 13 (performance): the roofline with a step's operations on it, the
merged trace on the course's timeline, the collectives' durations beside the α–β model,
the crossover sweep, and the MFU of the course's runs."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ddl_lab.performance.roofline import Op, attainable
from ddl_lab.timeline import plot_timeline

__all__ = ["plot_roofline", "plot_trace", "plot_collectives", "plot_crossover", "plot_mfu"]


def _ax(ax):
    import matplotlib.pyplot as plt
    return ax or plt.gca()


def plot_roofline(peaks: Mapping[str, float], bandwidth: float, ops: Sequence[Op] = (),
                  ax=None, title: str | None = None):
    """The roofline min(peak, bandwidth × I) for each of ``peaks`` (label → FLOP/s) on log
    axes; each op at its intensity, a hollow marker at its bound and a filled one at the
    FLOP/s it reached here (after ``roofline.time_op``)."""
    ax = _ax(ax)
    spans = [op.intensity for op in ops] + [p / bandwidth for p in peaks.values()]
    lo, hi = min(spans + [0.1]) / 3, max(spans + [100.0]) * 3
    xs = np.logspace(np.log10(lo), np.log10(hi), 200)
    for (label, peak), style in zip(peaks.items(), ("-", "--", ":", "-.")):
        ax.plot(xs, [attainable(x, peak, bandwidth) for x in xs], "k", ls=style, lw=1.2,
                label=f"roof: {label} ({peak / 1e9:.0f} GFLOP/s)")
    first = next(iter(peaks.values()), None)
    for op, color in zip(ops, ("tab:blue", "tab:orange", "tab:green", "tab:red",
                               "tab:purple", "tab:brown", "tab:pink", "tab:gray")):
        if first is not None:
            ax.scatter(op.intensity, attainable(op.intensity, first, bandwidth),
                       facecolors="none", edgecolors=color, s=40)
        if np.isfinite(op.seconds):
            ax.scatter(op.intensity, op.flop_s, color=color, s=40, label=op.name)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOPs per byte)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title or f"this machine's roofline (memory {bandwidth / 1e9:.0f} GB/s)")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, which="both", alpha=0.2)
    return ax


def plot_trace(trace, ax=None, title: str | None = None):
    """A merged trace (``traces.merge_traces``) on the course's timeline: one row per rank,
    forward, backward and the update above, the collectives in the lower lane."""
    from ddl_lab.performance.traces import timelines
    return plot_timeline(timelines(trace), ax=_ax(ax), title=title)


def plot_collectives(measured: Sequence[Sequence[float]], predicted: Sequence[float],
                     ax=None, title: str | None = None):
    """Each collective's seconds on every rank (dots, in the order they started) beside the
    α–β prediction of each (bars)."""
    ax = _ax(ax)
    k = np.arange(len(predicted))
    ax.bar(k, np.asarray(predicted) * 1e3, color="lightgray", label="α–β model")
    for r, row in enumerate(measured):
        ax.scatter(np.arange(len(row)) + 0.1 * (r - (len(measured) - 1) / 2),
                   np.asarray(row) * 1e3, s=18, label=f"rank {r}, from the trace")
    ax.set_xticks(k, [f"#{i}" for i in k])
    ax.set_xlabel("collective (order of start)")
    ax.set_ylabel("ms")
    ax.set_title(title or "the collectives in the trace beside the α–β model")
    ax.legend(fontsize=7)
    return ax


def plot_crossover(batches: Sequence[int], compute: Sequence[float], comm: Sequence[float],
                   predicted: float | None = None, found: float | None = None, ax=None):
    """Compute and communication seconds against the per-rank batch (log axes), the
    predicted and the swept crossover as vertical lines."""
    ax = _ax(ax)
    ax.plot(batches, np.asarray(compute) * 1e3, "o-", label="compute (forward + backward)")
    ax.plot(batches, np.asarray(comm) * 1e3, "s-", label="allreduce of the gradients")
    if predicted is not None:
        ax.axvline(predicted, color="k", ls="--", lw=1, label=f"predicted b = {predicted:.0f}")
    if found is not None and np.isfinite(found):
        ax.axvline(found, color="tab:red", ls=":", lw=1.5, label=f"swept b = {found:.0f}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("per-rank batch")
    ax.set_ylabel("ms per step")
    ax.legend(fontsize=8)
    ax.grid(True, which="both", alpha=0.2)
    return ax


def plot_mfu(rows: Sequence[Mapping], ax=None, peak_label: str = "the one-thread fp32 peak"):
    """One bar per run (``runs.course_mfu``'s rows): its MFU in per cent of ``peak_label``."""
    ax = _ax(ax)
    ax.barh([r["name"] for r in rows], [100 * r["mfu"] for r in rows], color="tab:blue")
    for i, r in enumerate(rows):
        ax.text(100 * r["mfu"], i, f" {100 * r['mfu']:.0f} %", va="center", fontsize=8)
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"MFU, % of {peak_label}")
    ax.grid(True, axis="x", alpha=0.3)
    return ax
