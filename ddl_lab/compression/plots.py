"""Lesson 08's pictures: one gradient and its decodings, accuracy against the bytes sent,
the residual, the early loss, where a step's time goes, the asynchronous peers' lag, and
the traffic saved and the accuracy reached over a sweep of Strom's τ.

``plot_x(data, ax=None) -> Axes`` draws one panel; ``figure_x(data) -> Figure`` several.
"""
from __future__ import annotations

from typing import Any, Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from ddl_lab.compression.sweep import TauSweep
from ddl_lab.compression.training import Result, size_text

__all__ = ["figure_gossip", "plot_reconstruction", "plot_accuracy_vs_bytes", "plot_residual", "plot_early",
           "plot_step_costs", "plot_lag", "plot_tau_sweep", "figure_scheme"]


def plot_reconstruction(grad: torch.Tensor, rows: list[dict[str, Any]], n: int = 120,
                        ax: Axes | None = None) -> Axes:
    """The first ``n`` entries of a gradient and each compressor's decoding of it."""
    ax = ax or plt.gca()
    g = torch.as_tensor(grad).reshape(-1)[:n].numpy()
    ax.plot(g, color="black", lw=2, label="gradient (fp32)")
    for row in rows:
        ax.plot(row["decoded"][:n].numpy(), lw=1, alpha=0.8,
                label=f"{row['compressor']}: {row['bytes']:,} B")
    ax.set_xlabel("entry")
    ax.set_ylabel("value")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(True, alpha=0.3)
    return ax


def _colors(n: int) -> np.ndarray:
    return plt.cm.tab10(np.arange(n) % 10)


