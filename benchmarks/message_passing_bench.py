"""Message passing on this machine (lesson 04), measured side by side in one run.

- Iterating MapReduce-style (every iteration re-reads its split from disk and writes its
  output there) vs in memory (the split read once, only θ travels afterwards): median
  seconds per later iteration and their ratio (Zaharia et al. 2010 measured 127 s vs 6 s
  per iteration, 21×, on 20 machines);
- each collective with our communicator (pickle over TCP, root talks to everyone) vs
  torch.distributed's gloo, on the same tensors: the slowest rank's best time and the
  ratio ours / gloo, for a small and a large message;
- parallel gradient descent on 4 workers: milliseconds per step computing vs
  communicating.

    .venv/bin/python benchmarks/message_passing_bench.py [--workers 4]
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from ddl_lab.message_passing.comm import comm_run
from ddl_lab.message_passing.mapreduce import SPARK_2010, compare_iterative
from ddl_lab.message_passing.parallel_gd import run_parallel_gd
from ddl_lab.message_passing.side_by_side import collectives_side_by_side, slowest_rank
from ddl_lab.ml.data import linear_regression


def mapreduce_vs_memory(workers: int, per_worker: int, iterations: int) -> None:
    ds = linear_regression(m=workers * per_worker, d=20, seed=0)
    mr, mem = compare_iterative(ds.X, ds.y, k=workers, iterations=iterations, lr=0.1)
    per_mr, later = np.median(mr.seconds), np.median(mem.seconds[1:])
    same = np.array_equal(mr.theta, mem.theta)
    print(f"{workers * per_worker:>9,} examples: MapReduce-style {1e3 * per_mr:7.1f} ms per "
          f"iteration, in memory {1e3 * mem.seconds[0]:6.1f} ms first / {1e3 * later:6.2f} ms "
          f"later → ratio {per_mr / later:5.0f}×  (same θ: {same})")


def collectives(workers: int, nbytes: int, repeat: int) -> None:
    timings = slowest_rank(comm_run(collectives_side_by_side, workers, nbytes, repeat))
    print(f"\n{nbytes:,} bytes per message, {workers} workers, best of {repeat} "
          "(slowest rank):")
    print(f"  {'operation':<12}{'ours':>10}{'gloo':>10}{'ours / gloo':>13}  same result")
    for op, t in timings.items():
        print(f"  {op:<12}{1e3 * t['ours_s']:>8.2f}ms{1e3 * t['torch_s']:>8.2f}ms"
              f"{t['ours_s'] / t['torch_s']:>12.1f}×  {'yes' if t['equal'] else 'NO'}")


def parallel_gd(workers: int, m: int, steps: int) -> None:
    ds = linear_regression(m=m, d=50, seed=0)
    res = run_parallel_gd(ds.X, ds.y, workers, steps=steps, lr=0.2)
    comp = np.mean([r.compute_s for r in res]) / steps
    comm = np.mean([r.comm_s for r in res]) / steps
    print(f"\nparallel GD, {m:,} examples on {workers} workers: {1e3 * comp:.2f} ms computing, "
          f"{1e3 * comm:.2f} ms communicating per step (communication / compute "
          f"{comm / comp:.1f}×)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    a = ap.parse_args()
    t0 = time.perf_counter()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    p = SPARK_2010
    print(f"published: Hadoop {p['hadoop_s']:.0f} s vs Spark {p['spark_later_s']:.0f} s per later "
          f"iteration ({p['hadoop_s'] / p['spark_later_s']:.0f}×)")
    for per_worker in (2_500, 20_000):
        mapreduce_vs_memory(a.workers, per_worker, iterations=8)
    for nbytes in (1024, 4 << 20):
        collectives(a.workers, nbytes, repeat=5)
    parallel_gd(a.workers, 100_000, steps=10)
    print(f"\n({time.perf_counter() - t0:.0f} s; load average now {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
