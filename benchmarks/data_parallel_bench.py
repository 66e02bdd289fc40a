"""Synchronous SGD with and without a 3× straggler, side by side; large global batches (lesson 05).

    .venv/bin/python benchmarks/data_parallel_bench.py [--only straggler|batches]

The "last executor" effect (Do's lecture): with one rank three times slower, every step of
synchronous SGD takes as long as that rank's; the others spend the difference waiting.
Runs alternate (no straggler, straggler) so a change of load hits both alike.

Large batches: R = 1, 2, 4 workers with 32 examples each (global batch 32, 64, 128) train the
digits MLP for 150 steps under three learning-rate rules (none, linear scaling, linear +
warm-up; Goyal et al. 2017); printed: the final test accuracy on R workers over that on one
(median of ``--seeds``), the steps to a training loss of 1.0, and the gradient noise scale
B_simple = tr(Σ)/|G|² (McCandlish et al. 2018's simple noise scale) with the step ratio
S(B)/S(2B) it predicts.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from ddl_lab.data_parallel import batches as B
from ddl_lab.data_parallel import engine as D
from ddl_lab.data_parallel.workloads import Straggler
from ddl_lab.runtime import Cluster


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=512, help="global mini-batch M")
    ap.add_argument("--factor", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=3, help="seeds of the large-batch runs")
    ap.add_argument("--only", choices=["straggler", "batches"], default=None)
    a = ap.parse_args()
    if a.only != "batches":
        straggler(a)
    if a.only != "straggler":
        large_batches(a.seeds)


def straggler(a: argparse.Namespace) -> None:
    print(f"synchronous SGD, digits-cnn, M = {a.batch}, {a.steps} steps; {os.cpu_count()} "
          f"cores; load average before: {os.getloadavg()[0]:.1f}")
    for n in a.ranks:
        base, slow, waits, compute = [], [], [], []
        with Cluster(n, timeout=300) as cluster:
            cluster.run(D.sync_sgd, "digits-cnn", 2, a.batch, 0.1)          # warm up
            for _ in range(a.rounds):
                runs = cluster.run(D.sync_sgd, "digits-cnn", a.steps, a.batch, 0.1)
                base.append(np.median(D.step_times(runs)))
                runs = cluster.run(D.sync_sgd, "digits-cnn", a.steps, a.batch, 0.1,
                                   straggler=Straggler(1, a.factor))
                slow.append(np.median(D.step_times(runs)))
                waits.append(D.wait_fraction(runs))
                compute.append([np.median(list(r.timeline.per_step("compute").values()))
                                for r in runs])
        b, s = float(np.median(base)), float(np.median(slow))
        w = np.median(np.array(waits), axis=0)
        c = np.median(np.array(compute), axis=0)
        others = [f"{x:.0%}" for r, x in enumerate(w) if r != 1]
        print(f"{n} ranks: {1e3 * b:.1f} ms/step without, {1e3 * s:.1f} ms/step with rank 1 "
              f"{a.factor:g}× slower: {s / b:.2f}× slower overall (the straggler computes "
              f"{1e3 * c[1]:.1f} ms per step, the others {1e3 * np.mean(np.delete(c, 1)):.1f} ms); "
              f"the other ranks wait {', '.join(others)} of their time, the straggler {w[1]:.0%} "
              f"({Straggler(1, a.factor).describe()})")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def large_batches(seeds: int) -> None:
    print(f"\nlarge batches: digits MLP, 32 examples per worker, 150 steps, η = 0.2, warm-up 30 "
          f"steps, {seeds} seeds; load average before: {os.getloadavg()[0]:.1f}")
    with Cluster(4, timeout=600) as cluster:
        runs = [B.run_batches(cluster, seed=s) for s in range(seeds)]
    for rule in B.RULES:
        ratios = {R: np.median([r[rule, R].accuracy / r[rule, 1].accuracy for r in runs])
                  for R in (2, 4)}
        steps = [np.median([B.steps_to(r[rule, R], 1.0) for r in runs]) for R in (1, 2, 4)]
        acc = np.median([r[rule, 4].accuracy for r in runs])
        print(f"{rule:>7}: final accuracy R=2 / R=1 {ratios[2]:.3f}, R=4 / R=1 {ratios[4]:.3f} "
              f"(R=4: {100 * acc:.1f}%); steps to loss 1.0 on R = 1, 2, 4: "
              + ", ".join(f"{x:.0f}" for x in steps))
    for t in (0, 30, 150):
        ns = B.digits_noise(steps_trained=t, n=512)
        doubling = [B.predicted_steps(b, ns.b_simple, 1) / B.predicted_steps(2 * b, ns.b_simple, 1)
                    for b in (32, 64)]
        print(f"B_simple after {t:>3} steps: {ns.b_simple:.0f} examples → S(B)/S(2B) predicted "
              f"{doubling[0]:.2f} for 32 → 64, {doubling[1]:.2f} for 64 → 128")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
