"""Pictures for lesson 09: pipeline timelines with the bubble shaded, bubble fractions,
DistBelief's speed-up curve."""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np

from ddl_lab.model_parallel.distbelief import Cut
from ddl_lab.model_parallel.pipeline import StageRun, bubble_fraction, ideal_bubble

__all__ = ["emulation", "plot_pipeline", "figure_pipelines", "plot_bubbles", "plot_step_times",
           "figure_diminishing_returns"]

_OP_COLORS = {"forward": "tab:blue", "backward": "tab:green", "wait": "tab:red"}


def _ax(ax):
    import matplotlib.pyplot as plt
    return ax or plt.gca()


def _legend_handles() -> list:
    from matplotlib.patches import Patch
    return ([Patch(color=c, label=k) for k, c in _OP_COLORS.items()]
            + [Patch(facecolor="0.9", hatch="///", edgecolor="0.6", label="bubble (idle)")])


def _label(run: StageRun, step: int) -> str:
    """'1' for micro-batch 1; with v chunks per rank '1c0' (micro-batch 1, chunk 0)."""
    return str(step) if run.v == 1 else f"{step % run.m}c{step // run.m}"


def emulation(runs: Sequence[StageRun | None]) -> str:
    """What the runs' padding emulates ('' if their compute is real), from the runs."""
    notes = dict.fromkeys(r.emulated.removeprefix("emulated: ") for r in runs
                          if r is not None and r.emulated)
    return "emulated: " + "; ".join(notes) if notes else ""


def plot_pipeline(runs: Sequence[StageRun | None], ax=None, step: int = -1,
                  title: str | None = None, span: float | None = None, legend: bool = True,
                  note: bool = True):
    """One row per stage: F i / B i boxes, waits in red, and the bubble — every moment a
    stage is not computing — hatched, with the bubble read off this timeline and the
    formula's. ``span``: the seconds the x axis shows (to compare several pipelines);
    ``note``: say in the title when the compute is emulated (padded with sleep)."""
    ax = _ax(ax)
    runs = [r for r in runs if r is not None]
    tls = [r.timelines[step] for r in runs]
    origin = min(tl.start for tl in tls)
    end = max(tl.end for tl in tls) - origin
    for row, (r, tl) in enumerate(zip(runs, tls)):
        ax.broken_barh([(0, end)], (row - 0.4, 0.8), facecolor="0.9", hatch="///",
                       edgecolor="0.6", linewidth=0)
        for s in tl.spans:
            if s.kind not in _OP_COLORS:
                continue
            h = (row - 0.4, 0.8) if s.kind != "wait" else (row + 0.25, 0.15)
            ax.broken_barh([(s.start - origin, s.duration)], h, color=_OP_COLORS[s.kind],
                           edgecolor="white", linewidth=0.5)
            if s.kind != "wait" and s.duration > (span or end) / 70:
                ax.text(s.start - origin + s.duration / 2, row,
                        f"{s.kind[0].upper()}{_label(r, s.step)}",
                        ha="center", va="center", fontsize=7, color="white")
    r0 = runs[0]
    got, ideal = bubble_fraction(runs, step), ideal_bubble(r0.p, r0.m, r0.v)
    formula = "(p−1)/(m+p−1)" if r0.v == 1 else "(p−1)/(v·m+p−1)"
    chunks = "" if r0.v == 1 else f", v = {r0.v}"
    ax.set_yticks(range(len(tls)), [f"{'rank' if r0.v > 1 else 'stage'} {r.rank}"
                                    for r in runs])
    ax.set_ylim(len(tls) - 0.5, -0.5)
    ax.set_xlim(0, (span or end) * 1.01)
    ax.set_xlabel("wall time (s)")
    emulated = emulation(runs) if note else ""
    ax.set_title(title or f"{r0.schedule}, p = {r0.p}, m = {r0.m}{chunks}: bubble {got:.2f} "
                          f"on this timeline, {formula} = {ideal:.2f}"
                          + (f"\n{emulated}" if emulated else ""), fontsize=10)
    if legend:
        ax.legend(handles=_legend_handles(), loc="upper center", bbox_to_anchor=(0.5, -0.3),
                  ncol=4, fontsize=8, frameon=False)
    return ax


