"""Benchmark for lesson 00's runtime, measured side by side in one run.

- cold start of a 4-rank Cluster vs the floor: spawning 4 bare processes that import torch
  (target <= 1.5x);
- median round trip of a no-op ``run`` on 4 ranks (target <= 20 ms).

    python benchmarks/runtime_bench.py [--repeats 3]
"""
from __future__ import annotations

import argparse
import statistics
import time

import multiprocess as mp

from ddl_lab import Cluster


def _import_torch(conn) -> None:
    import torch  # noqa: F401
    conn.send("ready")


def bare_spawn(n: int) -> float:
    """Seconds to spawn n processes that import torch and report back."""
    ctx = mp.get_context("spawn")
    t0 = time.perf_counter()
    pipes = [ctx.Pipe() for _ in range(n)]
    procs = [ctx.Process(target=_import_torch, args=(child,), daemon=True) for _, child in pipes]
    for p in procs:
        p.start()
    for parent, _ in pipes:
        if not parent.poll(120):
            raise TimeoutError("a bare process did not start within 120 s")
        parent.recv()
    took = time.perf_counter() - t0
    for p in procs:
        p.join(10)
    return took


def cluster_start(n: int) -> float:
    t0 = time.perf_counter()
    c = Cluster(n)
    took = time.perf_counter() - t0
    c.shutdown()
    return took


def round_trip(n: int, runs: int = 200) -> float:
    with Cluster(n) as c:
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            c.run(int)
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--world-size", type=int, default=4)
    a = ap.parse_args()
    n = a.world_size
    floors, starts = [], []
    for _ in range(a.repeats):            # interleaved, so both see the same machine load
        floors.append(bare_spawn(n))
        starts.append(cluster_start(n))
    floor, start = statistics.median(floors), statistics.median(starts)
    rt = round_trip(n)
    print(f"cold start, {n} ranks (median of {a.repeats}):")
    print(f"  bare spawn + import torch : {floor:6.2f} s")
    print(f"  Cluster({n}) ready         : {start:6.2f} s")
    print(f"  ratio                     : {start / floor:6.2f}x   (target <= 1.5x)")
    print(f"no-op run() round trip, {n} ranks, median of 200: {rt * 1e3:.2f} ms (target <= 20 ms)")


if __name__ == "__main__":
    main()
