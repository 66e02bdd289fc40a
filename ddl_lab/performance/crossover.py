"""When data parallelism becomes communication-bound here (lesson 13, §4).

A rank's step computes b examples at F FLOP/s — b·6N·(tokens an example)/F seconds — and
allreduces its gradients, 4N bytes in float32, over n ranks — the ring's
2(n−1)·α + 2(n−1)/n·4N·β (lesson 06, ``runtime.costs.ring_time``). Compute grows with the
per-rank batch b and communication does not, so below the batch where the two are equal
the step waits on the network, and above it the step is compute-bound ("How to Scale Your
Model" puts the same line at per-device batch = peak FLOP/s ÷ link bandwidth, with the
constants of this model).

``predicted`` gives that batch from the measured F (``roofline.matmul_flop_s``) and a
fitted α, β (``link``, ``fit_ring``); ``sweep`` finds it on real workers: the compute of a
forward and backward and the allreduce of the gradients timed at several batches, and
``found`` reads where the two lines cross. The model is an MLP of ``width`` and ``depth``
(``mlp``), 6N FLOPs an example.
"""
from __future__ import annotations

import math
import time
from typing import Any, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.runtime.costs import ring_time

__all__ = ["mlp", "params_of", "link", "fit_ring", "predicted", "sweep", "found",
           "describe"]


def mlp(width: int = 256, depth: int = 2, d_in: int = 256, classes: int = 10,
        seed: int = 0) -> nn.Module:
    """d_in → ``depth`` × (Linear(width) + ReLU) → classes, drawn from ``seed``."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i in range(depth):
        layers += [nn.Linear(d_in if i == 0 else width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width if depth else d_in, classes))


def params_of(model: nn.Module) -> int:
    """Every parameter's elements (what the allreduce carries)."""
    return sum(p.numel() for p in model.parameters())


def _best(fn: Any, repeats: int) -> float:
    fn()
    best = math.inf
    for _ in range(repeats):
        dist.barrier()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def link(sizes: Sequence[int] = (4 << 10, 64 << 10, 512 << 10, 2 << 20),
         repeats: int = 5) -> list[float]:
    """Worker: the best seconds of an allreduce of each of ``sizes`` bytes (float32) over
    every rank."""
    out = []
    for size in sizes:
        t = torch.ones(max(1, size // 4))
        out.append(_best(lambda: dist.all_reduce(t), repeats))
    return out


def fit_ring(n: int, sizes: Sequence[int], seconds: Sequence[float]) -> tuple[float, float]:
    """α and β of t = 2(n−1)·α + 2(n−1)/n·S·β by least squares on relative errors (as
    lesson 11's calculator fits them)."""
    S, t = np.asarray(sizes, float), np.asarray(seconds, float)
    per_round = t / (2 * (n - 1))                                   # α + (S/n)·β
    A = np.stack([1 / per_round, S / n / per_round], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(A, np.ones_like(S), rcond=None)
    return max(float(alpha), 0.0), max(float(beta), 1e-15)


def predicted(flop_s: float, flops_per_example: float, comm_seconds: float) -> float:
    """The per-rank batch whose compute equals ``comm_seconds``: comm · F / FLOPs an example."""
    return comm_seconds * flop_s / flops_per_example


def sweep(batches: Sequence[int], width: int = 256, depth: int = 2, repeats: int = 5,
          seed: int = 0) -> dict[str, Any]:
    """Worker: for each per-rank batch, the best seconds of one forward and backward of
    ``mlp(width, depth)`` (compute) and of the allreduce of its gradients over every rank
    (comm), and this process's float32 matmul FLOP/s; the parameter count."""
    from ddl_lab.performance.roofline import matmul_flop_s
    model = mlp(width, depth, seed=seed)
    loss_fn = nn.CrossEntropyLoss()
    flat = torch.zeros(params_of(model))
    out: dict[str, Any] = {"batches": list(batches), "compute": [], "comm": [],
                           "params": params_of(model), "world": dist.get_world_size(),
                           "flop_s": matmul_flop_s(512)}
    g = torch.Generator().manual_seed(seed + dist.get_rank())
    for b in batches:
        X, y = torch.randn(b, 256, generator=g), torch.randint(0, 10, (b,), generator=g)

        def compute() -> None:
            model.zero_grad()
            loss_fn(model(X), y).backward()
        out["compute"].append(_best(compute, repeats))
        out["comm"].append(_best(lambda: dist.all_reduce(flat), repeats))
    return out


def found(batches: Sequence[int], compute: Sequence[float], comm: Sequence[float]) -> float:
    """The batch where compute first reaches comm, interpolated on log axes between the two
    batches around it (the first batch if compute already wins there; nan if it never does)."""
    b = np.log(np.asarray(batches, float))
    gap = np.log(np.asarray(compute, float)) - np.log(np.asarray(comm, float))
    if gap[0] >= 0:
        return float(batches[0])
    above = np.nonzero(gap >= 0)[0]
    if not above.size:
        return math.nan
    i = int(above[0])
    w = -gap[i - 1] / (gap[i] - gap[i - 1])
    return float(np.exp(b[i - 1] + w * (b[i] - b[i - 1])))


def describe(flop_s: float, alpha: float, beta: float, params: int, world: int,
             tokens: int = 1) -> dict[str, float]:
    """A machine and a model as measured numbers (the design task's description): FLOP/s
    of one rank, α (s), β (s/byte), the model's parameters (float32 gradients), the tokens an
    example and the world size."""
    return {"flop_s": float(flop_s), "alpha": float(alpha), "beta": float(beta),
            "params": int(params), "tokens": int(tokens), "world": int(world)}


def comm_seconds(d: dict[str, float]) -> float:
    """The ring allreduce of a description's float32 gradients."""
    return ring_time(int(d["world"]), 4.0 * d["params"], d["alpha"], d["beta"])
