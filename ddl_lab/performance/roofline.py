"""This machine's roofline, measured (lesson 13, §1; Williams, Waterman & Patterson 2009).

Attainable FLOP/s = min(peak, bandwidth × intensity), where an operation's arithmetic
intensity is its FLOPs over the bytes it must move to and from memory. ``peak`` is the best
matrix product measured here (``matmul_flop_s``: float32 and bfloat16, over sizes, one
thread and all of them), ``bandwidth`` a STREAM-style copy and triad (McCalpin 1995:
``copy`` moves 2 × 8 bytes an element of float64 — read a, write c —, ``triad``
a = b + s·c moves 3 × 8). ``step_ops`` lists the operations of a training step of lesson
12's GPT with their FLOPs and bytes (a lower bound on the bytes: each operand read once,
each result written once), and ``time_op`` measures each, so the achieved FLOP/s sits
beside the roofline's bound.
"""
from __future__ import annotations

import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F

from ddl_lab.ml.gpt import GPTConfig, attention

__all__ = ["threads", "matmul_flop_s", "peak_table", "stream", "Op", "step_ops", "time_op",
           "attainable", "ridge", "cores"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}


def cores() -> int:
    """The cores this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextmanager
def threads(n: int) -> Iterator[None]:
    """torch's intra-op threads set to ``n`` inside the block, restored after it."""
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _best(fn: Callable[[], object], repeats: int, min_time: float = 0.03) -> float:
    """The best seconds of ``fn()`` over at least ``repeats`` runs and ``min_time`` seconds
    (after a warm-up): on a shared machine a few runs may all meet another process on a
    core — with two threads, one waits for the other at every barrier — and only more runs
    find a quiet moment."""
    fn()                                                    # warm-up: allocation, packing
    best, runs, start = math.inf, 0, time.perf_counter()
    while runs < repeats or time.perf_counter() - start < min_time:
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        runs += 1
    return best


def matmul_flop_s(n: int = 512, dtype: str = "float32", repeats: int = 5) -> float:
    """FLOP/s of an n × n by n × n product in this process (2n³ FLOPs; the best of at least
    ``repeats`` runs and 30 ms, at the threads torch has now)."""
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(n, n, generator=g).to(DTYPES[dtype]) for _ in range(2))
    out = torch.empty(n, n, dtype=DTYPES[dtype])
    return 2.0 * n ** 3 / _best(lambda: torch.mm(a, b, out=out), repeats)


def peak_table(sizes: Sequence[int] = (128, 256, 512), dtypes: Sequence[str] = ("float32",
               "bfloat16"), thread_counts: Sequence[int] | None = None,
               repeats: int = 3) -> list[dict]:
    """One row per (dtype, threads, size): the measured FLOP/s. ``thread_counts`` defaults to
    one thread and every core this process may use."""
    counts = thread_counts or sorted({1, cores()})
    rows = []
    for dtype in dtypes:
        for t in counts:
            with threads(t):
                rows += [{"dtype": dtype, "threads": t, "size": n,
                          "flop_s": matmul_flop_s(n, dtype, repeats)} for n in sizes]
    return rows


