"""Benchmark for lesson 07 (the parameter server), measured side by side in one run.

- one replica 3× slower than the others: seconds to reach a target training loss with
  BSP, SSP(s) and async (expected: async and SSP ahead of BSP); the same with transient
  stragglers (every step of every replica 10× slower with probability 0.1);
- staleness 32 (one replica computing on θ 32 updates old) with a plain rate vs the rate
  divided by the staleness (expected: the first diverges, the second does not);
- pulls + pushes per second one shard sustains, with 1, 2 and 4 clients;
- DistBelief's comparison: Downpour + Adagrad, Downpour with a fixed rate, Sandblaster
  L-BFGS: seconds to 95 % test accuracy and final accuracy;
- Sandblaster's batch time with and without backup tasks, one replica 3× or 6× slower.

    python benchmarks/parameter_server_bench.py [--target 0.1] [--s 3]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from ddl_lab.parameter_server import downpour as D
from ddl_lab.parameter_server import sandblaster as S
from ddl_lab.parameter_server.server import shard_throughput


def consistency(problem: D.Problem, target: float, s: int, **straggler: float) -> None:
    base = D.Setup(replicas=4, shards=2, steps=250, **straggler)
    runs = D.compare(problem, {"BSP": dict(mode="bsp"), f"SSP(s={s})": dict(mode="ssp", s=s),
                               "async": dict(mode="async")}, base)
    print(D.time_to_target_table(runs, target))
    bsp = runs["BSP"].time_to(target)
    for label, r in runs.items():
        print(f"  {label:<10} BSP time / its time to {target:g}: {bsp / r.time_to(target):.2f}×")


def staleness(problem: D.Problem) -> None:
    base = D.Setup(replicas=1, shards=2, rule="sgd", lr=0.5, steps=800)
    runs = D.compare(problem, {"no staleness": {}, "τ = 32, rate lr": dict(delay=32),
                               "τ = 32, rate lr/τ": dict(delay=32, staleness_aware=True)}, base)
    for label, r in runs.items():
        marks = np.round(r.loss[np.linspace(0, len(r.loss) - 1, 5).astype(int)], 3)
        print(f"  {label:<18} loss at 0, ¼, ½, ¾, end of 800 updates: {marks.tolist()}")


def throughput() -> None:
    for clients in (1, 2, 4):
        out = shard_throughput(n_params=2410, clients=clients, seconds=1.0)
        print(f"  {clients} client(s): {out['per_second']:7.0f} pulls+pushes/s of 2410 "
              f"floats; the shard was busy {100 * out['busy_fraction']:.0f} % of the time")


def distbelief(problem: D.Problem) -> None:
    runs = S.distbelief(problem)
    for label, r in runs.items():
        hit = np.flatnonzero(r.accuracy >= 0.95)
        when = f"{r.t[hit[0]]:.2f} s" if len(hit) else "never"
        print(f"  {label:<26} 95 % test accuracy after {when:>7}; final accuracy "
              f"{r.accuracy[-1]:.3f}, final training loss {r.final_loss:.4f}")
    print(f"  (times {'; '.join(dict.fromkeys(r.emulated for r in runs.values() if r.emulated))})")


def backups(problem: D.Problem) -> None:
    for slow in (3.0, 6.0):
        for backup in (False, True):
            r = S.run(problem, replicas=4, iterations=15, slices=8, slow=slow, backup=backup)
            ms = [1e3 * b["seconds"] for b in r.batches]
            print(f"  straggler ×{slow:g}, backup tasks {'on ' if backup else 'off'}: median "
                  f"batch {np.median(ms):5.1f} ms, {sum(b['backups'] for b in r.batches)} "
                  f"backups, {r.report.shards[0]['discarded']} late copies discarded "
                  f"(times {r.emulated})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", type=float, default=0.1, help="target training loss")
    ap.add_argument("--s", type=int, default=3, help="SSP's staleness bound")
    a = ap.parse_args()
    problem = D.digits_problem()
    t0 = time.perf_counter()
    print("== one replica 3× slower (4 replicas, 2 shards, Adagrad) ==")
    consistency(problem, a.target, a.s, slow=3.0)
    print("\n== transient stragglers: any step 10× slower with probability 0.1 ==")
    consistency(problem, a.target, a.s, hiccup=0.1)
    print("\n== staleness 32, plain SGD lr = 0.5 (numpy MLP, no compute padding) ==")
    staleness(D.digits_problem(example_cost=0.0))
    print("\n== one shard's throughput ==")
    throughput()
    print("\n== DistBelief's comparison (4 replicas, 2 shards) ==")
    distbelief(problem)
    print("\n== Sandblaster backup tasks (8 slices, 4 replicas) ==")
    backups(problem)
    print(f"\n(total {time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
