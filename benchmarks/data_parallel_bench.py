"""Synchronous SGD with and without a 3× straggler, side by side (lesson 05).

    .venv/bin/python benchmarks/data_parallel_bench.py

The "last executor" effect (Do's lecture): with one rank three times slower, every step of
synchronous SGD takes as long as that rank's; the others spend the difference waiting.
Runs alternate (no straggler, straggler) so a change of load hits both alike.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

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
    a = ap.parse_args()
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


if __name__ == "__main__":
    main()