def figure_pipelines(results: Mapping[str, Sequence[StageRun | None]], step: int = -1):
    """Several pipelines one above the other, on one time scale, one legend; what the
    padding emulates (if anything) above them, or in each title where the runs differ."""
    import matplotlib.pyplot as plt
    rows = [len([r for r in runs if r is not None]) for runs in results.values()]
    span = max(max(r.timelines[step].end for r in runs if r is not None)
               - min(r.timelines[step].start for r in runs if r is not None)
               for runs in results.values())
    fig, axes = plt.subplots(len(results), 1, squeeze=False,
                             figsize=(10, 1.1 + 0.45 * sum(rows) + 0.7 * len(rows)),
                             gridspec_kw={"height_ratios": rows})
    notes = {emulation(runs) for runs in results.values()}
    for ax, (label, runs) in zip(axes[:, 0], results.items()):
        plot_pipeline(runs, ax, step, span=span, legend=False, note=len(notes) > 1)
        ax.set_title(f"{label}: {ax.get_title()}", fontsize=10)
    if len(notes) == 1 and (emulated := notes.pop()):
        fig.suptitle(f"times {emulated}", fontsize=10)
    fig.legend(handles=_legend_handles(), loc="lower center", ncol=4, fontsize=8,
               frameon=False)
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    return fig


def plot_bubbles(measured: Mapping[tuple[int, int], float], ax=None):
    """Measured bubble fractions (p, m) → value as points, (p−1)/(m+p−1) as lines."""
    ax = _ax(ax)
    for p in sorted({p for p, _ in measured}):
        ms = sorted(m for q, m in measured if q == p)
        grid = np.linspace(1, max(ms), 50)
        line, = ax.plot(grid, (p - 1) / (grid + p - 1), lw=1, label=f"(p−1)/(m+p−1), p = {p}")
        ax.plot(ms, [measured[(p, m)] for m in ms], "o", color=line.get_color(),
                label=f"measured, p = {p}")
    ax.set(xlabel="micro-batches m", ylabel="bubble fraction", xscale="log", ylim=(0, 1))
    ax.set_xticks(sorted({m for _, m in measured}), [str(m) for m in sorted({m for _, m in measured})])
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def plot_step_times(times: Mapping[str, Mapping[int, float]], ax=None):
    """Label → (micro-batches m → seconds per step), one line each."""
    ax = _ax(ax)
    for label, by_m in times.items():
        ms = sorted(by_m)
        ax.plot(ms, [1e3 * by_m[m] for m in ms], "o-", label=label)
    ax.set(xlabel="micro-batches m", ylabel="ms per training step", xscale="log")
    ax.set_xticks(sorted({m for t in times.values() for m in t}),
                  [str(m) for m in sorted({m for t in times.values() for m in t})])
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return ax


def figure_diminishing_returns(cuts: Mapping[str, Mapping[int, Sequence[Cut | None]]]):
    """Left: speed-up against partitions per model kind (ideal dashed). Right: the slowest
    rank's time per pass split into computing and communicating. Above: what the runs
    emulated (their network's α and β, their padded compute), read from the cuts."""
    import matplotlib.pyplot as plt
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.8))
    width = 0.8 / max(1, len(cuts))
    for k, (kind, by_n) in enumerate(cuts.items()):
        ns = sorted(by_n)
        slowest = {n: max((c for c in by_n[n] if c is not None), key=lambda c: c.time)
                   for n in ns}
        a.plot(ns, [slowest[ns[0]].time / slowest[n].time for n in ns], "o-", label=kind)
        x = np.arange(len(ns)) + (k - (len(cuts) - 1) / 2) * width
        comp = [1e3 * slowest[n].compute for n in ns]
        comm = [1e3 * slowest[n].communicate for n in ns]
        b.bar(x, comp, width, color=f"C{k}", label=f"{kind}: compute")
        b.bar(x, comm, width, bottom=comp, color=f"C{k}", alpha=0.4, hatch="//",
              label=f"{kind}: communicate")
        b.set_xticks(np.arange(len(ns)), [str(n) for n in ns])
    top = max(max(by_n) for by_n in cuts.values())
    a.plot([1, top], [1, top], "--", color="gray", lw=1, label="ideal")
    notes = dict.fromkeys(c.emulated for by_n in cuts.values() for cs in by_n.values()
                          for c in cs if c is not None)
    a.set(xlabel="partitions (ranks)", ylabel="speed-up over 1 partition",
          title="DistBelief's diminishing returns, " + ("emulated" if any(notes) else "measured"))
    if any(notes):
        fig.suptitle("; ".join(n for n in notes if n), fontsize=9)
    b.set(xlabel="partitions (ranks)", ylabel="ms per forward pass (slowest rank)",
          title="where the time goes")
    a.legend(fontsize=8)
    b.legend(fontsize=7)
    a.grid(alpha=0.3)
    fig.tight_layout()
    return fig