def stream(nbytes: int = 32 << 20, repeats: int = 5) -> dict[str, float]:
    """Bytes per second of STREAM's copy (c = a) and triad (a = b + s·c) on float64 arrays of
    ``nbytes`` each (well beyond the caches), best of ``repeats``, at torch's threads now."""
    n = max(1, nbytes // 8)
    a, b, c = torch.ones(n, dtype=torch.float64), torch.ones(n, dtype=torch.float64), \
        torch.empty(n, dtype=torch.float64)
    copy = _best(lambda: c.copy_(a), repeats)
    triad = _best(lambda: torch.add(b, c, alpha=3.0, out=a), repeats)
    return {"copy": 2 * 8 * n / copy, "triad": 3 * 8 * n / triad}


def attainable(intensity: float, peak: float, bandwidth: float) -> float:
    """The roofline: min(peak, bandwidth × intensity) FLOP/s."""
    return min(peak, bandwidth * intensity)


def ridge(peak: float, bandwidth: float) -> float:
    """The intensity (FLOPs per byte) where the two roofs meet: peak / bandwidth."""
    return peak / bandwidth


@dataclass
class Op:
    """One operation of a training step: FLOPs, the bytes it must move, and (after
    ``time_op``) the seconds it took here; ``run`` performs it."""

    name: str
    flops: float
    bytes: float
    run: Callable[[], object]
    seconds: float = math.nan

    @property
    def intensity(self) -> float:
        """FLOPs per byte moved."""
        return self.flops / self.bytes

    @property
    def flop_s(self) -> float:
        """Achieved FLOP/s (after ``time_op``)."""
        return self.flops / self.seconds


def step_ops(cfg: GPTConfig, batch: int, dtype: str = "float32", world: int = 2) -> list[Op]:
    """The operations of one training step of lesson 12's GPT at ``batch`` sequences, with
    their FLOPs and bytes (e = the dtype's bytes, T = b·s tokens, h wide, P parameters):

    - matmul, the MLP's first layer: 2·T·h·4h FLOPs; e·(T·h + h·4h + T·4h) bytes;
    - attention of one layer (q·kᵀ, softmax, p·v): 4·T·s·h FLOPs (+ 5 per score for the
      softmax); e·(4·T·h + 2·b·a·s²) bytes — q, k, v, the output, and the scores written
      and read once;
    - LayerNorm: 8 FLOPs an element (mean, variance, normalise, scale and shift); e·2·T·h;
    - GELU (exact, erf): about 10 FLOPs an element (counted as 10); e·2·T·4h;
    - the AdamW step: about 12 FLOPs a parameter; 4 bytes × 7 a parameter (read p, g, m, v;
      write p, m, v, all float32);
    - an allreduce's reduction, a += b over the gradients of ``world`` ranks: (n−1)/n·P
      additions; 3·4 bytes each (read two, write one)."""
    dt = DTYPES[dtype]
    e = torch.tensor([], dtype=dt).element_size()
    b, s, h, a = batch, cfg.seq, cfg.hidden, cfg.heads
    T, d = b * s, h // a
    g = torch.Generator().manual_seed(0)

    def rand(*shape: int, dtype: torch.dtype = dt) -> torch.Tensor:
        return torch.randn(*shape, generator=g).to(dtype)
    x, w = rand(T, h), rand(4 * h, h)
    q, k, v = (rand(b, a, s, d) for _ in range(3))
    ln_w, ln_b, wide = rand(h), rand(h), rand(T, 4 * h)
    from ddl_lab.performance.flops import gpt_matmul_params
    P = gpt_matmul_params(cfg)
    p, grad, m, var = (rand(P, dtype=torch.float32).abs() for _ in range(4))
    peer = rand(P, dtype=torch.float32)
    share = (world - 1) / world

    def adamw() -> None:
        torch._foreach_mul_([m], 0.9)
        torch._foreach_add_([m], [grad], alpha=0.1)
        torch._foreach_mul_([var], 0.999)
        torch._foreach_addcmul_([var], [grad], [grad], value=0.001)
        torch._foreach_mul_([p], 1 - 1e-5)
        torch._foreach_addcdiv_([p], [m], [var.sqrt().add_(1e-8)], value=-1e-3)
    return [
        Op("matmul", 2.0 * T * h * 4 * h, e * (T * h + 4 * h * h + T * 4 * h),
           lambda: F.linear(x, w)),
        Op("attention", 4.0 * T * s * h + 5.0 * b * a * s * s,
           e * (4 * T * h + 2 * b * a * s * s), lambda: attention(q, k, v, causal=False)),
        Op("LayerNorm", 8.0 * T * h, e * 2 * T * h, lambda: F.layer_norm(x, (h,), ln_w, ln_b)),
        Op("GELU", 10.0 * T * 4 * h, e * 2 * T * 4 * h, lambda: F.gelu(wide)),
        Op("AdamW step", 12.0 * P, 4.0 * 7 * P, adamw),
        Op("allreduce's reduction", share * P, share * 3 * 4 * P, lambda: p.add_(peer)),
    ]


def time_op(op: Op, repeats: int = 5) -> Op:
    """``op`` with the best of ``repeats`` seconds measured here (after a warm-up)."""
    op.seconds = _best(op.run, repeats)
    return op
