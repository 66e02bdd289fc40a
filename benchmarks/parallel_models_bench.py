"""Shared memory and threads on this machine (lesson 02), measured side by side in one run.

- Amdahl's law: speedup of a numpy workload with 0 %, 20 % and 50 % of it serial on 1 … N
  threads, the parallel fraction p fitted back from the counts with a core each (against the
  p built in; oversubscribed counts shown in brackets), and torch's own intra-op threads on
  one matrix product;
- Gustafson's law: the same workload with its parallel part grown n× on n threads, the
  measured scaled speedup T_1/T_n over Gustafson's n − f(n − 1) with the fitted f;
- the GIL: speedup of pure-Python work and of numpy work on N threads;
- schedules: a triangular loop (iteration i costs ∝ i) under static, dynamic and guided;
- the lost-update race and its fixes on 2 processes: updates lost, and nanoseconds per
  increment of a lock, an atomic and a reduction (their ratios).

    .venv/bin/python benchmarks/parallel_models_bench.py [--threads 2]
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Callable, Sequence

from ddl_lab.parallel_models import shared_memory, speedup, threads


def amdahl(counts: list[int]) -> None:
    cores = speedup.usable_cores()
    print(f"Amdahl's law (best of 2 runs per thread count; p fitted on n <= {cores} usable "
          "cores, the oversubscribed counts in brackets, not fitted):")
    for serial in (0.0, 0.2, 0.5):
        work = _work(serial)
        s = speedup.measure_scaling(work, counts, repeats=2, label=f"{serial:.0%} serial")
        p = s.parallel_fraction()
        print(f"  {s.label:>12}: {_shown(s.counts, s.speedup, s.oversubscribed)}; fitted p = "
              f"{p:.2f} (built in {1 - serial:.2f}); Amdahl's S({counts[-1]}) = "
              f"{speedup.amdahl(1 - serial, counts[-1]):.2f}")
        w = speedup.measure_weak_scaling(work, counts, repeats=2)
        g = speedup.gustafson(1 - p, counts)
        print(f"  {'grown n×':>12}: scaled {_shown(w.counts, w.scaled_speedup, w.oversubscribed)}"
              f"; measured / Gustafson's n − f(n − 1): "
              + ", ".join(f"{m / e:.2f}" for m, e in zip(w.scaled_speedup, g)))
    mm = speedup.torch_matmul_scaling(1024, counts, repeats=3)
    print(f"  {mm.label}: {_shown(mm.counts, mm.speedup, mm.oversubscribed)}")


def _work(serial: float) -> Callable[..., None]:
    return lambda n, grow=1: speedup.amdahl_workload(n, serial, tasks=20, size=600_000,
                                                     grow=grow)


def _shown(counts: Sequence[int], values: Sequence[float], over: Sequence[bool]) -> str:
    return ", ".join(f"[S({n}) = {v:.2f}]" if o else f"S({n}) = {v:.2f}"
                     for n, v, o in zip(counts, values, over))


def gil(n: int) -> None:
    g = threads.gil_speedups(num_threads=n)
    print(f"\nthe GIL, {n} threads:")
    for kind, r in g.items():
        print(f"  {kind:>26}: speedup {r['speedup']:.2f}× (ideal {n}×)")


def schedules(n: int) -> None:
    print(f"\na triangular loop of 48 iterations on {n} threads (best of 3):")
    best = {}
    for schedule, chunk in (("static", None), ("dynamic", 1), ("dynamic", 4), ("guided", 1)):
        runs = [threads.parallel_for(lambda i: threads.numpy_work(3000 * (i + 1)), 48,
                                     num_threads=n, schedule=schedule, chunk=chunk)
                for _ in range(3)]
        r = min(runs, key=lambda r: r.seconds)
        best[(schedule, chunk)] = r.seconds
        print(f"  {schedule:>8} chunk {chunk or '-':<2}: {1e3 * r.seconds:6.1f} ms, busiest "
              f"thread {r.imbalance:.2f}× the average, {len(r.chunks)} claims")
    print(f"  static / dynamic(1): {best[('static', None)] / best[('dynamic', 1)]:.2f}×")


def race(processes: int, increments: int) -> None:
    results = {r.method: r for r in shared_memory.compare_fixes(processes, increments)}
    print(f"\n{processes} processes × {increments:,} increments of one shared counter:")
    for r in results.values():
        print(f"  {r.method:>9}: lost {r.lost:>9,} ({100 * r.lost / r.expected:4.1f}%), "
              f"{r.ns_per_increment:7.1f} ns per increment")
    ns = {m: r.ns_per_increment for m, r in results.items()}
    if "atomic" in ns:
        print(f"  lock / atomic {ns['lock'] / ns['atomic']:.1f}×, atomic / reduction "
              f"{ns['atomic'] / ns['reduction']:.1f}×, unsynchronised / reduction "
              f"{ns['none'] / ns['reduction']:.1f}×")
    else:
        print(f"  (no libatomic) lock / reduction {ns['lock'] / ns['reduction']:.1f}×")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=min(4, os.cpu_count() or 1))
    a = ap.parse_args()
    t0 = time.perf_counter()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    amdahl(list(range(1, a.threads + 1)))
    gil(a.threads)
    schedules(a.threads)
    race(2, 200_000)
    print(f"\n({time.perf_counter() - t0:.0f} s; load average now {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
