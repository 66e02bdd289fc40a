"""Pictures for lesson 14 (experts): the router's load over training, what each rank does and
waits for under expert parallelism, the composed layouts' measured-against-predicted bars,
a device mesh with the groups along each dimension, and the planner's ranked layouts."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ddl_lab.experts.parallel import PHASES
from ddl_lab.experts.planner import Prediction
from ddl_lab.experts.train import MoERun

__all__ = ["figure_load", "plot_ep_wait", "plot_layouts", "mesh_groups", "plot_mesh",
           "figure_plan"]

_PHASE_COLORS = dict(zip(PHASES, ("tab:gray", "tab:purple", "tab:blue", "tab:green",
                                  "tab:red")))


def _ax(ax):
    import matplotlib.pyplot as plt
    return ax or plt.gca()


def figure_load(runs: Sequence[MoERun], layer: int = 0):
    """One panel per run: each expert's share of the (token, choice) pairs of MoE layer
    ``layer`` at every step, stacked (an even router is E equal bands), and the fraction
    of pairs dropped at capacity."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(runs), figsize=(5.2 * len(runs), 3.2), squeeze=False)
    for ax, run in zip(axes[0], runs):
        load = np.array([step[layer] for step in run.load], dtype=float)
        share = load / load.sum(1, keepdims=True)
        steps = np.arange(1, len(share) + 1)
        ax.stackplot(steps, share.T, labels=[f"expert {e}" for e in range(run.experts)],
                     alpha=0.85)
        ax.plot(steps, run.dropped, color="black", lw=1.2, label="dropped (all layers)")
        ax.set_ylim(0, 1)
        ax.set_xlabel("step")
        ax.set_ylabel(f"share of layer {layer}'s pairs")
        ax.set_title(run.label, fontsize=10)
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig


def plot_ep_wait(runs: Mapping[str, Sequence[dict[str, Any]]], ax=None):
    """Stacked bars, one per rank and setting: the seconds of each phase of one expert-
    parallel forward (``parallel.ep_wait``); the rank's received pairs above its bar."""
    ax = _ax(ax)
    x, ticks = 0, []
    for label, ranks in runs.items():
        for r, run in enumerate(ranks):
            bottom = 0.0
            for phase in PHASES:
                ms = 1e3 * run["seconds"][phase]
                ax.bar(x, ms, bottom=bottom, color=_PHASE_COLORS[phase],
                       label=phase if x == 0 else None)
                bottom += ms
            ax.text(x, bottom, f"{run['received']}", ha="center", va="bottom", fontsize=7)
            ticks.append((x, f"{label}\nrank {r}" if r == 0 else f"rank {r}"))
            x += 1
        x += 1
    ax.set_xticks([t for t, _ in ticks], [s for _, s in ticks], fontsize=7)
    ax.set_ylabel("ms (median forward)")
    ax.set_title("one expert-parallel forward per rank: pairs received on top", fontsize=10)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def plot_layouts(checked: Sequence[dict[str, Any]], ax=None):
    """For each composed layout, measured / predicted: bytes of each mesh dimension and
    the busiest rank's model states (1.0: the planner's accounting is what torch did)."""
    ax = _ax(ax)
    names = [c["name"] for c in checked]
    dims = sorted({d for c in checked for d in c["bytes_ratio"]})
    width = 0.8 / (len(dims) + 1)
    for k, dim in enumerate(dims):
        ax.bar(np.arange(len(names)) + k * width,
               [c["bytes_ratio"].get(dim, np.nan) for c in checked], width, label=f"bytes: {dim}")
    ax.bar(np.arange(len(names)) + len(dims) * width, [c["states_ratio"] for c in checked],
           width, color="black", label="model states")
    ax.axhline(1.0, color="gray", ls="--", lw=1)
    ax.set_xticks(np.arange(len(names)) + 0.4 - width / 2, names, fontsize=8, rotation=20)
    ax.set_ylabel("measured / planner")
    ax.set_ylim(0, 1.45)
    ax.legend(fontsize=7, ncol=len(dims) + 1, loc="upper center")
    return ax


