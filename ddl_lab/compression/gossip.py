"""Gossip averaging on a ring: decentralised SGD without a global collective (lesson 08).

D-PSGD (Lian et al., NeurIPS 2017, "Can decentralized algorithms outperform centralized
algorithms?"): every worker takes an SGD step on its own shard, then replaces its model by
the average of itself and its ring neighbours, x_i ← (x_{i−1} + x_i + x_{i+1}) / 3. In matrix
form x ← W x with W symmetric and doubly stochastic, so the replicas' mean is what plain
averaging would give, and their spread (the consensus distance) shrinks by the second
largest |eigenvalue| of W per step: on a ring of n, λ_k = (1 + 2 cos 2πk/n) / 3.

- ``neighbours`` / ``mixing_matrix`` / ``second_eigenvalue``: the ring and its rate;
- ``gossip_worker``: D-PSGD (``mode="gossip"``) or allreduce SGD (``mode="allreduce"``) on
  every rank, on IID or label-skewed shards; bytes per step counted with the wiretap;
- ``run_gossip``: both on one cluster, merged into ``GossipResult``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.ml.data import digits, shard
from ddl_lab.ml.models import MLP, flat_params, set_flat_params
from ddl_lab.runtime.wiretap import Wiretap

__all__ = ["neighbours", "mixing_matrix", "second_eigenvalue", "consensus_distance",
           "GossipLog", "GossipResult", "gossip_worker", "run_gossip"]

MODES = ("gossip", "allreduce")


def neighbours(rank: int, n: int) -> list[int]:
    """The distinct ring neighbours of ``rank`` among n ranks (none for n = 1)."""
    return sorted({(rank - 1) % n, (rank + 1) % n} - {rank})


def mixing_matrix(n: int) -> np.ndarray:
    """W of one gossip step: each rank the mean of itself and its distinct neighbours."""
    W = np.zeros((n, n))
    for i in range(n):
        group = [i, *neighbours(i, n)]
        W[i, group] = 1.0 / len(group)
    return W


def second_eigenvalue(n: int) -> float:
    """|λ₂| of the ring's W: the factor by which gossip shrinks the consensus distance
    (per step, on its slowest mode). 1 − |λ₂| is the spectral gap."""
    if n <= 2:
        return 0.0
    return max(abs((1 + 2 * math.cos(2 * math.pi * k / n)) / 3) for k in range(1, n))


def consensus_distance(x: torch.Tensor) -> float:
    """RMS over ranks of ‖x_i − x̄‖, in float64 (one allreduce of the vector, one of a
    number)."""
    x = x.double()
    mean = x.clone()
    dist.all_reduce(mean)
    mean /= dist.get_world_size()
    d = torch.tensor([float((x - mean).pow(2).sum())], dtype=torch.float64)
    dist.all_reduce(d)
    return float((d / dist.get_world_size()).sqrt())


def _gossip_average(x: torch.Tensor) -> None:
    """x ← mean of x and the ring neighbours' x, in place, talking to the neighbours only."""
    n, rank = dist.get_world_size(), dist.get_rank()
    near = neighbours(rank, n)
    got = [torch.empty_like(x) for _ in near]
    work = [dist.isend(x, p) for p in near] + [dist.irecv(b, p) for b, p in zip(got, near)]
    for w in work:
        w.wait()
    x.add_(sum(got) if got else 0).div_(1 + len(near))


@dataclass
class GossipLog:
    """One rank's run: per step its minibatch loss, bytes it put on the wire to train
    (the consensus measurement not counted) and the consensus distance; test accuracy of
    its own replica and of the replicas' mean at ``eval_steps``."""

    loss: list[float] = field(default_factory=list)
    sent: list[float] = field(default_factory=list)
    consensus: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    mean_accuracy: list[float] = field(default_factory=list)


@torch.no_grad()
def _accuracy(net: torch.nn.Module, X: torch.Tensor, y: torch.Tensor) -> float:
    return float((net(X).argmax(1) == y).float().mean())


def gossip_worker(mode: str = "gossip", steps: int = 150, batch_size: int = 16,
                  lr: float = 0.2, skew: float = 0.0, seed: int = 0,
                  eval_every: int = 25) -> GossipLog:
    """Worker function (lesson 08): ``steps`` of D-PSGD on a ring (``mode="gossip"``: local
    SGD step, then average the parameters with the two ring neighbours) or of allreduce SGD
    (``mode="allreduce"``: average the gradients over all ranks, then step). Same model,
    shards (``skew`` 0: IID, 1: sorted by label) and minibatches in both modes."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    n, rank = dist.get_world_size(), dist.get_rank()
    train, test = digits(seed=0)
    X, y = shard(train, n, rank, skew=skew, seed=0).tensors()
    Xt, yt = test.tensors()
    torch.manual_seed(seed)
    net = MLP()
    gen = torch.Generator().manual_seed(1000 * seed + rank)
    log = GossipLog()
    with Wiretap() as tap:
        for step in range(1, steps + 1):
            idx = torch.randint(len(y), (batch_size,), generator=gen)
            net.zero_grad()
            loss = torch.nn.functional.cross_entropy(net(X[idx]), y[idx])
            loss.backward()
            before = tap.sent
            theta = flat_params(net)
            if mode == "gossip":
                theta -= lr * torch.cat([p.grad.reshape(-1) for p in net.parameters()])
                _gossip_average(theta)
            else:
                g = torch.cat([p.grad.reshape(-1) for p in net.parameters()])
                dist.all_reduce(g)
                theta -= lr * g / n
            log.sent.append(tap.sent - before)
            set_flat_params(net, theta)
            log.loss.append(loss.item())
            log.consensus.append(consensus_distance(theta))
            if step % eval_every == 0 or step == steps:
                log.eval_steps.append(step)
                log.accuracy.append(_accuracy(net, Xt, yt))
                mean = theta.clone()
                dist.all_reduce(mean)
                set_flat_params(net, mean / n)
                log.mean_accuracy.append(_accuracy(net, Xt, yt))
                set_flat_params(net, theta)
    return log


@dataclass
class GossipResult:
    """A run merged over its ranks: mean loss, bytes per step per rank (mean), consensus
    distance, the worst replica's and the mean model's test accuracy at ``eval_steps``."""

    mode: str
    skew: float
    world_size: int
    loss: np.ndarray
    sent: np.ndarray
    consensus: np.ndarray
    eval_steps: np.ndarray
    worst_accuracy: np.ndarray
    mean_accuracy: np.ndarray

    @property
    def bytes_per_step(self) -> float:
        """Bytes one rank puts on the wire per training step (mean over ranks and steps)."""
        return float(self.sent.mean())


def run_gossip(cluster: Any, mode: str, timeout: float = 300.0, **options: Any) -> GossipResult:
    """``gossip_worker(mode, **options)`` on every rank of ``cluster``, merged."""
    logs = cluster.run_with(gossip_worker, (mode,), options, timeout=timeout)
    return GossipResult(mode, float(options.get("skew", 0.0)), len(logs),
                        np.mean([lg.loss for lg in logs], axis=0),
                        np.mean([lg.sent for lg in logs], axis=0),
                        np.asarray(logs[0].consensus), np.asarray(logs[0].eval_steps),
                        np.min([lg.accuracy for lg in logs], axis=0),
                        np.asarray(logs[0].mean_accuracy))
