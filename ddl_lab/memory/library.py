"""The library's way beside the hand-written ZeRO (lesson 10): torch's FSDP2 (``fully_shard``,
ZeRO-3: parameters, gradients and optimizer state sharded, each layer all-gathered for its
forward and backward) and ``ZeroRedundancyOptimizer`` (ZeRO-1 over DDP), trained on the same
MLP, data and optimizer as ``zero.zero_run``, measured the same way: losses, parameters,
bytes kept per rank, bytes sent per step, seconds per step.
"""
from __future__ import annotations

import torch
from torch import nn

from ddl_lab.memory.anatomy import make_optimizer
from ddl_lab.memory.zero import ZeroResult, library_steps
from ddl_lab.model_parallel.stages import build_layers
from ddl_lab.runtime.backends import device

__all__ = ["LIBRARIES", "library_run"]

LIBRARIES = ("FSDP2", "ZeroRedundancyOptimizer")


def _wrap(kind: str, layers: nn.Sequential, optimizer: str, lr: float):
    """(the model to call, its optimizer) for ``kind``."""
    if kind == "FSDP2":
        from torch.distributed.fsdp import fully_shard

        from ddl_lab.model_parallel.tensor_parallel import device_mesh
        mesh = device_mesh(device().type)          # its GPU under nccl
        for layer in layers:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(layers, mesh=mesh)
        return layers, make_optimizer(optimizer, lr)(list(layers.parameters()))
    from torch.distributed.optim import ZeroRedundancyOptimizer
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(layers, gradient_as_bucket_view=True)
    cls = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[optimizer]
    return model, ZeroRedundancyOptimizer(model.parameters(), cls, lr=lr)


def library_run(kind: str, hidden: int = 64, depth: int = 4, batch: int = 32, steps: int = 3,
                optimizer: str = "adam", lr: float = 1e-2, seed: int = 0) -> ZeroResult:
    """Worker: ``steps`` of the MLP with ``kind`` ('FSDP2' or 'ZeroRedundancyOptimizer')
    on every rank; what this rank measured (``zero.ZeroResult``; fp32)."""
    from ddl_lab.runtime.wiretap import Wiretap
    if kind not in LIBRARIES:
        raise ValueError(f"kind must be one of {LIBRARIES}, got {kind!r}")
    layers = build_layers("mlp", hidden, seed, depth).to(device())
    with Wiretap(every_group=True) as tap:    # DDP talks to the tapped group, FSDP2 to its mesh's
        model, opt = _wrap(kind, layers, optimizer, lr)
        return library_steps(kind, model, layers, opt, tap, batch, steps, seed)
