"""Lesson 04's pictures: message-sequence diagrams of real runs, our collectives against
torch.distributed, parallel GD, MapReduce against in-memory iterations, Pregel's PageRank.

``plot_x(data, ax=None) -> Axes`` draws one panel; ``figure_x(data) -> Figure`` several.
"""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure

from ddl_lab.message_passing.mapreduce import IterativeRun
from ddl_lab.message_passing.parallel_gd import GDResult
from ddl_lab.message_passing.pregel import Graph, PregelRun
from ddl_lab.message_passing.trace import Message, Trace
from ddl_lab.message_passing.wire import size_text

__all__ = ["plot_messages", "figure_collectives", "plot_side_by_side", "figure_parallel_gd",
           "figure_iteration_times", "figure_pagerank_convergence", "plot_partitioned_graph"]


_OP_COLORS = {"send": "tab:gray", "bcast": "tab:blue", "scatter": "tab:orange",
              "gather": "tab:green", "reduce": "tab:red", "allreduce": "tab:purple",
              "alltoall": "tab:brown", "barrier": "tab:olive"}


def plot_messages(messages: Sequence[Message], size: int, ax: Axes | None = None,
                  title: str | None = None, label_bytes: bool = True) -> Axes:
    """A message-sequence diagram: one lifeline per rank, time downwards, an arrow per
    message from (sender, send time) to (receiver, arrival time) (lesson 04)."""
    if ax is None:
        ax = plt.subplots(figsize=(1.2 + 1.1 * size, 3.2))[1]
    ms = sorted(messages, key=lambda m: m.sent)
    t0 = min((m.sent for m in ms), default=0.0)
    t_end = max([1e-6] + [max(m.sent, m.arrived) - t0 for m in ms if m.arrived == m.arrived])
    scale = 1e3
    for r in range(size):
        ax.plot([r, r], [0, t_end * scale * 1.05], color="0.75", lw=1, zorder=0)
    for m in ms:
        y0 = (m.sent - t0) * scale
        y1 = (m.arrived - t0) * scale if m.arrived == m.arrived else y0
        color = _OP_COLORS.get(m.op, "black")
        if m.src == m.dst:
            ax.plot([m.src], [y0], "o", color=color, ms=4)
            continue
        ax.annotate("", xy=(m.dst, y1), xytext=(m.src, y0),
                    arrowprops=dict(arrowstyle="->", color=color, lw=1.4,
                                    shrinkA=0, shrinkB=0))
        if label_bytes and len(ms) <= 16:
            ax.text((m.src + m.dst) / 2, (y0 + y1) / 2, size_text(m.nbytes), fontsize=7,
                    ha="center", va="bottom", color=color)
    ax.set_xticks(range(size), [f"rank {r}" for r in range(size)])
    ax.xaxis.tick_top()
    ax.set_xlim(-0.5, size - 0.5)
    ax.set_ylim(t_end * scale * 1.08, -t_end * scale * 0.03)
    ax.set_ylabel("time (ms)")
    if title:
        ax.set_title(title, fontsize=10, pad=18)
    return ax


