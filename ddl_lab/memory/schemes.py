"""What each scheme keeps in memory, per rank, measured (lesson 10; ZeRO, Rajbhandari et al.
2020; the schemes of lesson 09 beside those of this lesson).

One training step of the same MLP with Adam under each scheme, on every rank of the
cluster; then the bytes this rank really holds are counted, tensor by tensor:

- **parameters** and **gradients** (a ``DTensor``'s own shard only),
- **optimizer state** (Adam's two moments and its step counter, on this rank),
- **activations**: the peak of what autograd kept for backward (``ActivationMeter``).

Schemes: one process (rank 0 alone, the whole batch); data parallel (``DDP``, B/n
examples per rank); ZeRO-1 (DDP + ``ZeroRedundancyOptimizer``: each rank keeps the Adam
state of its share of the parameters); FSDP (``fully_shard``: parameters, gradients and
state all sharded, ZeRO-3); a pipeline of n stages (GPipe and 1F1B, m micro-batches);
tensor parallel (``parallelize_module``, every rank sees the whole batch).
"""
from __future__ import annotations

from typing import Callable, Iterable

import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.memory.anatomy import MiB, Memory, state_tensors, tensor_bytes
from ddl_lab.ml.activations import ActivationMeter
from ddl_lab.model_parallel.pipeline import (gpipe_order, input_shape, one_f_one_b_order,
                                             run_schedule)
from ddl_lab.model_parallel.stages import (build_layers, cut, digits_batches, microbatches,
                                           neighbours)
from ddl_lab.model_parallel.tensor_parallel import device_mesh, library_tp

__all__ = ["SCHEMES", "MiB", "Memory", "memory_run", "memory_table"]

SCHEMES = ["one process", "DDP", "ZeRO-1", "FSDP", "pipeline GPipe", "pipeline 1F1B",
           "tensor parallel"]


def _count(scheme: str, model: nn.Module, opt, meter: ActivationMeter) -> Memory:
    ps = list(model.parameters())
    return Memory(scheme, dist.get_rank(), tensor_bytes(ps), tensor_bytes(q.grad for q in ps),
                  tensor_bytes(state_tensors(opt)), meter.peak)


def _adam(params) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=1e-3)


def _step(model: nn.Module, opt, X: torch.Tensor, y: torch.Tensor, scheme: str) -> Memory:
    meter = ActivationMeter()
    meter.resident(X, y, *model.parameters())
    with meter.recording():
        loss = nn.functional.cross_entropy(model(X), y)
    loss.backward()
    opt.step()
    return _count(scheme, model, opt, meter)


def _pipeline(layers: nn.Sequential, X: torch.Tensor, y: torch.Tensor, m: int,
              order_of: Callable, scheme: str) -> Memory:
    n, rank = dist.get_world_size(), dist.get_rank()
    stages = cut(layers, n, by="params")
    prev, nxt = neighbours(rank, list(range(n)))
    meter = ActivationMeter()
    run_schedule(stages[rank], order_of(rank, n, m), microbatches(X, y, m),
                 nn.CrossEntropyLoss(), prev, nxt, input_shape(stages, rank), meter=meter)
    opt = _adam(stages[rank].parameters())
    opt.step()
    return _count(scheme, stages[rank], opt, meter)


def memory_run(hidden: int = 512, depth: int = 4, batch: int = 64, m: int = 8,
               seed: int = 0, schemes: Iterable[str] = SCHEMES) -> list[Memory | None]:
    """Worker function: one Adam step of the MLP under each scheme, on every rank of the
    cluster; this rank's measured ``Memory`` per scheme (None where it has no part)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    n, rank = dist.get_world_size(), dist.get_rank()
    if batch % n:
        raise ValueError(f"batch = {batch} must divide by the {n} ranks (B/n per rank)")
    X, y = digits_batches(batch, 1, seed)[0]
    Xr, yr = X.chunk(n)[rank], y.chunk(n)[rank]               # this rank's B/n examples
    out: list[Memory | None] = []
    for scheme in schemes:
        layers = build_layers("mlp", hidden, seed, depth)
        if scheme == "one process":
            out.append(_step(layers, _adam(layers.parameters()), X, y, scheme)
                       if rank == 0 else None)
        elif scheme == "DDP":
            model = DDP(layers, gradient_as_bucket_view=True)
            out.append(_step(model, _adam(model.parameters()), Xr, yr, scheme))
        elif scheme == "ZeRO-1":
            model = DDP(layers, gradient_as_bucket_view=True)
            opt = ZeroRedundancyOptimizer(model.parameters(), torch.optim.Adam, lr=1e-3)
            out.append(_step(model, opt, Xr, yr, scheme))
        elif scheme == "FSDP":
            for layer in layers:
                if isinstance(layer, nn.Linear):
                    fully_shard(layer, mesh=device_mesh())
            fully_shard(layers, mesh=device_mesh())
            out.append(_step(layers, _adam(layers.parameters()), Xr, yr, scheme))
        elif scheme.startswith("pipeline"):
            order = gpipe_order if scheme.endswith("GPipe") else one_f_one_b_order
            out.append(_pipeline(layers, X, y, m, order, scheme))
        elif scheme == "tensor parallel":
            model = library_tp(layers)
            out.append(_step(model, _adam(model.parameters()), X, y, scheme))
        else:
            raise ValueError(f"unknown scheme {scheme!r}: use some of {SCHEMES}")
        dist.barrier()
    return out


def memory_table(runs: list[list[Memory | None]]) -> dict[str, list[Memory]]:
    """Scheme → the ``Memory`` of each rank that took part (from ``cluster.run(memory_run)``)."""
    table: dict[str, list[Memory]] = {}
    for per_rank in runs:
        for mem in per_rank:
            if mem is not None:
                table.setdefault(mem.scheme, []).append(mem)
    return table
