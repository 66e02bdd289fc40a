"""Activation recomputation (lesson 10; Chen et al. 2016, "Training Deep Nets with Sublinear
Memory Cost"): keep only the inputs of k segments of a chain of layers and compute each
segment's insides again during backward. With n layers, √n segments keep about 2√n layers'
activations at once instead of n, for one extra forward.

``recompute_run`` measures it in one process on a deep MLP: the bytes kept for backward
(saved-tensor hooks plus each segment's input), the profiler's peak of the step, and the
time of a step, for several k (0: no recomputation).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ddl_lab.memory.anatomy import profiled
from ddl_lab.ml.activations import ActivationMeter
from ddl_lab.ring_allreduce.engine import chunk_bounds

__all__ = ["segments_for", "forward_blocks", "Recompute", "recompute_run"]


def segments_for(layers: int) -> int:
    """Chen et al. (2016)'s rule: √n segments for a chain of n layers, rounded."""
    return max(1, round(layers ** 0.5))


def forward_blocks(blocks: Sequence[Callable], x: torch.Tensor, segments: int,
                   meter: ActivationMeter) -> torch.Tensor:
    """Run ``blocks`` in order, counting in ``meter`` what is kept for backward. With
    ``segments`` = k ≥ 1, the chain is cut into k segments (``torch.utils.checkpoint``): each
    keeps only its input (counted here) and computes its insides again in backward."""
    with meter.recording():
        if not segments:
            for b in blocks:
                x = b(x)
            return x
        for lo, hi in chunk_bounds(len(blocks), segments):
            def segment(h: torch.Tensor, part: Sequence[Callable] = blocks[lo:hi]) -> torch.Tensor:
                for b in part:
                    h = b(h)
                return h
            meter.keep(x)
            x = checkpoint(segment, x, use_reentrant=False)
        return x


@dataclass
class Recompute:
    """One setting measured: k segments (0: none), bytes kept for backward at the peak, the
    profiler's peak of the step, and the median seconds of a step."""

    segments: int
    kept: int
    peak: int
    seconds: float


def _chain(depth: int, width: int, seed: int) -> list[nn.Module]:
    torch.manual_seed(seed)
    return [nn.Sequential(nn.Linear(width, width), nn.Tanh()) for _ in range(depth)]


def recompute_run(depth: int = 16, width: int = 128, batch: int = 1024,
                  segments: Sequence[int] = (0, 1, 2, 4, 8, 16), repeats: int = 3,
                  seed: int = 0) -> list[Recompute]:
    """Forward and backward of a chain of ``depth`` Linear+Tanh blocks under each number
    of segments: one run under the profiler (bytes), then ``repeats`` timed runs without
    it, the settings alternated so that a change of load hits every one alike."""
    blocks = _chain(depth, width, seed)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(seed))
    params = [p for b in blocks for p in b.parameters()]

    def step(k: int, meter: ActivationMeter) -> None:
        forward_blocks(blocks, x, k, meter).square().mean().backward()
        for p in params:
            p.grad = None
    found: dict[int, tuple[int, int]] = {}
    for k in segments:
        meter = ActivationMeter()
        meter.resident(x, *params)
        _, peak, _ = profiled(lambda: step(k, meter))
        found[k] = (meter.peak, peak)
    times: dict[int, list[float]] = {k: [] for k in segments}
    for _ in range(repeats):
        for k in segments:
            t0 = time.perf_counter()
            step(k, ActivationMeter())
            times[k].append(time.perf_counter() - t0)
    return [Recompute(k, found[k][0], found[k][1], float(np.median(times[k])))
            for k in segments]