def mesh_groups(shape: Mapping[str, int], name: str) -> list[list[int]]:
    """The process groups along dimension ``name`` of a mesh of ``shape`` (ranks numbered
    with the last dimension innermost, as ``init_device_mesh`` does)."""
    sizes = list(shape.values())
    grid = np.arange(int(np.prod(sizes))).reshape(sizes)
    d = list(shape).index(name)
    return np.moveaxis(grid, d, -1).reshape(-1, sizes[d]).tolist()


def plot_mesh(shape: Mapping[str, int], ax=None):
    """The ranks of a mesh of up to 3 dimensions, numbered Megatron's way (the last dimension
    innermost: consecutive ranks), each a box: the last dimension across, the one before it
    down, a first of three as blocks side by side; the groups along each dimension drawn as
    coloured links (the outermost as arcs)."""
    from matplotlib.patches import FancyBboxPatch
    ax = _ax(ax)
    names, sizes = list(shape), list(shape.values())
    if not 1 <= len(sizes) <= 3:
        raise ValueError(f"a mesh of 1 to 3 dimensions, not {len(sizes)}: {dict(shape)}")
    grid = np.arange(int(np.prod(sizes))).reshape(sizes)
    full = ([1] * (3 - len(sizes)) + sizes)
    pos = {}
    for r in range(grid.size):
        block, row, col = np.unravel_index(r, full)
        pos[r] = (float(col + block * (full[2] + 1)), -float(row))
    for r, (px, py) in pos.items():
        ax.add_patch(FancyBboxPatch((px - 0.3, py - 0.25), 0.6, 0.5, boxstyle="round,pad=0.02",
                                    fc="white", ec="black"))
        ax.text(px, py, str(r), ha="center", va="center", fontsize=9)
    colors = ("tab:red", "tab:blue", "tab:green")[-len(sizes):]
    for d, (name, color) in enumerate(zip(names, colors)):
        arc = len(sizes) == 3 and d == 0
        for group in mesh_groups(shape, name):
            for a, b in zip(group, group[1:]):
                ax.annotate("", xy=pos[int(b)], xytext=pos[int(a)], arrowprops=dict(
                    arrowstyle="-", color=color, lw=2, alpha=0.7, shrinkA=9, shrinkB=9,
                    connectionstyle=f"arc3,rad={0.35 if arc else 0.0}"))
        ax.plot([], [], color=color, lw=2, label=f"{name}: groups of {sizes[d]} ranks")
    xs, ys = [p[0] for p in pos.values()], [p[1] for p in pos.values()]
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ax.set_ylim(min(ys) - 0.8, max(ys) + 0.8)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return ax


def figure_plan(preds: Sequence[Prediction], memory: float, top: int = 8):
    """The planner's first ``top`` layouts: per-rank memory by part against the device's
    memory (left), predicted step time by part (right); the first is the plan."""
    import matplotlib.pyplot as plt
    preds = list(preds)[:top]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 0.5 + 0.42 * max(len(preds), 1)),
                                      sharey=True)
    labels = [str(p.layout) for p in preds]
    y = np.arange(len(preds))[::-1]
    for ax, parts, scale, unit in ((left, "memory", 1e9, "GB per device"),
                                   (right, "seconds", 1.0, "seconds per step")):
        keys = [k for k in (getattr(preds[0], parts) if preds else {}) if k != "total"]
        left_edge = np.zeros(len(preds))
        for k in keys:
            vals = np.array([getattr(p, parts).get(k, 0.0) for p in preds]) / scale
            ax.barh(y, vals, left=left_edge, label=k)
            left_edge += vals
        ax.set_xlabel(unit)
        ax.legend(fontsize=7, loc="lower right")
    left.axvline(memory / 1e9, color="black", ls="--", lw=1)
    left.set_yticks(y, labels, fontsize=7)
    for yy, p in zip(y, preds):
        if not p.fits:
            left.text(0, yy, "  does not fit", va="center", fontsize=7, color="tab:red")
    fig.tight_layout()
    return fig
