"""The α–β(–γ) cost model of an allreduce, and α, β, γ measured here (lesson 06).

The ring, the tree and the star, and the bytes of each operation (``sent_bytes``), are the
shared ``runtime.costs``: several lessons and the wiretap count with them."""
from __future__ import annotations

import math
import time
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.runtime import device
from ddl_lab.runtime.costs import message_time, ring_time, sent_bytes, star_time, tree_time

__all__ = ["sent_bytes", "ping_pong", "fit_alpha_beta", "reduce_cost", "cost_model",
           "model_counts", "best_chunks", "MODELLED", "shared_cores"]


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
               gamma: float = 0.0, **options) -> float:
    """Predicted seconds of an allreduce of ``nbytes`` on ``n`` ranks (lesson 06).

    ring: 2(n−1)·α + 2(n−1)/n·S·β (+ (n−1)/n·S·γ for the additions);
    tree: 2⌈log2 n⌉·(α + S·β) (+ ⌈log2 n⌉·S·γ);
    reduce_broadcast: 2(n−1)·(α + S·β) (+ (n−1)·S·γ): the root handles every message;
    halving_doubling (p = 2^⌊log2 n⌋): 2·log2 p·α + 2(p−1)/p·S·β, plus 2(α + S·β) to fold
    and unfold the n − p extra ranks; pipelined_tree (depth d = ⌊log2 n⌋, m pieces, two
    children): 2(d + m − 1)·2·(α + S/m·β), m as given (``chunks=``) or the best;
    two_level (hosts of g = ``per_host`` ranks, H hosts): 2(g−1)·(α + S/g·β) inside the
    hosts + 2(H−1)·α' + 2(H−1)/H·(S/g)·β' between them, (α', β') = ``inter`` or (α, β).
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if n == 1:
        return 0.0
    S = float(nbytes)
    simple = {"ring": ring_time, "tree": tree_time, "reduce_broadcast": star_time}
    if algorithm in simple:
        return simple[algorithm](n, S, alpha, beta, gamma)
    if algorithm in MODELLED:
        return _beyond_ring(algorithm, n, S, alpha, beta, gamma, **options)
    raise ValueError(f"no cost model for {algorithm!r}: use one of "
                     f"{['ring', 'tree', 'reduce_broadcast', *MODELLED]}")


# ------------------------------------------------ lesson 06 §7: beyond one ring

MODELLED = ("halving_doubling", "pipelined_tree", "two_level")


def _fold(n: int) -> tuple[int, int]:
    """(p, r): the largest power of two p ≤ n, and r = n − p ranks folded onto others."""
    p = 1 << (n.bit_length() - 1)
    return p, n - p


def _tree_shape(n: int) -> tuple[int, int]:
    """(depth, most children) of the binary tree 0 ← 1, 2; 1 ← 3, 4; … on n ranks."""
    return (n.bit_length() - 1, min(2, n - 1))


def best_chunks(n: int, nbytes: float, alpha: float, beta: float, most: int = 256) -> int:
    """The number of pieces that minimises the pipelined tree's modelled time."""
    return min(range(1, most + 1),
               key=lambda m: cost_model("pipelined_tree", n, nbytes, alpha, beta, chunks=m))


def _beyond_ring(algorithm: str, n: int, S: float, alpha: float, beta: float, gamma: float,
                 chunks: int | None = None, per_host: int = 2,
                 inter: tuple[float, float] | None = None) -> float:
    if algorithm == "halving_doubling":
        p, r = _fold(n)
        rounds, moved = 2 * (p.bit_length() - 1), 2 * (p - 1) / p * S
        fold = 2 * message_time(S, alpha, beta) + S * gamma if r else 0.0
        return rounds * alpha + moved * beta + (p - 1) / p * S * gamma + fold
    if algorithm == "pipelined_tree":
        m = chunks or best_chunks(n, S, alpha, beta)
        depth, kids = _tree_shape(n)
        return 2 * (depth + m - 1) * kids * message_time(S / m, alpha, beta) + kids * S * gamma
    g = min(per_host, n)                            # two_level, hosts of g ranks
    hosts = -(-n // g)
    a2, b2 = inter if inter is not None else (alpha, beta)
    # a ring inside each host, then one between the hosts over each owner's S/g
    return ring_time(g, S, alpha, beta, gamma) + ring_time(hosts, S / g, a2, b2, gamma)


def model_counts(algorithm: str, n: int, nbytes: int, chunks: int = 8,
                 per_host: int = 2) -> dict[str, int]:
    """The rounds and bytes ``algorithms.counts`` reads off a run's records, predicted: the
    busiest rank's steps that move a message, and the most bytes one rank sends (lesson 06
    §7). Exact for lengths the algorithm divides evenly (the tree: at least ``chunks``
    elements; two-level: equal hosts)."""
    S = nbytes
    if n == 1:
        return {"rounds": 0, "bytes": 0}
    if algorithm == "ring":
        return {"rounds": 2 * (n - 1), "bytes": 2 * (n - 1) * S // n}
    if algorithm == "halving_doubling":
        p, r = _fold(n)
        rounds = 2 * (p.bit_length() - 1)
        return {"rounds": rounds + (2 if r else 0),
                "bytes": 2 * (p - 1) * S // p + (S if r else 0)}
    if algorithm == "pipelined_tree":
        sends = max((r > 0) + sum(c < n for c in (2 * r + 1, 2 * r + 2)) for r in range(n))
        return {"rounds": 2 * chunks, "bytes": sends * S}
    if algorithm == "two_level":
        g = min(per_host, n)
        hosts = n // g
        return {"rounds": 2 * (g - 1) + 2 * (hosts - 1),
                "bytes": 2 * (g - 1) * S // g + 2 * (hosts - 1) * S // (g * hosts)}
    raise ValueError(f"no counts for {algorithm!r}")


def _totals(algorithm: str, n: int, S: float, chunks: int) -> tuple[float, float]:
    """(messages, bytes) that all n ranks together send in one allreduce."""
    p, r = _fold(n)
    messages = {"tree": 2 * (n - 1), "reduce_broadcast": 2 * (n - 1),
                "ring": 2 * n * (n - 1), "pipelined_tree": 2 * (n - 1) * chunks,
                "halving_doubling": 2 * p * (p.bit_length() - 1) + 2 * r}[algorithm]
    return messages, 2 * (n - 1) * S + (2 * r * S if algorithm == "halving_doubling" else 0)


def shared_cores(algorithm: str, n: int, nbytes: float, alpha: float, beta: float,
                 cores: int, gamma: float = 0.0, chunks: int = 8) -> float:
    """The α–β model on one machine whose ``cores`` run all n ranks (lesson 06 §7): every
    message costs a core α and every byte β, so when n > cores the ranks queue for the
    cores and the time is at least everyone's work over the cores, not the critical path
    of the α–β model alone."""
    if n == 1:
        return 0.0
    messages, moved = _totals(algorithm, n, nbytes, chunks)
    alone = cost_model(algorithm, n, nbytes, alpha, beta, gamma,
                       **({"chunks": chunks} if algorithm == "pipelined_tree" else {}))
    return max(alone, (messages * alpha + moved * (beta + gamma / 2)) / min(cores, n))
