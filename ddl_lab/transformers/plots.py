"""Pictures for lesson 12 (transformers): training curves beside the unigram bar, activation
memory measured beside Korthikanti's formula, measured-vs-formula bars (bytes, memory),
ring-attention work per rank, the panel's figure and the ring-attention stepper."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ddl_lab.transformers.memory import Row
from ddl_lab.transformers.panel import PanelRun
from ddl_lab.transformers.ring import RingStep
from ddl_lab.transformers.train import TrainRun

__all__ = ["plot_training", "plot_memory", "plot_measured", "plot_work", "figure_panel",
           "plot_ring_step"]


def _ax(ax):
    import matplotlib.pyplot as plt
    return ax or plt.gca()


def plot_training(runs: Mapping[str, TrainRun], ax=None):
    """Training loss per step of each run, its validation losses as dots, and the unigram
    model's validation cross-entropy (the bar to pass) as a dashed line."""
    ax = _ax(ax)
    for (label, run), color in zip(runs.items(), ("tab:blue", "tab:orange", "tab:green")):
        ax.plot(range(1, len(run.losses) + 1), run.losses, color=color, lw=1, alpha=0.7,
                label=f"{label}: training")
        if run.evals:
            steps, vals = zip(*run.evals)
            ax.plot(steps, vals, "o", color=color, label=f"{label}: validation")
    unigram = next(iter(runs.values())).unigram
    ax.axhline(unigram, color="gray", ls="--", label=f"unigram model ({unigram:.2f})")
    ax.set(xlabel="step", ylabel="cross-entropy (nats per character)")
    ax.legend(fontsize=8)
    return ax


def plot_measured(labels: Sequence[str], measured: Sequence[float], formula: Sequence[float],
                  ax=None, unit: str = "KiB", scale: float = 1024.0, title: str = ""):
    """Measured bars beside the formula's, one pair per label."""
    ax = _ax(ax)
    x, w = np.arange(len(labels)), 0.38
    ax.bar(x - w / 2, np.asarray(measured, float) / scale, w, label="measured", color="tab:blue")
    ax.bar(x + w / 2, np.asarray(formula, float) / scale, w, label="formula", color="0.65")
    ax.set_xticks(x, labels, fontsize=8)
    ax.set(ylabel=unit, title=title)
    ax.set_ylim(0, 1.25 * ax.get_ylim()[1])           # room for the legend above the bars
    ax.legend(fontsize=8, ncol=2, loc="upper center")
    return ax


def plot_memory(rows: Sequence[Row], ax=None):
    """One layer's activation bytes, measured with saved-tensor hooks, beside the formula,
    for each row (its s, dtype, dropout and recomputation in the label)."""
    labels = [f"s={r.s}\n{r.dtype}{' drop' if r.dropout else ''}\n{r.recompute}" for r in rows]
    ax = plot_measured(labels, [r.measured for r in rows], [r.formula for r in rows], ax,
                       title="activations one layer keeps for backward")
    return ax


def plot_work(work: Mapping[str, Sequence[int]], ax=None):
    """Attention scores each rank computes over a ring pass, one group of bars per layout."""
    ax = _ax(ax)
    n = max(len(v) for v in work.values())
    w = 0.8 / len(work)
    for i, (label, per_rank) in enumerate(work.items()):
        ax.bar(np.arange(len(per_rank)) + (i - (len(work) - 1) / 2) * w, per_rank, w,
               label=f"{label} (max {max(per_rank)})")
    ax.set_xticks(range(n), [f"rank {r}" for r in range(n)])
    ax.set(ylabel="query-key scores computed", title="causal ring attention: work per rank")
    ax.legend(fontsize=8)
    return ax


def figure_panel(run: PanelRun):
    """The panel's figure: per rank, the activations kept and the bytes sent by the
    tensor-parallel step, and the bytes the ring attention sends, each beside its formula."""
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    tp = f"TP t = {run.t}" + (", SP" if run.sp else "")
    plot_measured([f"rank {r}" for r in range(run.t)], *zip(*run.activations), axes[0],
                  title=f"{tp}: activations per rank")
    plot_measured([f"rank {r}" for r in range(run.t)], *zip(*run.tp_sent), axes[1],
                  title=f"{tp}: bytes sent per step")
    plot_measured([f"rank {r}" for r in range(run.c)], *zip(*run.ring_sent), axes[2],
                  title=f"ring attention, c = {run.c}: bytes sent")
    fig.suptitle(f"one real step, s = {run.s}", fontsize=10)
    fig.tight_layout()
    return fig


def plot_ring_step(steps: Sequence[Sequence[RingStep]], step: int, ax=None):
    """The ring-attention stepper: ranks (rows) against K/V blocks (columns); at ring step
    ``step`` each rank's held block is dark, the blocks it has already merged are light, the
    rest blank; beside each rank its last query's running max m and sum z."""
    ax = _ax(ax)
    n = len(steps)
    if not 0 <= step < len(steps[0]):
        raise ValueError(f"step must be in 0..{len(steps[0]) - 1}, got {step}")
    grid = np.zeros((n, n))
    for r, mine in enumerate(steps):
        for st in mine[:step]:
            grid[r, st.block] = 1
        grid[r, mine[step].block] = 2
    ax.imshow(grid, cmap="Blues", vmin=0, vmax=2.4, aspect="auto")
    for r, mine in enumerate(steps):
        st = mine[step]
        m, z = np.asarray(st.max)[0, 0, -1], np.asarray(st.sum)[0, 0, -1]
        ax.text(st.block, r, f"K/V of {st.block}\n{st.work} scores", ha="center", va="center",
                fontsize=8, color="white")
        ax.text(n - 0.4, r, f"  m = {m:.2f}, z = {z:.2f}", va="center", fontsize=8)
    ax.set_xticks(range(n), [f"block {j}" for j in range(n)])
    ax.set_yticks(range(n), [f"rank {r}" for r in range(n)])
    ax.set_xlim(-0.5, n + 1.2)
    ax.set_title(f"ring step {step}: the K/V block each rank holds (its last query's "
                 "running max m and sum z)", fontsize=9)
    return ax
