"""What a collective costs: the bytes a rank puts on the wire, and the α–β times (lesson 06
derives them; the wiretap, lesson 10's counts, lessons 11 to 14's models use them).

A message of S bytes takes α + S·β (α: latency, β: seconds per byte; γ: seconds per byte
of the reduction's own additions). Over n ranks:

    ring allreduce              2(n−1)·α + 2(n−1)/n·S·β  (+ (n−1)/n·S·γ)
    binomial tree, up and down  2⌈log2 n⌉·(α + S·β)      (+ ⌈log2 n⌉·S·γ)
    reduce + broadcast (star)   2(n−1)·(α + S·β)         (+ (n−1)·S·γ)

and 0 on one rank. ``sent_bytes`` is what a rank puts on the wire per operation in the
ring model.
"""
from __future__ import annotations

import math

__all__ = ["sent_bytes", "message_time", "ring_time", "tree_time", "star_time"]


def sent_bytes(op: str, world_size: int, nbytes: float, root: bool = False) -> float:
    """Bytes one of ``world_size`` ranks puts on the wire for ``op`` of the ``nbytes`` it
    hands in, in the ring model (lesson 06; the wiretap and lesson 15's meter charge exactly
    this).

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


def message_time(nbytes: float, alpha: float, beta: float) -> float:
    """Seconds of one message of ``nbytes``: α + S·β."""
    return alpha + nbytes * beta


def _ranks(n: int) -> None:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")


def ring_time(n: int, nbytes: float, alpha: float, beta: float, gamma: float = 0.0,
              pieces: int = 1) -> float:
    """Seconds of a ring allreduce of ``nbytes`` on ``n`` ranks: 2(n−1)·α + 2(n−1)/n·S·β,
    plus (n−1)/n·S·γ for the additions. ``pieces``: the S bytes go as that many allreduces
    (DDP's buckets, lesson 11), each paying the 2(n−1)·α latency."""
    _ranks(n)
    S = float(nbytes)
    return (2 * (n - 1) * pieces * alpha + sent_bytes("all_reduce", n, S) * beta
            + (n - 1) / n * S * gamma)


def tree_time(n: int, nbytes: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Seconds of a binomial-tree allreduce (reduce up, broadcast down): every one of its
    2⌈log2 n⌉ rounds carries the whole tensor, 2⌈log2 n⌉·(α + S·β) (+ ⌈log2 n⌉·S·γ)."""
    _ranks(n)
    rounds = math.ceil(math.log2(n))
    return 2 * rounds * message_time(nbytes, alpha, beta) + rounds * nbytes * gamma


def star_time(n: int, nbytes: float, alpha: float, beta: float, gamma: float = 0.0) -> float:
    """Seconds of reduce + broadcast through one root, which handles every message:
    2(n−1)·(α + S·β) (+ (n−1)·S·γ)."""
    _ranks(n)
    return 2 * (n - 1) * message_time(nbytes, alpha, beta) + (n - 1) * nbytes * gamma
