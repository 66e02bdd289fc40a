"""Lesson 00's worker functions: the sum of the ranks, and Monte Carlo π on N workers.

``sum_of_ranks`` is what the README's and lesson 00's torchrun command runs
(``python -m ddl_lab.torchrun ddl_lab.welcome:sum_of_ranks``). The picture is ``plots.py``.
"""
from __future__ import annotations

import time

import torch
import torch.distributed as dist


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
