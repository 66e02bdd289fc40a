"""When distributing pays: a time-per-step model fitted from this machine (lesson 11).

Synchronous data parallelism on n workers with a global mini-batch of B examples and a
model of P parameters (S = b·P bytes of gradients; b = 4 for fp32) pays per step

    compute    C(n) = t₀ + c·(B/n)·max(1, n/cores)
    allreduce  A(n) = 2(n−1)·α + 2(n−1)/n·S·β        (lesson 06's ring; 0 for n = 1)

— forward and backward of B/n examples at c seconds each, slowed when more workers than
cores share the processors, and a ring with latency α (s) and inverse bandwidth β (s/byte).

**Overlap φ = 0** (additive): the allreduce starts after backward, as in lesson 05's
``sync_sgd`` and exercise 11's task 4: T₀ = C + A.

**Overlap φ = 1** (DDP's bucket pipeline, Li et al., "PyTorch Distributed", VLDB 2020;
lesson 06's ``GradientBuckets``): the gradients go out in k = ⌈S / 25 MiB⌉ buckets (DDP's
``bucket_cap_mb``), each allreduced as soon as backward has produced it. Backward is a share
s of the per-example work w = C − t₀ (s = 2/3: 4 of the 6 FLOPs per parameter and example,
Kaplan et al. 2020), spread evenly over the buckets; every bucket pays its own latency, so
the k allreduces take A_k = 2(n−1)·k·α + 2(n−1)/n·S·β in all. Bucket j is ready at j·s·w/k and
starts when it is ready and the previous one is done, so

    T₁ = C − s·w + max(s·w + A_k/k,  s·w/k + A_k)

— the forward, then backward with the allreduces under it, then what backward could not
hide: at least the last bucket's allreduce. (DDP also makes its first bucket small, 1 MiB,
so that sending starts early; the equal buckets here leave that out.)

**In between**, T = (1 − φ)·T₀ + φ·T₁: φ is the fraction of the overlap the machine achieves
(on CPUs gloo's allreduce competes with backward for the cores; ``overlap_fraction`` turns
lesson 06's ``overlap_backward`` measurement into φ). T₁ ≤ T₀ unless one bucket's latency
2(n−1)·α exceeds its share of backward s·w/k: then more buckets cost more than they hide.

Every number is a *modelled* prediction from constants that ``fit`` takes from ``measure``'s
timings on real workers (or that the caller states); ``assumptions`` lists each constant with
where it came from, to be printed beside the result.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.ml.models import flat_grads
from ddl_lab.ml.workloads import build
from ddl_lab.runtime.costs import ring_time

__all__ = ["Fit", "step_time", "buckets", "bucket_trade", "assumptions", "measure", "fit", "overlap_fraction",
           "dense_flops", "cost", "cost_modelled", "seed_fit", "seed_case", "SEED_PARAMS",
           "SEED_EXAMPLES", "DDP_BUCKET_BYTES", "BACKWARD_SHARE"]

SEED_PARAMS, SEED_EXAMPLES = 16e6, 17e9     # Jamshidi's lecture: "16M parameters", "17B examples"
DDP_BUCKET_BYTES = 25 * 2 ** 20             # DDP's default bucket_cap_mb = 25 (Li et al. 2020)
BACKWARD_SHARE = 2 / 3                      # backward 4 of 6 FLOPs/parameter (Kaplan et al. 2020)


@dataclass(frozen=True)
class Fit:
    """The model's constants: per step t₀, per example c, α, β, the cores, the parameters;
    the overlap φ (0: additive), bytes per parameter, DDP's bucket size, backward's share of
    the compute; and ``notes``, (constant, where its value came from) pairs."""

    t0: float
    per_example: float
    alpha: float
    beta: float
    cores: int
    params: int
    overlap: float = 0.0
    bytes_per_param: float = 4.0
    bucket_bytes: float = DDP_BUCKET_BYTES
    backward_share: float = BACKWARD_SHARE
    notes: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 <= self.overlap <= 1.0:
            raise ValueError(f"overlap must be in [0, 1] (0: additive, 1: DDP's pipeline), "
                             f"got {self.overlap}")

    def noted(self, **notes: str) -> "Fit":
        """The same constants with ``notes`` (constant → where its value came from) added."""
        kept = tuple((k, v) for k, v in self.notes if k not in notes)
        return replace(self, notes=kept + tuple(notes.items()))

    def link(self, gbit_per_s: float | None) -> "Fit":
        """The same machine behind a link of ``gbit_per_s`` (β = 8 / bandwidth; α kept)."""
        if gbit_per_s is None:
            return self
        alpha, kept = dict(self.notes).get("alpha", "given"), "; kept for the link"
        return replace(self, beta=8 / (gbit_per_s * 1e9)).noted(
            beta=f"assumed: a {gbit_per_s:g} Gbit/s link, β = 8 / bandwidth",
            alpha=alpha if kept in alpha else alpha + kept + " (a network's is larger)")

    def with_overlap(self, overlap: float, source: str,
                     bucket_bytes: float | None = None) -> "Fit":
        """The same machine with overlap φ = ``overlap`` (and buckets of ``bucket_bytes``;
        default: unchanged), taken from ``source``."""
        b = self.bucket_bytes if bucket_bytes is None else float(bucket_bytes)
        return replace(self, overlap=float(overlap), bucket_bytes=b).noted(overlap=source)

    def with_compute(self, per_example: float, source: str,
                     params: float | None = None) -> "Fit":
        """A model of ``params`` parameters (default: the same) computing ``per_example``
        seconds per example (forward + backward), taken from ``source``. Nothing is scaled
        from the measured model: the caller states the new cost and where it comes from."""
        p = self.params if params is None else int(params)
        return replace(self, per_example=float(per_example), params=p).noted(
            per_example=source, params="stated" if params is not None
            else dict(self.notes).get("params", "given"))


def _ring(n: int, nbytes: float, f: Fit, messages: int = 1) -> float:
    """Seconds of ``messages`` ring allreduces of ``nbytes`` bytes in all among n ranks."""
    return ring_time(n, nbytes, f.alpha, f.beta, pieces=messages)


def buckets(f: Fit) -> int:
    """k: how many DDP buckets the gradients fill."""
    return max(1, math.ceil(f.bytes_per_param * f.params / f.bucket_bytes))


def bucket_trade(n: int, batch: int, f: Fit) -> tuple[float, float]:
    """(what one bucket's allreduce pays in latency, 2(n−1)·α; its share of backward, s·w/k):
    the first below the second, full overlap is never slower than none."""
    work = f.per_example * batch / n * max(1.0, n / f.cores)
    return ring_time(n, 0.0, f.alpha, f.beta), f.backward_share * work / buckets(f)


def step_time(n: int, batch: int, f: Fit) -> dict[str, float]:
    """Modelled seconds of one step on ``n`` workers (global ``batch``): ``compute`` C(n),
    ``communicate`` (one allreduce of all gradients, A(n)), ``exposed`` (the communication
    that backward did not hide, T − C) and ``total`` T (module docstring)."""
    work = f.per_example * batch / n * max(1.0, n / f.cores)
    compute = f.t0 + work
    S = f.bytes_per_param * f.params
    comm = _ring(n, S, f)
    total = compute + comm                                  # φ = 0: additive
    if f.overlap > 0 and n > 1 and buckets(f) > 1:         # one bucket hides nothing
        k, back = buckets(f), f.backward_share * work
        all_k = _ring(n, S, f, messages=k)
        pipelined = compute - back + max(back + all_k / k, back / k + all_k)
        total = (1 - f.overlap) * total + f.overlap * pipelined
    return {"compute": compute, "communicate": comm, "exposed": total - compute,
            "total": total}


def _si(x: float, unit: str) -> str:
    for scale, prefix in ((1, ""), (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"), (1e-12, "p")):
        if abs(x) >= scale or scale == 1e-12:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:g} {unit}"


def _mb(nbytes: float) -> str:
    return f"{nbytes / 1e6:.3g}"


def assumptions(f: Fit) -> list[str]:
    """One line per constant of ``f``: its value and where it came from (print it beside
    every modelled result)."""
    src = dict(f.notes)
    S = f.bytes_per_param * f.params
    rows = [
        ("per_example", f"c = {_si(f.per_example, 's')} per example (forward + backward)"),
        ("t0", f"t₀ = {_si(f.t0, 's')} per step"),
        ("alpha", f"α = {_si(f.alpha, 's')} per message"),
        ("beta", f"β = {_si(f.beta, 's')}/byte ({8 / f.beta / 1e9:.3g} Gbit/s)"),
        ("bytes_per_param", f"{f.bytes_per_param:g} bytes per parameter "
                            f"(S = {S / 1e6:,.3g} MB of gradients)"),
        ("params", f"P = {f.params:,} parameters"),
        ("cores", f"{f.cores} cores per machine"),
        ("overlap", f"overlap φ = {f.overlap:.2f} "
                    + ("(additive: allreduce after backward)" if f.overlap == 0 else
                       f"({buckets(f)} bucket(s) of ≤ {f.bucket_bytes / 2 ** 20:g} MiB)")),
        ("backward_share", f"backward = {f.backward_share:.2f} of the per-example work"),
    ]
    default = {"bytes_per_param": "fp32 gradients", "overlap": "stated",
               "backward_share": "4 of the 6 FLOPs per parameter and example "
                                 "(Kaplan et al. 2020)"}
    return [f"  {text:<56} ← {src.get(k, default.get(k, 'given'))}" for k, text in rows]


# ---------------------------------------------------------------- measuring (worker side)

def _grad_seconds(model, loss_fn, X, y, repeats: int, flat: bool = True) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.zero_grad()
        loss_fn(model(X), y).backward()
        if flat:
            flat_grads(model)
        best = min(best, time.perf_counter() - t0)
    return best


def _matmul_flop_s(size: int = 512, repeats: int = 5) -> float:
    """This process's float32 FLOP/s on a size × size matrix product (2·size³ FLOPs)."""
    A, B = torch.randn(size, size), torch.randn(size, size)
    A @ B                                                       # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        A @ B
        best = min(best, time.perf_counter() - t0)
    return 2 * size ** 3 / best


def measure(workload: str = "digits-mlp", batches: Sequence[int] = (16, 64, 256),
            sizes: Sequence[int] = (1 << 12, 1 << 16, 1 << 20, 1 << 22),
            batch: int = 256, ns: Sequence[int] = (1, 2, 4), repeats: int = 5) -> dict:
    """Worker: what the calculator needs, measured here (lesson 11).

    ``compute``: seconds of forward + backward at each of ``batches`` on rank 0 alone;
    ``alone``: one well-written process's forward + backward of the whole global ``batch``
    (no process group touched: the COST baseline); ``flop_s``: rank 0's float32 matmul
    FLOP/s; ``allreduce``: seconds of an allreduce of each of ``sizes`` bytes on all ranks;
    ``steps``: seconds of one synchronous SGD step with global batch ``batch`` on the first
    n ranks, for each n in ``ns`` (the others idle). Best of ``repeats`` each (a shared
    machine). Every rank runs the same single thread (the cluster's ``num_threads``)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    model, train, _, loss_fn = build(workload)
    X, y = train.tensors()
    out: dict = {"workload": workload, "params": sum(p.numel() for p in model.parameters()),
                 "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                 else os.cpu_count(), "world": world, "batches": list(batches),
                 "sizes": list(sizes), "ns": [], "batch": batch, "repeats": repeats,
                 "threads": torch.get_num_threads()}
    if rank == 0:
        out["compute"] = [_grad_seconds(model, loss_fn, X[:b], y[:b], repeats) for b in batches]
        out["alone"] = _grad_seconds(model, loss_fn, X[:batch], y[:batch], repeats, flat=False)
        out["flop_s"] = _matmul_flop_s(repeats=repeats)
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
    the compute times; α and β from the allreduce times, t = 2(n−1)·α + 2(n−1)/n·S·β.
    Overlap φ = 0 (additive) until ``with_overlap`` says otherwise."""
    b, t = np.array(m["batches"], float), np.array(m["compute"], float)
    slope, t0 = np.polyfit(b, t, 1)
    n, S = m["world"], np.array(m["sizes"], float)
    per_round = np.array(m["allreduce"], float) / (2 * (n - 1))    # = α + (S/n)·β
    A = np.stack([1 / per_round, S / n / per_round], axis=1)        # relative errors
    (alpha, beta), *_ = np.linalg.lstsq(A, np.ones_like(S), rcond=None)
    where = f"{m.get('workload', 'the model')} on one worker here"
    ring = (f"fitted: allreduces of {_mb(S.min())}–{_mb(S.max())} MB among {n} "
            "workers here (gloo, one machine)")
    f = Fit(max(float(t0), 0.0), max(float(slope), 1e-12), max(float(alpha), 0.0),
            max(float(beta), 1e-15), int(m["cores"]), int(m["params"]))
    batches = ", ".join(str(x) for x in m["batches"])
    return f.noted(per_example=f"fitted: forward + backward at batches {batches}, {where}",
                   t0=f"fitted (intercept), {where}", alpha=ring, beta=ring,
                   cores="this machine (os.sched_getaffinity)",
                   params=f"{m.get('workload', 'the model')}, counted")


def overlap_fraction(o: dict[str, float]) -> float:
    """φ measured: the share of the hideable allreduce time that bucketed allreduces hid
    under backward, from lesson 06's ``overlap_backward`` result, clipped to [0, 1]."""
    back, seq = o["backward only"], o["backward, then allreduce"]
    hideable = min(back, max(seq - back, 0.0))
    if hideable <= 0:
        return 0.0
    return float(np.clip((seq - o["allreduce in buckets during backward"]) / hideable, 0, 1))


def dense_flops(params: float) -> float:
    """FLOPs of forward + backward per example of a dense model: 6 per parameter (2 forward,
    4 backward; Kaplan et al. 2020). A convolution reuses each weight at every position and
    costs more per parameter; count its FLOPs instead."""
    return 6.0 * params


def cost(m: dict) -> dict:
    """McSherry, Isard, Murray's COST (HotOS 2015) measured: one well-written process's time
    for the global batch (``alone``), the distributed step at each n, and the smallest n whose
    step beats the process (None: no n measured here does)."""
    steps = dict(zip(m["ns"], m["steps"]))
    beats = [n for n, t in steps.items() if t < m["alone"]]
    return {"alone": m["alone"], "steps": steps, "cost": min(beats) if beats else None}


def cost_modelled(f: Fit, batch: int, alone: float, up_to: int = 1024) -> int | None:
    """The smallest n in 2 … ``up_to`` whose modelled step beats one process on the same
    global batch (None: none does). The model charges a worker no overhead of its own, so
    one process's time is the faster of the measured ``alone`` and the model's one worker:
    an error of the fit cannot make COST look small."""
    single = min(alone, step_time(1, batch, f)["total"])
    return next((n for n in range(2, up_to + 1) if step_time(n, batch, f)["total"] < single),
                None)


def seed_fit(f: Fit, per_example: float, source: str, params: float = SEED_PARAMS,
             workers: int = 512) -> Fit:
    """Jamshidi's lecture's model: ``params`` parameters at ``per_example`` seconds per example
    (from ``source``), one machine per worker (no two workers share a core), DDP's default
    buckets, overlap φ = 0 until ``with_overlap`` says otherwise."""
    return replace(f.with_compute(per_example, source, params), cores=workers, overlap=0.0,
                   bucket_bytes=DDP_BUCKET_BYTES).noted(
        cores="assumed: one machine per worker, so workers never share a core",
        overlap="stated")


def seed_case(f: Fit, per_example: float, source: str = "stated",
              ns: Sequence[int] = (1, 8, 64, 512), links: Sequence[float] = (1, 10, 100),
              overlaps: Sequence[float] = (0.0, 1.0), per_worker: int = 256,
              params: float = SEED_PARAMS, examples: float = SEED_EXAMPLES) -> list[dict]:
    """Jamshidi's lecture's "16M parameters, 17B examples", modelled: days per epoch on n
    workers (``per_worker`` examples each per step, ``per_example`` seconds each) behind links
    of ``links`` Gbit/s, with each overlap φ of ``overlaps``. One row per (link, φ, n)."""
    big = seed_fit(f, per_example, source, params, max(ns))
    rows = []
    for gbit in links:
        for phi in overlaps:
            g = big.link(gbit).with_overlap(phi, "stated")
            one = step_time(1, per_worker, g)["total"] * examples / per_worker
            for n in ns:
                s = step_time(n, per_worker * n, g)
                epoch = s["total"] * examples / (per_worker * n)
                rows.append({"link_gbit": gbit, "overlap": phi, "workers": n,
                             "step_s": s["total"], "exposed_share": s["exposed"] / s["total"],
                             "epoch_days": epoch / 86400, "speedup": one / epoch})
    return rows
