"""Speedup, efficiency, Amdahl's and Gustafson's laws, measured on this machine (lesson 02).

Strong scaling (a fixed problem): speedup S(n) = T(1) / T(n), efficiency E(n) = S(n) / n,
and Amdahl's law for a program whose fraction p of the work parallelises::

    S(n) = 1 / ((1 - p) + p / n)        ->  1 / (1 - p) as n grows

``measure_scaling`` times any function of the worker count; ``fit_parallel_fraction``
recovers p from the counts that have a core each (n <= ``usable_cores()``): past the core
count threads take turns, and the time that costs is not Amdahl's serial part.

Weak scaling (Gustafson, "Reevaluating Amdahl's law", CACM 31(5), 1988): the parallel part
grows with n, the serial part stays. ``measure_weak_scaling`` times the grown problem on n
workers and on one; their ratio is the scaled speedup, which Gustafson's law predicts as
S(n) = n - f (n - 1), f the serial share of the time on the n workers.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

__all__ = ["Scaling", "WeakScaling", "usable_cores", "amdahl", "gustafson", "measure_scaling",
           "measure_weak_scaling", "fit_parallel_fraction", "amdahl_workload",
           "torch_matmul_scaling", "OVERSUBSCRIBED"]

OVERSUBSCRIBED = "oversubscribed: n > cores"


def usable_cores(cpu_max: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The cores this process may run on: its CPU affinity (else the machine's count),
    capped by a cgroup v2 CPU quota (a container's ``--cpus``) when ``cpu_max`` sets one."""
    cores = (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count() or 1)
    try:
        with open(cpu_max) as fh:
            quota, period = fh.read().split()[:2]
        return max(1, min(cores, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):                       # no cgroup v2, or "max": no quota
        return cores


@dataclass
class Scaling:
    """Best-of-repeats times (s) for each worker count of one fixed problem (strong
    scaling); speedup and efficiency follow. ``cores``: the usable cores when measured."""

    counts: list[int]
    seconds: list[float]
    label: str = ""
    cores: int = field(default_factory=usable_cores)

    @property
    def speedup(self) -> np.ndarray:
        return self.seconds[0] / np.asarray(self.seconds)

    @property
    def efficiency(self) -> np.ndarray:
        return self.speedup / np.asarray(self.counts)

    @property
    def oversubscribed(self) -> np.ndarray:
        """True where more workers than cores ran: they took turns, and the fit leaves them out."""
        return np.asarray(self.counts) > self.cores

    def parallel_fraction(self) -> float:
        """Amdahl's p fitted on the counts with a core each."""
        return fit_parallel_fraction(self.counts, self.speedup, self.cores)

    def table(self) -> str:
        rows = [f"{'workers':>8} {'time (ms)':>10} {'speedup':>8} {'efficiency':>10}"]
        for n, t, s, e, over in zip(self.counts, self.seconds, self.speedup, self.efficiency,
                                    self.oversubscribed):
            rows.append(f"{n:>8} {1e3 * t:>10.1f} {s:>8.2f} {e:>10.0%}"
                        + (f"  {OVERSUBSCRIBED} ({self.cores}), not fitted"
                           if over and self.cores > 1 else ""))
        if self.cores < 2:
            rows.append("one usable core: every count above 1 takes turns, so p is fitted on "
                        "them all and reads low (run this on a machine with more cores)")
        return "\n".join(rows)


@dataclass
class WeakScaling:
    """Gustafson's scaled problem: on n workers the parallel part is n times the base one,
    the serial part the same. ``seconds[i]``: the grown problem on ``counts[i]`` workers;
    ``one_worker_seconds[i]``: the same grown problem on one worker (best of repeats)."""

    counts: list[int]
    seconds: list[float]
    one_worker_seconds: list[float]
    label: str = ""
    cores: int = field(default_factory=usable_cores)

    @property
    def scaled_speedup(self) -> np.ndarray:
        """T_1(grown problem) / T_n(grown problem): what Gustafson's law predicts."""
        return np.asarray(self.one_worker_seconds) / np.asarray(self.seconds)

    @property
    def efficiency(self) -> np.ndarray:
        """T_1(base) / T_n(grown): 1 while the time stays flat as problem and team grow."""
        return self.seconds[0] / np.asarray(self.seconds)

    @property
    def oversubscribed(self) -> np.ndarray:
        return np.asarray(self.counts) > self.cores

    def table(self, serial_fraction: float | None = None) -> str:
        """One row per count; with ``serial_fraction`` f, Gustafson's n − f(n − 1) beside it."""
        head = f"{'workers':>8} {'T_n (ms)':>9} {'T_1 (ms)':>9} {'scaled S':>9} {'flat':>6}"
        rows = [head + (f" {'Gustafson':>10}" if serial_fraction is not None else "")]
        for k, n in enumerate(self.counts):
            row = (f"{n:>8} {1e3 * self.seconds[k]:>9.1f} {1e3 * self.one_worker_seconds[k]:>9.1f}"
                   f" {self.scaled_speedup[k]:>9.2f} {self.efficiency[k]:>6.0%}")
            if serial_fraction is not None:
                row += f" {gustafson(serial_fraction, n):>10.2f}"
            rows.append(row + (f"  {OVERSUBSCRIBED} ({self.cores})"
                               if self.oversubscribed[k] else ""))
        return "\n".join(rows)


def amdahl(p: float, n: Any) -> Any:
    """Amdahl's law: the speedup on n workers when a fraction p of the work parallelises."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"the parallel fraction p must be between 0 and 1, got {p!r}")
    n = np.asarray(n, dtype=float)
    return 1.0 / ((1.0 - p) + p / n)


def gustafson(f: float, n: Any) -> Any:
    """Gustafson's law: the scaled speedup n − f (n − 1) on n workers, f the serial share
    of the time on the n workers (the parallel part grew with n, the serial part did not)."""
    if not 0.0 <= f <= 1.0:
        raise ValueError(f"the serial fraction f must be between 0 and 1, got {f!r}")
    n = np.asarray(n, dtype=float)
    return n - f * (n - 1.0)


def measure_scaling(run: Callable[[int], Any], counts: Sequence[int], repeats: int = 3,
                    label: str = "") -> Scaling:
    """Time ``run(n)`` for each n in ``counts`` (best of ``repeats``); counts[0] is the base."""
    _check_counts(counts)
    return Scaling(list(counts), [_best(run, repeats, n) for n in counts], label)


def measure_weak_scaling(run: Callable[[int, int], Any], counts: Sequence[int],
                         repeats: int = 2, label: str = "") -> WeakScaling:
    """Gustafson's weak scaling: ``run(workers, grow)`` runs the problem whose parallel part
    is ``grow`` times the base one. For each n, time ``run(n, n)`` and ``run(1, n)``."""
    _check_counts(counts)
    seconds = [_best(run, repeats, n, n) for n in counts]
    one = [seconds[0]] + [_best(run, repeats, 1, n) for n in counts[1:]]
    return WeakScaling(list(counts), seconds, one, label)


def _check_counts(counts: Sequence[int]) -> None:
    if not counts or counts[0] != 1:
        raise ValueError(f"counts must start with 1 (the serial time), got {list(counts)}")


def _best(run: Callable[..., Any], repeats: int, *args: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        run(*args)
        best = min(best, time.perf_counter() - t0)
    return best


def fit_parallel_fraction(counts: Sequence[int], speedups: Sequence[float],
                          cores: int | None = None) -> float:
    """The p of Amdahl's law that best fits measured speedups (least squares on 1/S).

    Only counts 1 < n <= ``cores`` (default: ``usable_cores()``) are fitted: with more
    threads than cores they take turns, which Amdahl's law does not model and which
    would pull p down. On one usable core there is no such count: then every n > 1 is
    fitted (the only fit there is, biased low; ``Scaling.table`` says so).
    """
    n = np.asarray(counts, dtype=float)
    s = np.asarray(speedups, dtype=float)
    cores = usable_cores() if cores is None else cores
    keep = (n > 1) & (n <= max(cores, 1))
    if not keep.any() and cores < 2:
        keep = n > 1
    if not keep.any():
        raise ValueError(f"need at least one measurement with more than one worker and no "
                         f"more workers than the {cores} usable cores, got counts "
                         f"{[int(k) for k in n]}")
    a, b = 1.0 / s[keep] - 1.0, 1.0 / n[keep] - 1.0        # 1/S - 1 = p (1/n - 1)
    return float(np.clip((a @ b) / (b @ b), 0.0, 1.0))


def amdahl_workload(num_threads: int, serial_fraction: float, tasks: int = 40,
                    size: int = 200_000, grow: int = 1) -> None:
    """A program with a serial part and a parallel part, both numpy kernels.

    A fraction ``serial_fraction`` of ``tasks`` equal tasks runs on one thread; the
    rest, ``grow`` times over (Gustafson's scaled problem), is a ``parallel_for`` over
    ``num_threads`` threads (numpy releases the GIL).
    """
    from ddl_lab.parallel_models.threads import numpy_work, parallel_for
    if not 0.0 <= serial_fraction <= 1.0:
        raise ValueError(f"serial_fraction must be between 0 and 1, got {serial_fraction!r}")
    serial = int(round(serial_fraction * tasks))
    for _ in range(serial):
        numpy_work(size)
    parallel_for(lambda _: numpy_work(size), grow * (tasks - serial), num_threads=num_threads,
                 schedule="dynamic")


def torch_matmul_scaling(size: int = 1024, counts: Sequence[int] | None = None,
                         repeats: int = 5) -> Scaling:
    """torch's own intra-op threads (OpenMP underneath) on one matrix product.

    Times ``A @ B`` (size × size, float32) with ``torch.set_num_threads(n)`` for each n,
    then restores this process's setting.
    """
    import torch
    counts = list(counts or range(1, usable_cores() + 1))
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
