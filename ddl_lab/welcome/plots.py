"""Lesson 00's picture: Monte Carlo π, one estimate per worker and one combined.

``figure_x(data) -> Figure`` draws several panels.
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
from matplotlib.figure import Figure

__all__ = ["figure_pi"]


def figure_pi(results: list[dict[str, float]]) -> Figure:
    """Lesson 00's picture: each rank's own estimate, the combined one, and their times
    (``results``: what ``monte_carlo_pi`` returned on every rank)."""
    ranks = [r["rank"] for r in results]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.2))
    a.bar(ranks, [r["local_pi"] for r in results], color="tab:blue", label="rank's own estimate")
    a.axhline(results[0]["pi"], color="tab:orange", lw=2,
              label=f"all_reduce estimate {results[0]['pi']:.5f}")
    a.axhline(math.pi, color="k", ls="--", lw=1, label="π")
    spread = max(abs(r["local_pi"] - math.pi) for r in results) * 1.6 + 1e-3
    a.set(ylim=(math.pi - spread, math.pi + spread), xlabel="rank", ylabel="estimate of π",
          xticks=ranks, title="one estimate per worker, one combined")
    a.legend(fontsize=8, loc="lower right")
    b.bar(ranks, [1e3 * r["compute_s"] for r in results], label="compute")
    b.bar(ranks, [1e3 * r["comm_s"] for r in results],
          bottom=[1e3 * r["compute_s"] for r in results], label="all_reduce (incl. waiting)")
    b.set(xlabel="rank", ylabel="ms", xticks=ranks, title="where each worker spent its time")
    b.legend(fontsize=8)
    fig.tight_layout()
    return fig
