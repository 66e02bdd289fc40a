"""Allreduce in buckets while the backward pass runs, as DDP does (lesson 06).

``bucket_indices`` is the rule that cuts the gradients (in the order backward produces
them) into buckets; ``GradientBuckets`` applies it to a model and launches each bucket's
allreduce from a hook as soon as the bucket is full; ``overlap_backward`` times backward
alone, then one allreduce, against the buckets overlapping it.
"""
from __future__ import annotations

import time
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.ml.models import flat_grads
from ddl_lab.ml.workloads import build
from ddl_lab.runtime import device

__all__ = ["bucket_indices", "GradientBuckets", "overlap_backward"]


def bucket_indices(sizes: Sequence[int], bucket_bytes: int) -> list[list[int]]:
    """The buckets of gradients of ``sizes`` bytes, in backward order, as lists of indices:
    a bucket takes gradients until it holds at least ``bucket_bytes``; the next gradient
    opens a new one (no gradients: one empty bucket)."""
    buckets: list[list[int]] = [[]]
    size = 0
    for i, nbytes in enumerate(sizes):
        if size >= bucket_bytes:
            buckets.append([])
            size = 0
        buckets[-1].append(i)
        size += nbytes
    return buckets


class GradientBuckets:
    """Allreduce gradients in buckets *during* the backward pass, as DDP does (lesson 06).

    Parameters are grouped in reverse order (backward reaches the last layers first)
    into buckets of about ``bucket_bytes`` (``bucket_indices``). A hook fires as each
    gradient is ready; when a bucket is complete its asynchronous allreduce starts at once,
    while backward goes on with earlier layers. ``wait()`` finishes them all and leaves the
    averaged gradients in ``.grad``. ``remove()`` takes the hooks off.
    """

    def __init__(self, model: nn.Module, bucket_bytes: int = 1 << 18):
        if bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
        params = [p for p in model.parameters() if p.requires_grad][::-1]
        self.buckets: list[list[nn.Parameter]] = [
            [params[i] for i in b]
            for b in bucket_indices([p.numel() * p.element_size() for p in params], bucket_bytes)]
        self._index = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self._ready = [0] * len(self.buckets)
        self._inflight: list[tuple[int, dist.Work, torch.Tensor]] = []
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in params]

    def _grad_ready(self, p: torch.Tensor) -> None:
        i = self._index[id(p)]
        self._ready[i] += 1
        if self._ready[i] == len(self.buckets[i]):            # the bucket is full: send it
            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[i]])
            self._inflight.append((i, dist.all_reduce(flat, async_op=True), flat))

    def wait(self) -> None:
        """Finish every bucket's allreduce; write the averaged gradients back."""
        n = dist.get_world_size()
        for i, work, flat in self._inflight:
            work.wait()
            offset = 0
            for q in self.buckets[i]:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad) / n)
                offset += q.numel()
        self._inflight.clear()
        self._ready = [0] * len(self.buckets)

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()


def overlap_backward(workload: str = "digits-wide-mlp", batch: int = 256,
                     bucket_bytes: int = 1 << 18, repeats: int = 5) -> dict[str, float]:
    """Worker function: seconds of backward alone, of backward *then* one allreduce of all
    gradients, and of backward with bucketed allreduces overlapping it (lesson 06)."""
    model, train, _, loss_fn = build(workload)
    X, y = train.tensors()
    dev = device()
    model, X, y = model.to(dev), X[:batch].to(dev), y[:batch].to(dev)

    def step(mode: str, buckets: GradientBuckets | None) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        model.zero_grad()
        loss_fn(model(X), y).backward()
        if mode == "sequential":
            g = flat_grads(model)
            dist.all_reduce(g)
        elif buckets is not None:
            buckets.wait()
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {"backward only": [], "backward, then allreduce": []}
    for _ in range(repeats + 1):
        times["backward only"].append(step("alone", None))
        times["backward, then allreduce"].append(step("sequential", None))
    buckets = GradientBuckets(model, bucket_bytes)
    times["allreduce in buckets during backward"] = [step("buckets", buckets)
                                                      for _ in range(repeats + 1)]
    buckets.remove()
    out = {k: float(np.median(v[1:])) for k, v in times.items()}
    out["buckets"] = len(buckets.buckets)
    return out
