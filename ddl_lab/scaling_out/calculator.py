"""When distributing pays: a time-per-step model fitted from this machine (lesson 10).

Synchronous data parallelism on n workers with a global mini-batch of B examples and a
model of P parameters (S = 4P bytes of fp32 gradients) takes, per step,

    T(n) = t₀ + c·(B/n)·max(1, n/cores)  +  2(n−1)·α + 2(n−1)/n·S·β

compute — forward and backward of B/n examples at c seconds each, slowed when more workers
than cores share the processors — plus lesson 06's ring allreduce with latency α (s) and
inverse bandwidth β (s/byte). ``measure`` times all three ingredients on real workers and
the step itself at 1, 2, 4 workers; ``fit`` turns them into the model's constants.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch.distributed as dist

from ddl_lab.data_parallel.workloads import build
from ddl_lab.ml.models import flat_grads
from ddl_lab.ring_allreduce.cost import sent_bytes

__all__ = ["Fit", "step_time", "measure", "fit", "seed_case", "SEED_PARAMS", "SEED_EXAMPLES"]

SEED_PARAMS, SEED_EXAMPLES = 16e6, 17e9     # Jamshidi's lecture: "16M parameters", "17B examples"


@dataclass(frozen=True)
class Fit:
    """The constants of the model: per step t₀, per example c, α, β, and the cores."""

    t0: float
    per_example: float
    alpha: float
    beta: float
    cores: int
    params: int                 # the measured model's parameter count

    def link(self, gbit_per_s: float | None) -> "Fit":
        """The same machine behind a link of ``gbit_per_s`` (β = 8 / bandwidth)."""
        return self if gbit_per_s is None else replace(self, beta=8 / (gbit_per_s * 1e9))

    def model(self, params: float) -> "Fit":
        """A model of ``params`` parameters: compute per example scales with them."""
        return replace(self, per_example=self.per_example * params / self.params,
                       params=int(params))


def step_time(n: int, batch: int, f: Fit) -> dict[str, float]:
    """Predicted seconds of one step on ``n`` workers: compute, communicate, total."""
    compute = f.t0 + f.per_example * batch / n * max(1.0, n / f.cores)
    S = 4.0 * f.params
    comm = 0.0 if n == 1 else 2 * (n - 1) * f.alpha + sent_bytes("all_reduce", n, S) * f.beta
    return {"compute": compute, "communicate": comm, "total": compute + comm}


# ---------------------------------------------------------------- measuring (worker side)

def _grad_seconds(model, loss_fn, X, y, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.zero_grad()
        loss_fn(model(X), y).backward()
        flat_grads(model)
        best = min(best, time.perf_counter() - t0)
    return best


def measure(workload: str = "digits-mlp", batches: Sequence[int] = (16, 64, 256),
            sizes: Sequence[int] = (1 << 12, 1 << 16, 1 << 20, 1 << 22),
            batch: int = 256, ns: Sequence[int] = (1, 2, 4), repeats: int = 5) -> dict:
    """Worker: what the calculator needs, measured here (lesson 10).

    ``compute``: seconds of forward + backward at each of ``batches`` on rank 0 alone;
    ``allreduce``: seconds of an allreduce of each of ``sizes`` bytes on all ranks; ``steps``:
    seconds of one synchronous SGD step with global batch ``batch`` on the first n ranks,
    for each n in ``ns`` (the others idle). Best of ``repeats`` each (a shared machine)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model, train, _, loss_fn = build(workload)
    X, y = train.tensors()
    out: dict = {"params": sum(p.numel() for p in model.parameters()),
                 "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count(), "world": world, "batches": list(batches),
                 "sizes": list(sizes), "ns": [], "batch": batch}
    if rank == 0:
        out["compute"] = [_grad_seconds(model, loss_fn, X[:b], y[:b], repeats) for b in batches]
    dist.barrier()
    from ddl_lab.ring_allreduce.engine import time_allreduce
    out["allreduce"] = [min(time_allreduce("dist.all_reduce", s, repeats)) for s in sizes]
    steps = []
    for n in (n for n in ns if n <= world):
        group = dist.new_group(list(range(n)))          # every rank takes part in making it
        if rank < n:
            mine = slice(rank * batch // n, (rank + 1) * batch // n)
            Xb, yb = X[mine], y[mine]
            best = float("inf")
            for _ in range(repeats):
                dist.barrier(group=group)
                t0 = time.perf_counter()
                model.zero_grad()
                loss_fn(model(Xb), yb).backward()
                dist.all_reduce(flat_grads(model), group=group)
                best = min(best, time.perf_counter() - t0)
            steps.append(best)
        dist.barrier()
        out["ns"].append(n)
    out["steps"] = steps if rank == 0 else None
    return out


# ---------------------------------------------------------------- fitting (parent side)

def fit(m: dict) -> Fit:
    """The model's constants from ``measure``'s rank-0 result: t₀ and c by least squares on
    the compute times; α and β from the allreduce times, t = 2(n−1)·α + 2(n−1)/n·S·β."""
    b, t = np.array(m["batches"], float), np.array(m["compute"], float)
    slope, t0 = np.polyfit(b, t, 1)
    n, S = m["world"], np.array(m["sizes"], float)
    per_round = np.array(m["allreduce"], float) / (2 * (n - 1))    # = α + (S/n)·β
    A = np.stack([1 / per_round, S / n / per_round], axis=1)        # relative errors
    (alpha, beta), *_ = np.linalg.lstsq(A, np.ones_like(S), rcond=None)
    return Fit(max(float(t0), 0.0), max(float(slope), 1e-12), max(float(alpha), 0.0),
               max(float(beta), 1e-15),
               int(m["cores"]), int(m["params"]))


def seed_case(f: Fit, ns: Sequence[int] = (1, 8, 64, 512), links: Sequence[float] = (1, 10, 100),
              per_worker: int = 256, params: float = SEED_PARAMS,
              examples: float = SEED_EXAMPLES) -> list[dict]:
    """Jamshidi's lecture's "16M parameters, 17B examples": days per epoch on n workers (each with
    this machine's cores, ``per_worker`` examples each per step) behind links of
    ``links`` Gbit/s. One row per (link, n)."""
    rows = []
    big = f.model(params)
    for gbit in links:
        g = replace(big.link(gbit), cores=max(ns))   # one machine per worker
        one = step_time(1, per_worker, g)["total"] * examples / per_worker
        for n in ns:
            s = step_time(n, per_worker * n, g)
            epoch = s["total"] * examples / (per_worker * n)
            rows.append({"link_gbit": gbit, "alpha": g.alpha, "workers": n, "step_s": s["total"],
                         "communicate_share": s["communicate"] / s["total"],
                         "epoch_days": epoch / 86400, "speedup": one / epoch})
    return rows
