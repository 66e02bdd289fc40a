"""Gradient descent on this machine (lesson 01), measured side by side in one run.

- the cost of one full gradient of J over m examples against one example's gradient (what
  an SGD update pays), as m grows ×10: the lecture's "GD is very costly" (expected: the full
  gradient ×10 per ×10 of m, one example's flat);
- one epoch of batch GD, of mini-batch SGD (batch 32) and of SGD on the same data, and
  their ratios;
- the batch size that reaches J − J* < 10⁻² fastest in wall time (each size with its best
  rate from a small grid), against the lecture's rule of thumb 32–256;
- the cost of a forward + backward pass of lesson 01's MLP at batch sizes around powers of
  2 (the lecture: "powers of 2 run faster").

    .venv/bin/python benchmarks/gradient_descent_bench.py
"""
from __future__ import annotations

import os
import time

import numpy as np
import torch

from ddl_lab.gradient_descent import experiments as gd
from ddl_lab.ml import data, models


def gradient_cost() -> None:
    cost = gd.gradient_cost([1_000, 10_000, 100_000, 1_000_000], d=20)
    print("one gradient of J (numpy, one BLAS thread):")
    for m, full, one in zip(cost["m"], cost["full"], cost["one"]):
        print(f"  m = {m:>9,}: full {1e3 * full:8.3f} ms, one example {1e6 * one:6.1f} µs, "
              f"full / one {full / one:9.0f}×")
    for lo in range(len(cost["m"]) - 1):
        print(f"  m ×10 ({cost['m'][lo]:,} → {cost['m'][lo + 1]:,}): full ×"
              f"{cost['full'][lo + 1] / cost['full'][lo]:.1f}, one example ×"
              f"{cost['one'][lo + 1] / cost['one'][lo]:.2f}")


def epochs(X: np.ndarray, y: np.ndarray) -> None:
    per = {name: gd.epoch_time(X, y, models.linreg_grad, lr, b, repeat=5)
           for name, b, lr in (("batch GD", len(y), 1.0), ("mini-batch 32", 32, 0.1),
                               ("SGD", 1, 0.01))}
    print(f"\none epoch over {len(y):,} examples (best of 5):")
    for name, s in per.items():
        print(f"  {name:>14}: {1e3 * s:8.2f} ms ({s / per['batch GD']:6.1f}× batch GD)")


def batch_sizes(X: np.ndarray, y: np.ndarray) -> None:
    j_star = models.linreg_loss(np.linalg.lstsq(X, y, rcond=None)[0], X, y)
    sizes = [2 ** k for k in range(12)]
    sweep = gd.batch_size_sweep(X, y, sizes, lrs=[0.03, 0.1, 0.3, 1.0], j_star=j_star,
                                target=1e-2)
    print("\nwall time to J − J* < 10⁻² (best rate per batch size):")
    for b, lr, t in zip(sweep["size"], sweep["best_lr"], sweep["to_target_s"]):
        print(f"  batch {b:>5}: " + (f"{1e3 * t:7.3f} ms (γ = {lr:g})" if np.isfinite(t)
                                     else "not reached in 4 epochs"))
    fastest = int(sweep["size"][np.nanargmin(sweep["to_target_s"])])
    within = 32 <= fastest <= 256
    print(f"  fastest: batch {fastest} ({'inside' if within else 'outside'} the rule of thumb "
          "32–256)")


def powers_of_two() -> None:
    torch.set_num_threads(1)
    Xd = np.random.default_rng(0).normal(size=(1024, 64)).astype(np.float32)
    mlp = models.MLP()

    def step(b: int) -> None:
        mlp.zero_grad()
        torch.nn.functional.cross_entropy(mlp(torch.from_numpy(Xd[:b])),
                                          torch.zeros(b, dtype=torch.long)).backward()

    t = {b: gd.time_it(lambda: step(b), min_time=0.05) for b in (127, 128, 129, 255, 256, 257)}
    print("\nMLP forward + backward:")
    for p in (128, 256):
        ratio = t[p] / ((t[p - 1] + t[p + 1]) / 2)
        print(f"  batch {p}: {1e6 * t[p]:6.1f} µs, ×{ratio:.2f} the time of its neighbours "
              "(1.00 = no difference)")


def main() -> None:
    t0 = time.perf_counter()
    print(f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    ds = data.linear_regression(m=2048, d=10, noise=0.5, seed=0, spread=3)
    gradient_cost()
    epochs(ds.X, ds.y)
    batch_sizes(ds.X, ds.y)
    powers_of_two()
    print(f"\n({time.perf_counter() - t0:.0f} s; load average now {os.getloadavg()[0]:.2f})")


if __name__ == "__main__":
    main()
