"""Lesson 11's pictures: DDP vs synchronous SGD, two hosts on a wire, an elastic restart,
federated averaging, and the when-it-pays calculator."""
from __future__ import annotations

from typing import Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.patches import FancyBboxPatch

from ddl_lab.data_parallel.engine import step_times

from .calculator import Fit, step_time
from .elastic import ElasticRun
from .federated import FedRun

__all__ = ["figure_ddp", "plot_two_hosts", "plot_elastic", "figure_federated",
           "plot_calculator", "plot_seed_case"]


def figure_ddp(results: dict):
    """Loss per step and time per step of each entry (label → the ranks' ``Run``s)."""
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 3.4), gridspec_kw={"width_ratios": [3, 2]})
    styles = ["-", "--", ":", "-."]
    for i, (label, runs) in enumerate(results.items()):
        a.plot(range(1, len(runs[0].loss) + 1), runs[0].loss, styles[i % 4], lw=2 - 0.3 * i,
               label=label)
    a.set(xlabel="step", ylabel="rank 0's mini-batch loss", title="same data, same seed")
    a.legend(fontsize=8)
    labels = list(results)
    ms = [float(np.median(step_times(results[k]))) * 1e3 for k in labels]
    bars = b.barh(range(len(labels)), ms, color=[f"C{i}" for i in range(len(labels))])
    for bar, k in zip(bars, labels):
        rounds = results[k][0].rounds / max(len(results[k][0].loss), 1)
        b.text(bar.get_width(), bar.get_y() + bar.get_height() / 2,
               f" {bar.get_width():.2f} ms · {rounds:.3g} allreduce/step", va="center", fontsize=8)
    b.set_yticks(range(len(labels)), labels, fontsize=8)
    b.set(xlabel="median time per step (ms, slowest rank)", xlim=(0, max(ms) * 1.9))
    b.invert_yaxis()
    fig.tight_layout()
    return fig


def _box(ax, x: float, y: float, w: float, h: float, **style) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.01", **style))


def plot_two_hosts(ranks: Sequence[dict], traffic: dict[str, dict[str, int]], ax=None):
    """Two hosts as boxes with their ranks and env:// variables, joined by the veth pair;
    the MB each end sent."""
    ax = ax or plt.subplots(figsize=(9, 3.2))[1]
    names = sorted(traffic)
    by_host: dict[str, list[dict]] = {}
    for r in sorted(ranks, key=lambda r: r["rank"]):
        by_host.setdefault(r["addr"], []).append(r)
    for i, (addr, rs) in enumerate(sorted(by_host.items())):
        x0 = 0.02 + 0.58 * i
        _box(ax, x0, 0.08, 0.38, 0.8, fc="#eef3fb", ec="#4a6fa5")
        store = "  ·  rendezvous store" if i == 0 else ""
        ax.text(x0 + 0.19, 0.8, f"host {'AB'[i]}: {addr}{store}\n"
                f"{names[i] if i < len(names) else ''}", ha="center", va="center", fontsize=8)
        for j, r in enumerate(rs):
            cx = x0 + 0.1 + 0.18 * j
            _box(ax, cx - 0.07, 0.36, 0.14, 0.14, fc=f"C{r['rank']}", ec="none", alpha=0.85)
            ax.text(cx, 0.43, f"rank {r['rank']}", ha="center", va="center", fontsize=8,
                    color="white")
            ax.text(cx, 0.16, f"RANK={r['env']['RANK']}\nLOCAL_RANK={r['env']['LOCAL_RANK']}",
                    ha="center", fontsize=7)
    if len(names) == 2:
        a, b = (traffic[n] for n in names)
        ax.annotate("", (0.6, 0.56), (0.4, 0.56), arrowprops={"arrowstyle": "->", "lw": 2})
        ax.annotate("", (0.4, 0.44), (0.6, 0.44), arrowprops={"arrowstyle": "->", "lw": 2})
        ax.text(0.5, 0.62, f"A → B {a['tx'] / 1e6:,.1f} MB", ha="center", fontsize=8)
        ax.text(0.5, 0.33, f"B → A {b['tx'] / 1e6:,.1f} MB", ha="center", fontsize=8)
        ax.text(0.5, 0.92, "the veth pair (the 'cable')", ha="center", fontsize=8)
    ax.set(xlim=(0, 1), ylim=(0, 1))
    ax.axis("off")
    return ax


def plot_elastic(run: ElasticRun, reference: ElasticRun | None = None, ax=None):
    """Loss against steps, one colour per attempt; checkpoints, the kill and the resume."""
    ax = ax or plt.subplots(figsize=(9, 3.4))[1]
    if reference is not None:
        steps = [(e["step"], e["loss"]) for e in reference.log if e["event"] == "step"]
        ax.plot(*zip(*steps), color="0.75", lw=5, label="uninterrupted run", zorder=0)
    for a in run.attempts():
        pts = [(e["step"], e["loss"]) for e in run.log
               if e["event"] == "step" and e["attempt"] == a["attempt"]]
        if pts:
            ax.plot(*zip(*pts), "o-", ms=3, label=f"attempt {a['attempt']} "
                    f"({a['world']} workers)")
    for s in sorted(set(run.checkpoints())):
        ax.axvline(s, color="0.6", lw=0.8, ls=":")
    att = run.attempts()
    for prev, nxt in zip(att, att[1:]):
        ax.axvline(prev["last"], color="red", lw=1.5)
        ax.annotate(f"killed after step {prev['last']}", (prev["last"], 0.92),
                    xycoords=("data", "axes fraction"), color="red", fontsize=8, ha="right")
        ax.annotate(f"resumed from checkpoint {nxt['start']}", (nxt["start"], 0.08),
                    xycoords=("data", "axes fraction"), color="green", fontsize=8)
    ax.set(xlabel="step (dotted: checkpoints)", ylabel="loss of the global mini-batch",
           title="an elastic restart")
    ax.legend(fontsize=8)
    return ax