def figure_collectives(trace: Trace, size: int, ops: Sequence[str] | None = None,
                       columns: int = 4) -> Figure:
    """One sequence diagram per operation of a trace, each with its own time origin."""
    ops = list(ops or trace.ops())
    rows, cols = -(-len(ops) // columns), min(columns, len(ops))
    fig, axes = plt.subplots(rows, cols, figsize=(2.4 * cols + 0.5, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(ops):]:
        ax.axis("off")
    for ax, op in zip(axes.flat, ops):
        ms = trace.select(op)
        total = sum(m.nbytes for m in ms)
        plot_messages(ms, size, ax=ax, label_bytes=False,
                      title=f"{op}\n{len(ms)} msgs, {size_text(total)}")
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xticks(range(size), [str(r) for r in range(size)])
    fig.tight_layout()
    return fig


def plot_side_by_side(results: dict, nbytes: int, ax: Axes | None = None) -> Axes:
    """Bars: each operation's time with our communicator and with torch.distributed."""
    if ax is None:
        ax = plt.subplots(figsize=(7, 3))[1]
    names = list(results)
    x = np.arange(len(names))
    ours = [1e3 * results[k]["ours_s"] for k in names]
    theirs = [1e3 * results[k]["torch_s"] for k in names]
    ax.bar(x - 0.2, ours, 0.4, label="ddl_lab Comm (pickle over TCP)", color="tab:blue")
    ax.bar(x + 0.2, theirs, 0.4, label="torch.distributed (gloo)", color="tab:orange")
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylabel("ms (slowest rank, best of runs)")
    ax.set_title(f"the same operations, {size_text(nbytes)} per message", fontsize=10)
    ax.legend(fontsize=8)
    return ax


# --------------------------------------------------------------- parallel GD, MapReduce

def figure_parallel_gd(results: list[GDResult], single_losses: list[float]) -> Figure:
    """Left: the loss of k workers on top of one process. Right: each rank's time
    computing vs communicating (lesson 04)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.3))
    k = len(results)
    a.semilogy(single_losses, lw=4, color="0.8", label="1 process (batch GD)")
    a.semilogy(results[0].losses, "--", color="tab:blue", label=f"{k} workers (message passing)")
    a.set_xlabel("step")
    a.set_ylabel("J(θ)")
    a.legend()
    a.set_title("the same loss, step for step", fontsize=10)
    ranks = np.arange(k)
    comp = [1e3 * r.compute_s for r in results]
    comm = [1e3 * r.comm_s for r in results]
    b.barh(ranks, comp, color="tab:blue", label="sum over own shard")
    b.barh(ranks, comm, left=comp, color="tab:orange", label="reduce + bcast")
    b.set_yticks(ranks, [f"rank {r}" for r in ranks])
    b.invert_yaxis()
    b.set_xlabel("ms over the whole run")
    b.legend(fontsize=8)
    b.set_title("where each worker's time went", fontsize=10)
    fig.tight_layout()
    return fig


def figure_iteration_times(mr: IterativeRun, mem: IterativeRun) -> Figure:
    """Left: milliseconds per iteration, both ways. Right: total time as iterations grow."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.3))
    for run, color in ((mr, "tab:red"), (mem, "tab:green")):
        its = np.arange(1, len(run.seconds) + 1)
        a.plot(its, 1e3 * np.array(run.seconds), "o-", color=color, ms=3, label=run.name)
        b.plot(its, np.cumsum(run.seconds), "o-", color=color, ms=3)
    a.set_yscale("log")
    a.set_xlabel("iteration")
    a.set_ylabel("ms per iteration")
    a.legend(fontsize=7)
    a.set_title("time per iteration", fontsize=10)
    b.set_xlabel("iterations")
    b.set_ylabel("seconds in total")
    b.set_title("total time as iterations grow", fontsize=10)
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------- Pregel

def figure_pagerank_convergence(run: PregelRun, iterates: list[np.ndarray],
                                exact: np.ndarray) -> Figure:
    """Left: L1 distance to the exact PageRank after each superstep (Pregel) and each power
    iteration (one process). Right: active vertices and messages per superstep."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.3))
    power = [np.abs(r - exact).sum() for r in iterates]
    ours = [np.abs(r - exact).sum() for r in run.snapshots]
    a.semilogy(range(len(power)), power, lw=4, color="0.8", label="power iteration, 1 process")
    a.semilogy(range(len(ours)), ours, "o", ms=3, color="tab:blue",
               label=f"Pregel supersteps, {run.workers} workers")
    a.set_xlabel("superstep / iteration")
    a.set_ylabel("L1 distance to PageRank")
    a.legend(fontsize=8)
    a.set_title("PageRank converging superstep by superstep", fontsize=10)
    steps = [h["superstep"] for h in run.history]
    b.bar(steps, [h["messages"] for h in run.history], color="tab:orange",
          label="messages sent by vertices")
    b.bar(steps, [h["crossing"] for h in run.history], color="tab:red",
          label="… crossing workers, after combining")
    b.plot(steps, [h["active"] for h in run.history], "k.-", label="active vertices")
    b.set_xlabel("superstep")
    b.set_ylim(0, 1.45 * max(h["messages"] for h in run.history))
    b.legend(fontsize=8, loc="upper right", ncol=2)
    b.set_title("work per superstep (all vote to halt at the end)", fontsize=10)
    fig.tight_layout()
    return fig


def plot_partitioned_graph(graph: Graph, values: np.ndarray, workers: int,
                           ax: Axes | None = None) -> Axes:
    """Vertices on a circle grouped by worker (v mod k), sized by PageRank; edges that
    cross workers (they become messages on the wire) in red."""
    if ax is None:
        ax = plt.subplots(figsize=(5, 5))[1]
    order = np.concatenate([np.arange(w, graph.n, workers) for w in range(workers)])
    angle = np.empty(graph.n)
    angle[order] = 2 * np.pi * np.arange(graph.n) / graph.n
    xy = np.column_stack([np.cos(angle), np.sin(angle)])
    cross = (graph.src % workers) != (graph.dst % workers)
    for mask, color, alpha in ((~cross, "0.4", 0.3), (cross, "tab:red", 0.15)):
        segments = np.stack([xy[graph.src[mask]], xy[graph.dst[mask]]], axis=1)
        ax.add_collection(LineCollection(segments, colors=color, linewidths=0.5,
                                         alpha=alpha))
    colors = plt.get_cmap("tab10")(np.arange(graph.n) % workers % 10)
    ax.scatter(xy[:, 0], xy[:, 1], s=4000 * values / values.max() * 0.05 + 4,
               c=colors, edgecolors="k", linewidths=0.3, zorder=3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{graph.n} pages on {workers} workers (colour); size = PageRank; "
                 f"{cross.mean():.0%} of links cross workers", fontsize=9)
    return ax
