"""Parallel gradient descent on message passing (lesson 04; Jamshidi's lecture).

Partition the m examples into k shards S_1..S_k, one per worker. The gradient of
J(θ) = 1/(2m) Σ_i (x_i·θ − y_i)² is a sum over examples, so it splits over the shards:

    ∇J(θ) = 1/m · ( Σ_{i∈S_1} (x_i·θ − y_i) x_i  + … +  Σ_{i∈S_k} (x_i·θ − y_i) x_i )

Each worker sums over its own shard; the sums are added (``reduce``) at the root, which
divides by m once, takes the step and ``bcast``s the new θ. The θ after every step is
the one single-process batch gradient descent computes.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from ddl_lab.message_passing.comm import Comm, comm_run
from ddl_lab.ml.models import linreg_loss

__all__ = ["parallel_gd", "GDResult", "split_sizes", "run_parallel_gd", "batch_gd_losses"]


@dataclass
class GDResult:
    """One rank's view of a parallel GD run."""

    theta: np.ndarray
    losses: list[float]      # J(θ_t) before step t, t = 0..steps-1 (every rank has them)
    compute_s: float         # seconds this rank spent on its shard's sums
    comm_s: float            # seconds in reduce + bcast, waiting for the others included


def parallel_gd(comm: Comm, shards: list[tuple[np.ndarray, np.ndarray]], steps: int,
                lr: float, theta0: np.ndarray | None = None) -> GDResult:
    """Batch GD over k shards (runs on every rank; rank r works on ``shards[r]``).

    One message per rank and step carries both sums, [Σ ∇ℓ_i, Σ ½ r_i²], to the root.
    """
    X, y = shards[comm.rank]
    m = sum(len(ys) for _, ys in shards)
    theta = comm.bcast(np.zeros(X.shape[1]) if theta0 is None else theta0, root=0)
    losses, compute_s, comm_s = [], 0.0, 0.0
    for _ in range(steps):
        t0 = time.perf_counter()
        r = X @ theta - y
        local = np.append(X.T @ r, 0.5 * (r @ r))
        t1 = time.perf_counter()
        total = comm.reduce(local, root=0)
        if comm.rank == 0:
            losses.append(float(total[-1]) / m)
            theta = theta - lr * total[:-1] / m
        theta = comm.bcast(theta, root=0)
        compute_s += t1 - t0
        comm_s += time.perf_counter() - t1
    return GDResult(theta, comm.bcast(losses, root=0), compute_s, comm_s)


def split_sizes(m: int, k: int) -> list[int]:
    """Shard sizes of m examples over k workers, as equal as possible."""
    if not 1 <= k <= m:
        raise ValueError(f"cannot split {m} examples over {k} workers: the world size must "
                         f"be between 1 and {m}")
    return [len(a) for a in np.array_split(np.arange(m), k)]


def run_parallel_gd(X: np.ndarray, y: np.ndarray, world_size: int, steps: int = 50,
                    lr: float = 0.1, sizes: list[int] | None = None) -> list[GDResult]:
    """Split (X, y) into ``world_size`` shards (``sizes``, default equal) and run
    ``parallel_gd`` on that many workers; the results in rank order (lesson 04)."""
    sizes = sizes or split_sizes(len(y), world_size)
    if len(sizes) != world_size or sum(sizes) != len(y) or min(sizes) < 1:
        raise ValueError(f"sizes {sizes} must be {world_size} positive shard sizes that "
                         f"add up to m = {len(y)}")
    if not lr > 0 or steps < 1:
        raise ValueError(f"need lr > 0 and steps >= 1, got lr={lr!r}, steps={steps!r}")
    cuts = np.cumsum(sizes)[:-1]
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    shards = list(zip(np.split(X, cuts), np.split(y, cuts)))
    return comm_run(parallel_gd, world_size, shards, steps, lr)


def batch_gd_losses(X: np.ndarray, y: np.ndarray, steps: int,
                    lr: float) -> tuple[np.ndarray, list[float]]:
    """Single-process batch GD (the reference): θ after ``steps`` steps and J before each."""
    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    theta, losses = np.zeros(X.shape[1]), []
    for _ in range(steps):
        losses.append(linreg_loss(theta, X, y))
        theta = theta - lr * X.T @ (X @ theta - y) / len(y)
    return theta, losses