def plot_accuracy_vs_bytes(results: Sequence[Result], ax: Axes | None = None) -> Axes:
    """Test accuracy against the bytes all ranks have sent so far (log scale)."""
    ax = ax or plt.gca()
    for r, c in zip(results, _colors(len(results))):
        x = np.maximum(r.bytes_at_evals(), 1)
        ax.plot(x[1:], 100 * r.accuracy[1:], "-o", ms=3, color=c,
                label=f"{r.label} ({100 * r.final_accuracy:.1f}%)")
    ax.set_xscale("log")
    ax.set_xlabel("bytes sent by all workers (log scale)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    return ax


def plot_residual(results: Sequence[Result], ax: Axes | None = None) -> Axes:
    """‖residual‖ per step for the runs with error feedback."""
    ax = ax or plt.gca()
    for r, c in zip(results, _colors(len(results))):
        if r.residual.any():
            ax.plot(np.arange(1, len(r.residual) + 1), r.residual, color=c, label=r.label)
    ax.set_xlabel("step")
    ax.set_ylabel("‖residual‖ (mean over workers)")
    if ax.lines:
        ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    return ax


def plot_early(results: Sequence[Result], steps: int = 60, ax: Axes | None = None) -> Axes:
    """Training loss over the first ``steps`` steps: where compression hurts most."""
    ax = ax or plt.gca()
    for r, c in zip(results, _colors(len(results))):
        k = min(steps, len(r.loss))
        ax.plot(np.arange(1, k + 1), r.loss[:k], color=c, label=r.label, lw=1.2)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (mean over workers)")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    return ax


def plot_step_costs(results: Sequence[Result], ax: Axes | None = None) -> Axes:
    """Milliseconds per minibatch: gradient, encode, exchange, decode (stacked)."""
    ax = ax or plt.gca()
    keys = ("gradient", "encode", "exchange", "decode")
    colors = ("#4c72b0", "#dd8452", "#8c8c8c", "#c44e52")
    bottom = np.zeros(len(results))
    for k, col in zip(keys, colors):
        vals = np.array([r.times_ms[k] for r in results])
        ax.barh(np.arange(len(results)), vals, left=bottom, color=col, label=k)
        bottom += vals
    ax.set_yticks(np.arange(len(results)), [r.label for r in results], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms per minibatch (median, mean over workers)")
    ax.legend(fontsize=7, loc="lower right")
    ax.grid(True, axis="x", alpha=0.3)
    return ax


def plot_lag(results: dict[str, Result], ax: Axes | None = None) -> Axes:
    """Asynchronous runs: my step minus the sender's step, for every peer update applied."""
    ax = ax or plt.gca()
    lags = np.concatenate([r.lag for r in results.values()])
    bins = np.arange(lags.min(), lags.max() + 2) - 0.5 if lags.size else 10
    for (label, r), c in zip(results.items(), _colors(len(results))):
        ax.hist(r.lag, bins=bins, color=c, alpha=0.6, label=label)
    ax.set_xlabel("lag of a peer's update: my step − its step")
    ax.set_ylabel("updates applied")
    ax.legend(fontsize=7)
    ax.grid(True, alpha=0.3)
    return ax


def plot_tau_sweep(sweep: TauSweep, ax: Axes | None = None, mark: float | None = 99.6) -> Axes:
    """Against τ (log scale): test accuracy (left axis, fp32's as a dashed line) and the
    % of fp32's bytes saved (right axis, on a logit scale: 90, 99, 99.9 % equally spaced),
    with ``mark`` (the lecture's 99.6 %) as a dotted line. Returns the accuracy axes."""
    ax = ax or plt.gca()
    ax.plot(sweep.taus, 100 * sweep.accuracy, "-o", color="#4c72b0",
            label="test accuracy, threshold + EF")
    ax.axhline(100 * sweep.fp32_accuracy, color="#4c72b0", ls="--", lw=1,
               label=f"test accuracy, fp32 ({100 * sweep.fp32_accuracy:.1f}%)")
    ax.set_xscale("log")
    ax.set_xlabel("τ (in the gradient's units, log scale)")
    ax.set_ylabel("test accuracy (%)", color="#4c72b0")
    ax.grid(True, which="both", alpha=0.3)
    right = ax.twinx()
    right.plot(sweep.taus, sweep.reduction / 100, "-s", color="#c44e52",
               label="fp32 bytes saved (measured)")
    for t, r in zip(sweep.taus, sweep.reduction):
        right.annotate(f"{r:.2f}%", (t, r / 100), textcoords="offset points", xytext=(0, 6),
                       ha="center", fontsize=7, color="#c44e52")
    if mark is not None:
        right.axhline(mark / 100, color="#c44e52", ls=":", lw=1,
                      label=f"the lecture's {mark:g}%")
    right.set_yscale("logit")
    ends = np.log(np.array(right.dataLim.intervaly) / (1 - np.array(right.dataLim.intervaly)))
    pad = 0.12 * (ends[1] - ends[0]) + 0.1                 # room for the labels, in logits
    right.set_ylim(1 / (1 + np.exp(-(ends + [-pad, pad]))))
    right.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{100 * v:g}%"))
    right.yaxis.set_minor_formatter(plt.NullFormatter())
    right.set_ylabel("fp32 bytes saved (%)", color="#c44e52")
    lines = ax.get_lines() + right.get_lines()
    ax.legend(lines, [ln.get_label() for ln in lines], fontsize=7, loc="center left")
    return ax


def figure_scheme(result: Result, baseline: Result) -> Figure:
    """The widget's figure: accuracy vs bytes against fp32, and the residual or loss."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    plot_accuracy_vs_bytes([baseline, result], ax=axes[0])
    axes[0].set_title(f"{result.label}: {size_text(result.update_bytes)} per update, "
                      f"{result.reduction:.0f}× less than fp32")
    if result.residual.any():
        plot_residual([baseline, result], ax=axes[1])
        axes[1].set_title("the residual: what is still waiting to be sent")
    else:
        plot_early([baseline, result], steps=len(result.loss), ax=axes[1])
        axes[1].set_title("training loss")
    return fig


def figure_gossip(results: Sequence[Any]) -> Figure:
    """Lesson 08's gossip runs (``gossip.GossipResult``): the consensus distance per step
    (left) and the worst replica's test accuracy (right), one curve per run."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(12, 3.6))
    for r in results:
        label = f"{r.mode}, {'IID' if r.skew == 0 else 'label-skewed'} shards"
        style = "-" if r.mode == "gossip" else "--"
        a.plot(np.arange(1, len(r.consensus) + 1), r.consensus, style, label=label)
        b.plot(r.eval_steps, r.worst_accuracy, style + "o", ms=3, label=label)
    a.set(xlabel="step", ylabel="consensus distance (RMS ‖xᵢ − x̄‖)",
          title="how far apart the replicas are")
    b.set(xlabel="step", ylabel="test accuracy of the worst replica",
          title="accuracy at equal steps")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    return fig

