"""Lesson 00's worker functions: hello from every rank, and Monte Carlo π on N workers."""
from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist


def hello() -> dict[str, object]:
    """Each rank introduces itself: rank, world size, process id, backend."""
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(),
            "pid": os.getpid(), "backend": dist.get_backend(),
            "torch threads": torch.get_num_threads()}


def sum_of_ranks() -> int:
    """Every rank contributes its rank; all_reduce leaves the sum n(n-1)/2 on every rank."""
    t = torch.tensor([dist.get_rank()], dtype=torch.int64)
    dist.all_reduce(t)
    return int(t.item())


def monte_carlo_pi(samples_per_rank: int, seed: int = 0) -> dict[str, float]:
    """Each rank throws darts at the unit square; an all_reduce adds up the hits."""
    rank, n = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    t0 = time.perf_counter()
    xy = torch.rand(samples_per_rank, 2, generator=g)
    hits = (xy.pow(2).sum(1) <= 1.0).sum().to(torch.float64)
    local = 4.0 * hits.item() / samples_per_rank
    compute = time.perf_counter() - t0
    total = hits.clone()
    dist.all_reduce(total)
    return {"rank": rank, "local_pi": local, "pi": 4.0 * total.item() / (n * samples_per_rank),
            "compute_s": compute, "comm_s": time.perf_counter() - t0 - compute}


def plot_pi(results: list[dict[str, float]]) -> None:
    """Lesson 00's picture: each rank's own estimate, the combined one, and their times."""
    import math
    import matplotlib.pyplot as plt
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
