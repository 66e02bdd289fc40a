"""Hybrid data + model parallelism (lesson 09; DistBelief "exploits both model parallelism and
data parallelism", in the summary of Dean et al. 2012).

``replicas × stages`` ranks: rank = replica · stages + stage. Each *pipeline* (a model
replica) is ``stages`` consecutive ranks and trains on its own share of the mini-batch
with the GPipe stage step; the ``replicas`` copies of each *stage* then average their
gradients over a process group of their own (``dist.new_group``) — an allreduce among
``replicas`` ranks, not the whole world — and take the same step. With equal shares the
result equals one process on the whole mini-batch.
"""
from __future__ import annotations

import torch.distributed as dist
from torch import nn

from ddl_lab.model_parallel.pipeline import sgd_update, stage_params
from ddl_lab.model_parallel.stages import (build_layers, cut, digits_batches, group,
                                           microbatches, neighbours, stage_step)

__all__ = ["layout", "average_stage_grads", "hybrid_run"]


def layout(replicas: int, stages: int) -> tuple[list[list[int]], list[list[int]]]:
    """(the ranks of each pipeline, the ranks holding each stage)."""
    if replicas < 1 or stages < 1:
        raise ValueError(f"need replicas >= 1 and stages >= 1, got replicas={replicas}, "
                         f"stages={stages}")
    pipelines = [[d * stages + s for s in range(stages)] for d in range(replicas)]
    return pipelines, [list(col) for col in zip(*pipelines)]


def average_stage_grads(stage: nn.Module, copies) -> None:
    """Average this stage's gradients with its copies in the other pipelines (``copies``:
    their process group)."""
    k = dist.get_world_size(copies)
    for q in stage.parameters():
        dist.all_reduce(q.grad, group=copies)
        q.grad /= k


def hybrid_run(replicas: int = 2, stages: int = 2, m: int = 2, steps: int = 2,
               batch: int = 32, lr: float = 0.1, seed: int = 0, kind: str = "mlp",
               hidden: int = 64) -> dict | None:
    """Worker function: ``replicas`` pipelines of ``stages`` stages, data parallel across
    the pipelines (lesson 09). Ranks beyond replicas × stages idle (return None)."""
    n, rank = dist.get_world_size(), dist.get_rank()
    if replicas * stages > n or batch % replicas:
        raise ValueError(f"{replicas} × {stages} ranks on a cluster of {n}, batch {batch}: "
                         "need replicas·stages <= ranks and a batch the replicas divide")
    pipelines, stage_ranks = layout(replicas, stages)
    groups = [group(ranks) for ranks in stage_ranks]        # every rank makes every group
    if rank >= replicas * stages:
        return None
    d, s = divmod(rank, stages)
    stage = cut(build_layers(kind, hidden, seed), stages)[s]
    prev, nxt = neighbours(rank, pipelines[d])
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for X, y in digits_batches(batch, steps, seed):
        mine = microbatches(X.chunk(replicas)[d], y.chunk(replicas)[d], m)
        loss = stage_step(stage, mine, loss_fn, prev, nxt)      # this pipeline's share
        average_stage_grads(stage, groups[s])                  # across the pipelines
        if loss is not None:
            losses.append(loss)
        sgd_update(stage, lr)
    return {"rank": rank, "replica": d, "stage": s, "losses": losses,
            "params": stage_params(stage)}
