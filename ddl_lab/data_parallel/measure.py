"""Lesson 05's measures: one process replaying synchronous SGD, a step's compute against
its allreduce, the least disturbed of several runs, and a replica's test accuracy."""
from __future__ import annotations

import time
from typing import Callable

import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.data_parallel.workloads import Run, batch_indices, build, local_batch, sgd_update
from ddl_lab.ml.data import shard
from ddl_lab.ml.models import flat_grads, flat_params, set_flat_params
from ddl_lab.ml.training import evaluate_accuracy
from ddl_lab.runtime import device

__all__ = ["replay_single_process", "compute_vs_communication", "least_disturbed",
           "replica_accuracy"]


def replay_single_process(workload: str, steps: int, batch: int, lr: float, world_size: int,
                          seed: int = 0, skew: float = 0.0) -> torch.Tensor:
    """One process, one model, the same global minibatches as ``sync_sgd`` on R ranks.

    Synchronous SGD computes exactly this (up to float rounding): Jamshidi's lecture's "the
    computation is completely deterministic". Returns the final parameters.
    """
    model, train, _, loss_fn = build(workload, seed)
    b = local_batch(batch, world_size)
    shards = [shard(train, world_size, r, skew=skew, seed=seed).tensors()
              for r in range(world_size)]
    idx = [batch_indices(len(sy), b, steps, seed, r) for r, (_, sy) in enumerate(shards)]
    for t in range(steps):
        X = torch.cat([sx[idx[r][t]] for r, (sx, _) in enumerate(shards)])
        y = torch.cat([sy[idx[r][t]] for r, (_, sy) in enumerate(shards)])
        model.zero_grad()
        loss_fn(model(X), y).backward()
        sgd_update(model, lr)
    return flat_params(model)


def compute_vs_communication(workload: str = "digits-mlp", batch: int = 32,
                             repeats: int = 5) -> dict[str, float]:
    """Worker function: seconds of one forward+backward on ``batch`` local examples and of
    one allreduce of the gradients, and their ratio (lesson 05: CNN vs MLP, batch size)."""
    model, train, _, loss_fn = build(workload)
    X, y = train.tensors()
    dev = device()
    model, X, y = model.to(dev), X[:batch].to(dev), y[:batch].to(dev)
    comp, comm = [], []
    for i in range(repeats + 1):
        dist.barrier()
        t0 = time.perf_counter()
        model.zero_grad()
        loss_fn(model(X), y).backward()
        g = flat_grads(model)
        t1 = time.perf_counter()
        dist.barrier()
        t2 = time.perf_counter()
        dist.all_reduce(g)
        t3 = time.perf_counter()
        if i:
            comp.append(t1 - t0)
            comm.append(t3 - t2)
    c, m = float(np.median(comp)), float(np.median(comm))
    return {"compute": c, "communicate": m, "ratio": c / m,
            "params": sum(p.numel() for p in model.parameters())}


def least_disturbed(cluster, fn: Callable, *args, repeats: int = 2, **kwargs) -> list[Run]:
    """Run ``fn`` on ``cluster`` ``repeats`` times; keep the fastest run (the one least
    disturbed by other programs on a shared machine), as timing a figure needs."""
    best: list[Run] | None = None
    for _ in range(repeats):
        runs = cluster.run(fn, *args, **kwargs)
        if best is None or max(r.time[-1] for r in runs) < max(r.time[-1] for r in best):
            best = runs
    return best


def replica_accuracy(workload: str, params: torch.Tensor, seed: int = 0) -> float:
    """Fraction of the held-out test set that a model with these flat parameters (a run's
    ``Run.params``) classifies correctly."""
    model, _, test, _ = build(workload, seed)
    set_flat_params(model, torch.as_tensor(params))
    return evaluate_accuracy(model, test)
