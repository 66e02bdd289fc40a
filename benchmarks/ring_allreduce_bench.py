"""Allreduce on one machine, side by side (lesson 06): the hand-written ring against
``dist.all_reduce`` (gloo), and the shared-memory allreduce against gloo and against the
machine's memory bandwidth.

    .venv/bin/python benchmarks/ring_allreduce_bench.py         # 64 MiB float32, 2 and 4 ranks

Each figure: the best of ``--repeats`` runs timed on the slowest rank, then the median
over ``--rounds`` rounds in which every method takes its turn (so a change in the
machine's load hits them alike). "memcpy floor" is the time for every rank to copy S bytes
once, all at the same time: the memory traffic any allreduce must at least cause, the
one-machine limit; a bandwidth "fraction of memcpy" is that floor over the method's time.

Lesson 06 §7–8 (``--part beyond``): recursive halving/doubling by hand against
``dist.all_reduce`` at 1 MiB and 64 MiB on 4 ranks; the map of the fastest allreduce over
(n, S), the α–β model's and the model-on-this-machine's winners against the measured ones;
and, as root, two-level / flat ring over a tbf-shaped veth between two namespace hosts,
measured against the model's ratio.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np

from ddl_lab.runtime import Cluster
from ddl_lab.ring_allreduce import cost
from ddl_lab.ring_allreduce import winners as W
from ddl_lab.ring_allreduce.engine import measure_allreduce
from ddl_lab.ring_allreduce.shm import compare_allreduce
from ddl_lab.scaling_out import shaped_link as shaped
from ddl_lab.scaling_out.hosts import unavailable


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


def beyond(repeats: int) -> None:
    """Lesson 06 §7–8's ratios (see the module's docstring)."""
    with Cluster(4, timeout=300) as c:
        for mib in (1, 64):
            hd, gloo = (measure_allreduce(c, a, mib << 20, repeats)
                        for a in ("halving_doubling", "dist.all_reduce"))
            print(f"  4 ranks, {mib:>2} MiB: halving/doubling by hand {1e3 * hd:7.1f} ms, "
                  f"dist.all_reduce {1e3 * gloo:7.1f} ms: ratio {hd / gloo:.2f} (target ≤ 1.3)")
    ns, sizes = (2, 3, 4, 6, 8), (1 << 10, 1 << 15, 1 << 20, 1 << 23)
    with Cluster(8, timeout=600) as c:
        probe = [1 << 10, 1 << 14, 1 << 18, 1 << 21]
        alpha, beta = cost.fit_alpha_beta(probe, c.run(cost.ping_pong, probe, 3)[0])
        gamma = cost.reduce_cost()
        timed = W.measured_map(c, ns, sizes, alpha, beta, repeats)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"  map over n = {ns}, S = 1 KiB … 8 MiB (α = {alpha * 1e6:.0f} µs, "
          f"1/β = {1 / beta / 1e9:.2f} GB/s); measured winners: {W.winners(timed)}")
    for title, kw in (("α–β model", {}), (f"α–β on {cores} cores", {"cores": cores})):
        share, rows = W.agreement(W.model_map(ns, sizes, alpha, beta, gamma, **kw), timed)
        ties = sum(r["model_tie"] for r in rows)
        print(f"  {title}: winner agreement {share:.0%} (target ≥ 80%); of the {len(rows)} "
              f"other cells {ties} are ties in the model")
    why = unavailable()
    if why:
        print(f"  shaped link: skipped ({why})")
        return
    link = shaped.run_shaped(1 << 20, rate_mbit=100, alpha=alpha, beta=beta, repeats=repeats)
    got = link["measured"]["two_level"] / link["measured"]["ring"]
    want = link["model"]["two_level"] / link["model"]["ring"]
    print(f"  shaped link (100 Mbit/s tbf, 1 MiB, 2 hosts × 2 ranks): two-level / flat ring "
          f"measured {got:.2f}, model {want:.2f}: {got / want:.2f} of the model's ratio "
          "(target within 20 %)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=64, help="tensor size in MiB (float32)")
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--segments", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--part", choices=("shm", "beyond", "all"), default="all")
    a = ap.parse_args()
    nbytes = a.mib << 20
    print(f"allreduce of {a.mib} MiB float32; {os.cpu_count()} cores; "
          f"load average before: {os.getloadavg()[0]:.1f}")
    t0 = time.perf_counter()
    if a.part in ("beyond", "all"):
        print("\nlesson 06 §7–8: beyond one ring")
        beyond(a.repeats)
    for n in a.ranks if a.part != "beyond" else []:
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
