"""Allreduce on one machine, side by side (lesson 06): the hand-written ring against
``dist.all_reduce`` (gloo), and the shared-memory allreduce against gloo and against the
machine's memory bandwidth.

    .venv/bin/python benchmarks/collectives_bench.py            # 64 MiB float32, 2 and 4 ranks

Each figure: the best of ``--repeats`` runs timed on the slowest rank, then the median
over ``--rounds`` rounds in which every method takes its turn (so a change in the
machine's load hits them alike). "memcpy floor" is the time for every rank to copy S bytes
once, all at the same time: the memory traffic any allreduce must at least cause, the
one-machine limit; a bandwidth "fraction of memcpy" is that floor over the method's time.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from ddl_lab.runtime import Cluster
from ddl_lab.ring_allreduce.shm import compare_allreduce


def bench(world_size: int, nbytes: int, segments: list[int], rounds: int,
          repeats: int) -> dict[str, float]:
    """Median over rounds of each method's seconds on ``world_size`` ranks."""
    times: dict[str, list[float]] = {}
    with Cluster(world_size, timeout=300) as cluster:
        for _ in range(rounds):
            for k in segments:
                for name, t in compare_allreduce(cluster, nbytes, k, repeats).items():
                    times.setdefault(name, []).append(t)
    return {name: float(np.median(v)) for name, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64, help="tensor size in MiB (float32)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--segments", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    nbytes = a.mib << 20
    print(f"allreduce of {a.mib} MiB float32; {os.cpu_count()} cores; "
          f"load average before: {os.getloadavg()[0]:.1f}")
    t0 = time.perf_counter()
    for n in a.ranks:
        t = bench(n, nbytes, a.segments, a.rounds, a.repeats)
        print(f"\n{n} ranks: " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in t.items()))
        gloo, shm, floor = t["dist.all_reduce (gloo)"], t["shared memory"], t["memcpy floor"]
        ring = min(v for k, v in t.items() if k.startswith("hand ring"))
        buf = t["shared buffer (no copies)"]
        print(f"  hand ring / dist.all_reduce   = {ring / gloo:.2f}×   (target ≤ 1.5, aim ≤ 1.2)")
        print(f"  dist.all_reduce / shm         = {gloo / shm:.1f}×   faster (target ≥ 2)")
        print(f"  shm bandwidth S/t             = {nbytes / shm / 1e9:.1f} GB/s = "
              f"{floor / shm:.0%} of memcpy ({nbytes / floor / 1e9:.1f} GB/s per rank with all "
              "ranks copying at once; target ≥ 50%)")
        print(f"  shm buffer, no copy in or out = {nbytes / buf / 1e9:.1f} GB/s = "
              f"{floor / buf:.0%} of memcpy")
    print(f"\nload average after: {os.getloadavg()[0]:.1f}; took {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