def figure_federated(runs: Sequence[FedRun], central: FedRun | None = None):
    """Test accuracy against rounds and against bytes; client drift against rounds."""
    fig, (a, b, c) = plt.subplots(1, 3, figsize=(13, 3.5))
    for r in runs:
        a.plot(r.rounds, r.accuracy, label=r.label)
        b.plot(np.array(r.bytes) / 1e6, r.accuracy, label=r.label)
        c.plot(r.rounds[1:], r.drift, label=r.label)
    if central is not None:
        for ax in (a, b):
            ax.axhline(central.accuracy[-1], color="k", ls="--", lw=1,
                       label=f"centralised, {len(central.accuracy) - 1} epochs")
        b.axvline(central.bytes[-1] / 1e6, color="k", ls=":", lw=1, label="the data itself")
    a.set(xlabel="round", ylabel="test accuracy", title="accuracy vs rounds", ylim=(0, 1))
    b.set(xlabel="MB between server and clients", title="accuracy vs bytes", ylim=(0, 1))
    c.set(xlabel="round", ylabel="RMS ‖w_k − w‖", title="client drift")
    a.legend(fontsize=7)
    b.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_calculator(f: Fit, batch: int, measured: dict[int, float] | None = None,
                    max_workers: int = 8, alone: float | None = None, ax=None):
    """Modelled seconds per step against workers — compute, the allreduce backward did not
    hide, and (hatched) what it hid — with the measured points and one process's measured
    time (the COST baseline)."""
    ax = ax or plt.subplots(figsize=(7, 3.6))[1]
    ns = np.arange(1, max_workers + 1)
    pred = [step_time(int(n), batch, f) for n in ns]
    comp = np.array([p["compute"] for p in pred]) * 1e3
    exposed = np.array([p["exposed"] for p in pred]) * 1e3
    hidden = np.maximum(np.array([p["communicate"] for p in pred]) * 1e3 - exposed, 0)
    ax.bar(ns, comp, color="C0", alpha=0.6, label="modelled compute")
    ax.bar(ns, exposed, bottom=comp, color="C3", alpha=0.6,
           label=f"modelled allreduce, exposed (α = {1e6 * f.alpha:.3g} µs, "
                 f"β = {1e9 * f.beta:.3g} ns/B)")
    if f.overlap > 0:
        ax.bar(ns, hidden, bottom=comp + exposed, fill=False, hatch="//", ec="C3", lw=0,
               label="allreduce hidden under backward")
    if measured:
        ax.plot(list(measured), [v * 1e3 for v in measured.values()], "ko", ms=7,
                label="measured step")
    if alone is not None:
        ax.axhline(alone * 1e3, color="k", ls="--", lw=1, label="one process, measured")
    ax.set(xlabel="workers n", ylabel="ms per step", xticks=ns,
           title=f"modelled: {f.params:,} parameters, global batch {batch}, {f.cores} cores, "
                 f"φ = {f.overlap:.2f}\n(α = {f.alpha * 1e6:.3g} µs, "
                 f"β = {f.beta * 1e9:.3g} ns/byte)")
    ax.title.set_fontsize(9)
    ax.legend(fontsize=8)
    return ax


def plot_seed_case(rows: Sequence[dict], ax=None):
    """Modelled speedup against workers for each link speed and overlap φ (the 16M / 17B
    case of Jamshidi's lecture): φ = 0 dashed, φ = 1 solid."""
    ax = ax or plt.subplots(figsize=(6.5, 3.6))[1]
    links = sorted({r["link_gbit"] for r in rows})
    for i, gbit in enumerate(links):
        for phi in sorted({r.get("overlap", 0.0) for r in rows}):
            rs = [r for r in rows if r["link_gbit"] == gbit and r.get("overlap", 0.0) == phi]
            ax.plot([r["workers"] for r in rs], [r["speedup"] for r in rs],
                    "o-" if phi else "o--", color=f"C{i}", alpha=0.5 + 0.5 * phi,
                    label=f"{gbit:g} Gbit/s (β = {8 / gbit:.3g} ns/B), φ = {phi:g}")
    n = sorted({r["workers"] for r in rows})
    ax.plot(n, n, "k:", lw=1, label="perfect")
    ax.set(xscale="log", yscale="log", xlabel="workers", ylabel="speedup per epoch (modelled)",
           title="16 M parameters, 17 B examples — modelled, not measured")
    ax.legend(fontsize=7)
    return ax
