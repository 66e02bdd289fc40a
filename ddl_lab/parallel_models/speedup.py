"""Speedup, efficiency and Amdahl's law, measured on this machine (lesson 02).

speedup S(n) = T(1) / T(n), efficiency E(n) = S(n) / n, and Amdahl's law for a
program whose fraction p of the work parallelises::

    S(n) = 1 / ((1 - p) + p / n)        ->  1 / (1 - p) as n grows

``measure_scaling`` times any function of the worker count; ``fit_parallel_fraction``
recovers p from the measurements, and the model then says what more cores would give.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["Scaling", "amdahl", "measure_scaling", "fit_parallel_fraction",
           "amdahl_workload", "torch_matmul_scaling"]


@dataclass
class Scaling:
    """Best-of-repeats times (s) for each worker count; speedup and efficiency follow."""

    counts: list[int]
    seconds: list[float]
    label: str = ""

    @property
    def speedup(self) -> np.ndarray:
        return self.seconds[0] / np.asarray(self.seconds)

    @property
    def efficiency(self) -> np.ndarray:
        return self.speedup / np.asarray(self.counts)

    def table(self) -> str:
        rows = [f"{'workers':>8} {'time (ms)':>10} {'speedup':>8} {'efficiency':>10}"]
        for n, t, s, e in zip(self.counts, self.seconds, self.speedup, self.efficiency):
            rows.append(f"{n:>8} {1e3 * t:>10.1f} {s:>8.2f} {e:>10.0%}")
        return "\n".join(rows)


def amdahl(p: float, n: Any) -> Any:
    """Amdahl's law: the speedup on n workers when a fraction p of the work parallelises."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"the parallel fraction p must be between 0 and 1, got {p!r}")
    n = np.asarray(n, dtype=float)
    return 1.0 / ((1.0 - p) + p / n)


def measure_scaling(run: Callable[[int], Any], counts: Sequence[int], repeats: int = 3,
                    label: str = "") -> Scaling:
    """Time ``run(n)`` for each n in ``counts`` (best of ``repeats``); counts[0] is the base."""
    if not counts or counts[0] != 1:
        raise ValueError(f"counts must start with 1 (the serial time), got {list(counts)}")
    seconds = []
    for n in counts:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            run(n)
            best = min(best, time.perf_counter() - t0)
        seconds.append(best)
    return Scaling(list(counts), seconds, label)


def fit_parallel_fraction(counts: Sequence[int], speedups: Sequence[float]) -> float:
    """The p of Amdahl's law that best fits measured speedups (least squares on 1/S)."""
    n = np.asarray(counts, dtype=float)
    s = np.asarray(speedups, dtype=float)
    keep = n > 1
    if not keep.any():
        raise ValueError("need at least one measurement with more than one worker")
    a, b = 1.0 / s[keep] - 1.0, 1.0 / n[keep] - 1.0        # 1/S - 1 = p (1/n - 1)
    return float(np.clip((a @ b) / (b @ b), 0.0, 1.0))


def amdahl_workload(num_threads: int, serial_fraction: float, tasks: int = 40,
                    size: int = 200_000) -> None:
    """A program with a serial part and a parallel part, both numpy kernels.

    A fraction ``serial_fraction`` of ``tasks`` equal tasks runs on one thread; the
    rest is a ``parallel_for`` over ``num_threads`` threads (numpy releases the GIL).
    """
    from ddl_lab.parallel_models.threads import numpy_work, parallel_for
    if not 0.0 <= serial_fraction <= 1.0:
        raise ValueError(f"serial_fraction must be between 0 and 1, got {serial_fraction!r}")
    serial = int(round(serial_fraction * tasks))
    for _ in range(serial):
        numpy_work(size)
    parallel_for(lambda _: numpy_work(size), tasks - serial, num_threads=num_threads,
                 schedule="dynamic")


def torch_matmul_scaling(size: int = 1024, counts: Sequence[int] | None = None,
                         repeats: int = 5) -> Scaling:
    """torch's own intra-op threads (OpenMP underneath) on one matrix product.

    Times ``A @ B`` (size × size, float32) with ``torch.set_num_threads(n)`` for each n,
    then restores this process's setting.
    """
    import torch
    counts = list(counts or range(1, (os.cpu_count() or 1) + 1))
    g = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=g)
    b = torch.randn(size, size, generator=g)
    before = torch.get_num_threads()

    def run(n: int) -> None:
        torch.set_num_threads(n)
        a @ b

    try:
        run(counts[-1])                                 # warm up the thread pool
        return measure_scaling(run, counts, repeats, f"torch {size}×{size} matmul")
    finally:
        torch.set_num_threads(before)
