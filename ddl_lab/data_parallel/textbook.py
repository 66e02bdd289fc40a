"""Lesson 05's training loops as the seeds write them: what the lesson prints.

``engine.py`` runs the same loops on named workloads and also records every step's loss,
time and timeline, a straggler, and the loss of the averaged model;
``tests/data_parallel/test_textbook.py`` runs both on the same batches and gets the same
parameters. Both run on every rank; ``batches`` are this rank's (X, y) mini-batches.
"""
from __future__ import annotations

from typing import Callable, Collection, Iterable

import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.data_parallel.engine import average_params
from ddl_lab.ml.models import flat_grads, flat_params, set_flat_params

__all__ = ["sync_sgd", "local_sgd"]

Batches = Iterable[tuple[torch.Tensor, torch.Tensor]]


def sync_sgd(model: nn.Module, loss_fn: Callable, batches: Batches, lr: float) -> None:
    """Synchronous SGD (Jamshidi's lecture): each of R ranks computes ∇L on its own M/R examples;
    an AllReduce sums the gradients into ΔW; every rank updates W ← W − α·ΔW/R."""
    R = dist.get_world_size()
    for X, y in batches:
        model.zero_grad()
        loss_fn(model(X), y).backward()
        grads = flat_grads(model)
        dist.all_reduce(grads)                                  # ΔW = Σ_r ∇L_r
        set_flat_params(model, flat_params(model) - lr * (grads / R))


def local_sgd(model: nn.Module, loss_fn: Callable, batches: Batches, lr: float,
              sync_at: Collection[int]) -> None:
    """Local SGD (the ID2223 review answers, Teta & Zangis): every rank takes plain SGD steps on its own; at the
    synchronisation times I_T = ``sync_at`` (steps counted from 1) the models are averaged."""
    for t, (X, y) in enumerate(batches, start=1):
        model.zero_grad()
        loss_fn(model(X), y).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
        if t in sync_at:                                        # t ∈ I_T
            average_params(model)
