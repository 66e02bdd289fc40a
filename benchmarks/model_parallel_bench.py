"""Model parallelism, measured side by side (lesson 09).

    .venv/bin/python benchmarks/model_parallel_bench.py [--quick]

1. the bubble of a padded pipeline (each stage sleeps a fixed time per example, forward and
   backward, so 4 stages on 2 cores behave like 4 machines) against (p−1)/(m+p−1), for
   p = 2, 4 and m = 1, 2, 4, 8 (target: within 0.05);
2. the hand-written pipeline against torch.distributed.pipelining, same model, same cut,
   real compute, runs alternated (target: hand ≤ 1.3× torch per step);
3. 1F1B's peak activation memory against GPipe's at m = 8 (target: ≤ 0.6×) (the memory per
   rank of each scheme: benchmarks/memory_bench.py);
4. DistBelief's speed-up against 1…8 partitions, locally vs fully connected, with the
   modelled network and with the loopback alone.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from ddl_lab.model_parallel import distbelief as D
from ddl_lab.model_parallel import library as L
from ddl_lab.model_parallel import pipeline as P
from ddl_lab.runtime import Cluster


def bubbles(cluster: Cluster, pad: float, batch: int, rounds: int) -> None:
    print(f"\n1. bubble fraction, padded stages — emulated: compute padded to {1e3 * pad:g} ms "
          f"per example and pass, batch {batch}; median of {rounds} steps after a warm one")
    worst = 0.0
    for p in (2, 4):
        for m in (1, 2, 4, 8):
            row = []
            for schedule in ("gpipe", "1f1b"):
                runs = cluster.run(P.pipeline_run, "mlp", p, m, schedule, steps=rounds + 1,
                                   batch=batch, pad=pad)
                got = float(np.median([P.bubble_fraction(runs, t) for t in range(1, rounds + 1)]))
                worst = max(worst, abs(got - P.ideal_bubble(p, m)))
                row.append(f"{schedule} {got:.3f}")
            print(f"   p = {p}, m = {m}: (p−1)/(m+p−1) = {P.ideal_bubble(p, m):.3f}; timeline "
                  + ", ".join(row))
    print(f"   largest |timeline − formula| = {worst:.3f} (target ≤ 0.05)")


def hand_vs_torch(cluster: Cluster, rounds: int, steps: int) -> None:
    print(f"\n2. hand pipeline vs torch.distributed.pipelining (MLP 64-256-256-10, batch 64, "
          f"m = 8, real compute), median of {rounds} alternated runs of {steps} steps")
    for p in (2, 4):
        for schedule in ("gpipe", "1f1b"):
            hand, lib = [], []
            for _ in range(rounds):
                hand.append(P.step_time(cluster.run(P.pipeline_run, "mlp", p, 8, schedule,
                                                    steps=steps, batch=64, hidden=256), 2))
                lib.append(P.step_time(cluster.run(L.library_run, "mlp", p, 8, schedule,
                                                   steps=steps, batch=64, hidden=256), 2))
            h, t = float(np.median(hand)), float(np.median(lib))
            print(f"   p = {p}, {schedule:5}: hand {1e3 * h:6.2f} ms, torch {1e3 * t:6.2f} ms per "
                  f"step: hand/torch = {h / t:.2f} (target ≤ 1.3)")


def memory(cluster4: Cluster) -> None:
    print("\n3. memory")
    g = cluster4.run(P.pipeline_run, "mlp", 4, 8, "gpipe", batch=64, hidden=256)
    f = cluster4.run(P.pipeline_run, "mlp", 4, 8, "1f1b", batch=64, hidden=256)
    big_g, big_f = max(r.peak_activations for r in g), max(r.peak_activations for r in f)
    print(f"   peak activations kept for backward, p = 4, m = 8, largest stage: GPipe "
          f"{big_g / 1024:.1f} KiB, 1F1B {big_f / 1024:.1f} KiB: 1F1B/GPipe = "
          f"{big_f / big_g:.2f} (target ≤ 0.6)")


def distbelief(cluster8: Cluster, steps: int) -> None:
    print("\n4. DistBelief: speed-up against partitions (slowest rank, forward pass of 3 layers, "
          f"median of {steps}); emulated — sleeping partitions overlap, so the speed-up can pass "
          "the number of cores")
    for label, network in ((f"emulated network {D.Network().describe()}", D.Network()),
                           ("loopback only, compute emulated", None)):
        for kind in D.KINDS:
            cuts = {n: cluster8.run(D.distbelief_run, kind, n, steps=steps, network=network)
                    for n in range(1, 9)}
            print(f"   {label}, {kind:>17}: " + "  ".join(
                f"{n}: {s:.2f}×" for n, s in D.speedups(cuts).items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds, smaller padding")
    a = ap.parse_args()
    rounds = 2 if a.quick else 3
    print(f"{os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.1f}")
    with Cluster(4, timeout=300) as c4:
        bubbles(c4, pad=0.005 if a.quick else 0.012, batch=32, rounds=rounds)
        hand_vs_torch(c4, rounds + 2, steps=6 if a.quick else 10)
        memory(c4)
    with Cluster(8, timeout=300) as c8:
        distbelief(c8, steps=3 if a.quick else 5)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
