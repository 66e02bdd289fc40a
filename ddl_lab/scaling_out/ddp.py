"""torch's DistributedDataParallel against lesson 05's synchronous SGD (lesson 11).

``ddp_train`` is ``data_parallel.engine.sync_sgd`` written with the library: the same
model, shards, mini-batches and plain SGD update, but the gradients are averaged by DDP,
bucket by bucket, *during* ``backward`` (lesson 06's ``GradientBuckets``, in C++). Both
record a ``Run``, so their losses and times per step compare directly.

- ``bucket_mb``: DDP's bucket size (``bucket_cap_mb``): smaller buckets start their
  allreduce earlier (more overlap with backward) but pay more messages;
- ``accumulate``: each step's mini-batch is cut into that many micro-batches whose
  gradients add up before the update (gradient accumulation); with ``no_sync`` only the
  last micro-batch's backward talks, without it every micro-batch's does;
- ``hook``: 'fp16' compresses the gradients on the wire (lesson 08's DDP hooks).
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from ddl_lab.data_parallel.workloads import Run, batch_indices
from ddl_lab.ml.data import shard
from ddl_lab.ml.models import flat_params
from ddl_lab.ml.workloads import build
from ddl_lab.runtime import device

__all__ = ["ddp_step", "accumulate_step", "ddp_train", "DDPRun", "bucket_sizes"]


# ---------------------------------------------------------------- the textbook version

def ddp_step(model: DDP, loss_fn, X: torch.Tensor, y: torch.Tensor, lr: float) -> float:
    """One step of synchronous SGD with DDP: backward averages the gradients over ranks."""
    model.zero_grad()
    loss = loss_fn(model(X), y)
    loss.backward()                       # hooks allreduce each bucket as it fills
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad              # p.grad is already the mean over all ranks
    return loss.item()


def accumulate_step(model: DDP, loss_fn, micro: list[tuple[torch.Tensor, torch.Tensor]],
                    lr: float, no_sync: bool = True) -> float:
    """One step on several micro-batches: gradients add up, one allreduce at the end."""
    model.zero_grad()
    total = 0.0
    for i, (X, y) in enumerate(micro):
        last = i == len(micro) - 1
        with model.no_sync() if no_sync and not last else nullcontext():
            loss = loss_fn(model(X), y) / len(micro)
            loss.backward()               # under no_sync: local .grad only, no allreduce
        total += loss.item()
    with torch.no_grad():
        for p in model.parameters():
            p -= lr * p.grad
    return total


# ---------------------------------------------------------------- the instrumented run

@dataclass
class DDPRun(Run):
    """Lesson 05's ``Run`` plus DDP's bucket sizes in bytes (``rounds``: allreduces)."""

    buckets: list[int] = field(default_factory=list)


def bucket_sizes(model: DDP) -> list[int]:
    """Bytes in each of DDP's gradient buckets (as rebuilt after the first step, in the
    order backward fills them)."""
    buckets = model.reducer._get_zeros_like_grad_buckets()
    return [b.buffer().numel() * b.buffer().element_size() for b in buckets]


def _wrap(model: nn.Module, bucket_mb: float, hook: str | None) -> DDP:
    ddp = DDP(model, bucket_cap_mb=bucket_mb)
    if hook == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif hook is not None:
        raise ValueError(f"unknown hook {hook!r}: use None or 'fp16'")
    return ddp


def ddp_train(workload: str = "digits-mlp", steps: int = 30, batch: int = 64,
              lr: float = 0.1, seed: int = 0, bucket_mb: float = 25.0, accumulate: int = 1,
              no_sync: bool = True, hook: str | None = None) -> DDPRun:
    """Worker: ``steps`` of synchronous SGD with DDP on lesson 05's data (lesson 11).

    Same shards and mini-batch indices as ``sync_sgd(workload, steps, batch, lr, seed)``;
    ``run.rounds`` counts the allreduces DDP launched (buckets × talking micro-batches),
    ``run.buckets`` the bucket sizes in bytes.
    """
    n, rank = dist.get_world_size(), dist.get_rank()
    if batch % n or (batch // n) % accumulate:
        raise ValueError(f"the global mini-batch {batch} must divide by the world size {n} "
                         f"and each rank's {batch // n} examples by accumulate={accumulate}")
    model, train, _, loss_fn = build(workload, seed)
    X, y = shard(train, n, rank, seed=seed).tensors()
    dev = device()
    model, X, y = model.to(dev), X.to(dev), y.to(dev)
    idx = batch_indices(len(y), batch // n, steps, seed, rank)
    ddp = _wrap(model, bucket_mb, hook)
    run = DDPRun(rank)
    dist.barrier()
    t0 = time.perf_counter()
    for t in range(steps):
        if accumulate == 1:
            loss = ddp_step(ddp, loss_fn, X[idx[t]], y[idx[t]], lr)
        else:
            parts = idx[t].chunk(accumulate)
            loss = accumulate_step(ddp, loss_fn, [(X[p], y[p]) for p in parts], lr, no_sync)
        run.loss.append(loss)
        run.time.append(time.perf_counter() - t0)
    run.buckets = bucket_sizes(ddp)
    run.rounds = steps * len(run.buckets) * (1 if no_sync else accumulate)
    run.params = flat_params(model).cpu()
    return run
