"""The capstone's baseline plans (lesson 15): synchronous SGD with the whole gradient on the
wire at every step — by hand (lesson 05) or with DDP and a communication hook (lessons 08,
10). Accurate, and over the byte budget: the gap the capstone asks you to close."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ddl_lab.capstone.meter import Batches
from ddl_lab.capstone.wire import Wire
from ddl_lab.ml.models import flat_grads, flat_params, set_flat_params

__all__ = ["sync_sgd_plan", "ddp_plan", "HOOKS"]

HOOKS = ("fp32", "fp16", "powersgd")


def sync_sgd_plan(model: nn.Module, batches: Batches, wire: Wire, lr: float = 0.3) -> nn.Module:
    """Every step: local gradient, allreduce (sum), divide by n, the same SGD step everywhere."""
    for X, y in batches:
        model.zero_grad()
        F.cross_entropy(model(X), y).backward()
        g = wire.allreduce(flat_grads(model)) / wire.world_size
        set_flat_params(model, flat_params(model) - lr * g)
    return model


def _hooked(model: nn.Module, hook: str) -> nn.Module:
    """``model`` in DDP, its gradient buckets sent as ``hook`` says."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
    from torch.nn.parallel import DistributedDataParallel as DDP
    if hook not in HOOKS:
        raise ValueError(f"unknown hook {hook!r}: use one of {HOOKS}")
    ddp = DDP(model)
    state, fn = {"fp32": (None, default_hooks.allreduce_hook),
                 "fp16": (None, default_hooks.fp16_compress_hook),
                 "powersgd": (powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=1,
                                                          start_powerSGD_iter=2),
                              powerSGD_hook.powerSGD_hook)}[hook]
    ddp.register_comm_hook(state, fn)
    return ddp


def ddp_plan(model: nn.Module, batches: Batches, wire: Wire, hook: str = "fp16",
             lr: float = 0.3) -> nn.Module:
    """Synchronous SGD with DDP: backward averages each gradient bucket through ``hook``
    ('fp32', 'fp16' or 'powersgd' rank 1) — the meter sees what the hook sends."""
    ddp = _hooked(model, hook)
    for X, y in batches:
        ddp.zero_grad()
        F.cross_entropy(ddp(X), y).backward()
        with torch.no_grad():
            for p in ddp.parameters():
                p -= lr * p.grad
    return model
