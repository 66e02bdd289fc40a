"""The α–β(–γ) cost model of an allreduce, and α, β, γ measured here (lesson 06)."""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.runtime import device

__all__ = ["sent_bytes", "ping_pong", "fit_alpha_beta", "reduce_cost", "cost_model"]


def sent_bytes(op: str, world_size: int, nbytes: float, root: bool = False) -> float:
    """Bytes one of ``world_size`` ranks puts on the wire for ``op`` of the ``nbytes`` it
    hands in, in the ring model (lesson 06; lesson 12's meter charges exactly this).

    all_reduce 2(n−1)/n·S (share-reduce, then share-only); all_gather (n−1)·S (its S to
    each of the others); broadcast, reduce, reduce_scatter, all_to_all, scatter (n−1)/n·S
    (its share of the (n−1)·S moved); gather S from a non-root, 0 at the ``root``; send S;
    recv and barrier nothing.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    n = world_size
    share = (n - 1) / n
    factors = {"all_reduce": 2 * (n - 1) / n, "all_gather": n - 1, "broadcast": share,
               "reduce": share, "reduce_scatter": share, "all_to_all": share,
               "scatter": share, "gather": 0 if root else 1, "send": 1, "recv": 0,
               "barrier": 0}
    if op not in factors:
        raise ValueError(f"no ring-model bytes for {op!r}: use one of {sorted(factors)}")
    return factors[op] * nbytes


def ping_pong(sizes: Sequence[int], repeats: int = 5) -> list[float]:
    """Worker function: one-way time of a message of each size between ranks 0 and 1.

    Half the best round-trip time over ``repeats``; other ranks idle. (lesson 06's α–β fit)
    """
    rank = dist.get_rank()
    out = []
    for size in sizes:
        t = torch.zeros(max(1, size // 4), device=device())
        best = math.inf
        for _ in range(repeats + 1):
            dist.barrier()
            if rank > 1:
                continue
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(t, 1)
                dist.recv(t, 1)
            else:
                dist.recv(t, 0)
                dist.send(t, 0)
            best = min(best, time.perf_counter() - t0)
        out.append(best / 2)
    return out


def fit_alpha_beta(sizes: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    """Least-squares α (s) and β (s/byte) of t = α + β·S, weighted by relative error."""
    S, t = np.asarray(sizes, float), np.asarray(seconds, float)
    A = np.stack([1 / t, S / t], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    return max(float(alpha), 0.0), max(float(beta), 0.0)


def reduce_cost(nbytes: int = 16 << 20, dtype: torch.dtype = torch.float32) -> float:
    """γ: seconds per byte of ``a += b`` on this machine (the reduction's own cost)."""
    a = torch.ones(nbytes // torch.tensor([], dtype=dtype).element_size(), dtype=dtype)
    b = torch.ones_like(a)
    best = math.inf
    for _ in range(5):
        t0 = time.perf_counter()
        a.add_(b)
        best = min(best, time.perf_counter() - t0)
    return best / nbytes


def cost_model(algorithm: str, n: int, nbytes: float, alpha: float, beta: float,
               gamma: float = 0.0) -> float:
    """Predicted seconds of an allreduce of ``nbytes`` on ``n`` ranks (lesson 06).

    ring: 2(n−1)·α + 2(n−1)/n·S·β (+ (n−1)/n·S·γ for the additions);
    tree: 2⌈log2 n⌉·(α + S·β) (+ ⌈log2 n⌉·S·γ);
    reduce_broadcast: 2(n−1)·(α + S·β) (+ (n−1)·S·γ): the root handles every message.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    S = float(nbytes)
    if algorithm == "ring":
        return (2 * (n - 1) * alpha + sent_bytes("all_reduce", n, S) * beta
                + (n - 1) / n * S * gamma)          # γ: the (n−1)/n·S bytes each rank adds
    if algorithm == "tree":
        rounds = math.ceil(math.log2(n))
        return 2 * rounds * (alpha + S * beta) + rounds * S * gamma
    if algorithm == "reduce_broadcast":
        return 2 * (n - 1) * (alpha + S * beta) + (n - 1) * S * gamma
    raise ValueError(f"no cost model for {algorithm!r}: use 'ring', 'tree' or "
                     "'reduce_broadcast'")
