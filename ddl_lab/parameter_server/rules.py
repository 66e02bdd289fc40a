"""The rules a shard applies, as lesson 07 shows them.

A shard owns an equal slice θ[lo:hi] of the flattened parameters (``shard_ranges``) and
applies every push to it with a *push handler* ``(θ, g, G, lr, eps) -> (θ, G)``: plain
SGD, Adagrad with G kept per shard (DistBelief), or EASGD's elastic move of the centre.
Before a replica reads θ, the consistency gate decides whether it must wait: BSP
(everyone at every clock), SSP with bound s (``_ssp_must_wait``), or async (nobody
waits). Zhang et al.'s staleness-aware rate divides lr by each gradient's staleness
(``_staleness_lr``). The gate and the rate are exercise 07's tasks, and Adagrad's
handler is exercise 01's formula, so they carry private names here; ``Shard``
(``shard.py``) uses them by default.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

__all__ = ["MODES", "RULES", "PUSH", "shard_ranges", "sgd_push", "elastic_push",
           "validate"]

MODES = ("bsp", "ssp", "async")
RULES = ("sgd", "adagrad", "elastic")


def shard_ranges(n: int, shards: int) -> list[tuple[int, int]]:
    """[lo, hi) of each shard: ``shards`` equal slices of n parameters (sizes differ by ≤ 1)."""
    if not isinstance(shards, (int, np.integer)) or shards < 1:
        raise ValueError(f"shards must be a positive integer, got {shards!r}")
    if shards > n:
        raise ValueError(f"cannot split {n} parameters over {shards} shards: use at most {n}")
    edges = np.linspace(0, n, shards + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def _ssp_must_wait(clock: int, clocks: Sequence[int], s: int) -> bool:
    """The stale-synchronous gate: must a replica at ``clock`` wait before it reads θ?

    ``clocks`` holds the clock of every live replica (its own included). It waits while
    it is more than ``s`` clocks ahead of the slowest one; s = 0 is BSP.
    """
    return clock - min(clocks) > s


def sgd_push(theta: np.ndarray, grad: np.ndarray, G: np.ndarray, lr: float,
             eps: float) -> tuple[np.ndarray, np.ndarray]:
    """A shard's plain SGD push handler: θ ← θ − lr·g (G is left alone)."""
    theta -= lr * grad
    return theta, G


def _adagrad_push(theta: np.ndarray, grad: np.ndarray, G: np.ndarray, lr: float,
                  eps: float) -> tuple[np.ndarray, np.ndarray]:
    """A shard's Adagrad push handler (DistBelief): G ← G + g², θ ← θ − lr·g/(√G + eps).

    Each shard keeps G for its own slice only: Adagrad needs nothing from other shards.
    """
    G += grad * grad
    theta -= lr * grad / (np.sqrt(G) + eps)
    return theta, G


def elastic_push(theta: np.ndarray, delta: np.ndarray, G: np.ndarray, lr: float,
                 eps: float) -> tuple[np.ndarray, np.ndarray]:
    """EASGD's centre update: the replica pushes α(x_i − x̃) and the centre moves by it."""
    theta += delta
    return theta, G


PUSH: dict[str, Callable] = {"sgd": sgd_push, "adagrad": _adagrad_push, "elastic": elastic_push}


def _staleness_lr(lr: float, staleness: int) -> float:
    """Zhang et al.'s staleness-aware rate: lr/τ for a gradient τ ≥ 1 updates old; a fresh
    gradient (τ = 0) keeps the full rate lr."""
    return lr / staleness if staleness > 0 else lr


def validate(rule: str, lr: float, mode: str, s: int) -> None:
    """Raise ValueError naming the first bad argument of a shard or a server."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not isinstance(s, (int, np.integer)) or s < 0:
        raise ValueError(f"the staleness bound s must be an integer >= 0, got {s!r}")
    if not lr >= 0:
        raise ValueError(f"lr must be >= 0, got {lr!r}")

