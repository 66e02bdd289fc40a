"""Benchmark for lesson 08: accuracy and measured traffic of each compressor vs fp32.

Data-parallel SGD on the digits model with 4 real workers exchanging encoded updates
over gloo (``ddl_lab.compression.training``); every scheme trains the same model from the
same start on the same data; median of 3 seeds. Targets:

- 1-bit + error feedback within 1 point of fp32 at >= 30x less traffic;
- 1-bit without error feedback visibly worse (> 1 point below fp32);
- threshold or top-k (with residual) within 1 point at >= 100x less traffic.

Gossip (D-PSGD, Lian et al. 2017) against allreduce SGD on the same 4 workers, IID and
label-skewed shards: bytes per step per rank (gossip: 2·S on a ring; ring allreduce:
2(n−1)/n·S) and the accuracy gap at equal steps (worst replica and the replicas' mean),
median over the seeds; load average printed.

    python benchmarks/compression_bench.py [--model mlp|cnn] [--epochs 15] [--seeds 3]
                                           [--only schemes|gossip]
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

from ddl_lab import Cluster
from ddl_lab.compression.gossip import run_gossip
from ddl_lab.compression.training import run
from ddl_lab.compression.compressors import Scheme

SCHEMES = [Scheme("fp32"), Scheme("fp16"), Scheme("1-bit"), Scheme("1-bit", ef=True),
           Scheme("qsgd", 4), Scheme("threshold", 0.1, ef=True),
           Scheme("threshold", 0.2, ef=True), Scheme("top-k", 0.003, ef=True)]


def measure(cluster: Cluster, scheme: Scheme, seeds: int, **options) -> dict:
    runs = [run(cluster, scheme, seed=s, timeout=600, **options) for s in range(seeds)]
    return {"label": runs[0].label,
            "accuracy": statistics.median(r.final_accuracy for r in runs),
            "update": statistics.median(r.update_bytes for r in runs),
            "total": statistics.median(r.total_bytes for r in runs),
            "fp32": runs[0].fp32_bytes,
            "ms": statistics.median(r.times_ms["encode"] + r.times_ms["decode"] for r in runs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp", choices=["mlp", "cnn"])
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--only", choices=["schemes", "gossip"], default=None)
    a = ap.parse_args()
    with Cluster(4, timeout=600, echo=False) as cluster:
        if a.only != "gossip":
            schemes(cluster, a)
        if a.only != "schemes":
            gossip_vs_allreduce(cluster, a.seeds)


def gossip_vs_allreduce(cluster: Cluster, seeds: int, steps: int = 300) -> None:
    print(f"\ngossip vs allreduce: digits MLP, 4 workers, {steps} steps, median of {seeds} seeds; "
          f"load average before: {os.getloadavg()[0]:.1f}")
    for skew in (0.0, 1.0):
        runs = {m: [run_gossip(cluster, m, skew=skew, steps=steps, seed=s) for s in range(seeds)]
                for m in ("gossip", "allreduce")}
        g, r = runs["gossip"], runs["allreduce"]
        gb, rb = g[0].bytes_per_step, r[0].bytes_per_step
        worst = statistics.median(x.worst_accuracy[-1] - y.worst_accuracy[-1] for x, y in zip(g, r))
        mean = statistics.median(x.mean_accuracy[-1] - y.mean_accuracy[-1] for x, y in zip(g, r))
        cons = statistics.median(x.consensus[-1] for x in g)
        print(f"{'IID' if skew == 0 else 'label-skewed':>12}: bytes/step/rank gossip {gb:,.0f}, "
              f"allreduce {rb:,.0f} (ratio {gb / rb:.2f}); accuracy gap gossip − allreduce: "
              f"worst replica {100 * worst:+.1f} points, mean model {100 * mean:+.1f} points; "
              f"consensus distance at the end {cons:.3f}")
    print(f"load average after: {os.getloadavg()[0]:.1f}")


def schemes(cluster: Cluster, a: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    rows = [measure(cluster, s, a.seeds, model=a.model, epochs=a.epochs) for s in SCHEMES]
    base = rows[0]
    print(f"digits {a.model.upper()}, 4 workers, {a.epochs} epochs, median of {a.seeds} seeds "
          f"({time.perf_counter() - t0:.0f} s)")
    print(f"{'scheme':<24}{'accuracy':>9}{'vs fp32':>9}{'update':>10}{'traffic':>12}"
          f"{'less':>9}{'codec ms':>10}")
    for r in rows:
        less = base["total"] / r["total"]
        r["less"], r["delta"] = less, 100 * (r["accuracy"] - base["accuracy"])
        print(f"{r['label']:<24}{100 * r['accuracy']:>8.1f}%{r['delta']:>+8.1f}p"
              f"{r['update']:>9.0f}B{r['total'] / 1e6:>10.2f}MB{less:>8.0f}x{r['ms']:>10.2f}")
    by = {r["label"]: r for r in rows}
    one_ef, one = by["1-bit + EF"], by["1-bit"]
    sparse = [r for r in rows if r["label"].startswith(("threshold", "top-k"))]
    best = max(sparse, key=lambda r: (r["delta"] >= -1.0, r["less"]))
    verdicts = [
        ("1-bit + EF within 1 point at >= 30x", one_ef["delta"] >= -1.0 and one_ef["less"] >= 30),
        ("1-bit without EF > 1 point worse", one["delta"] < -1.0),
        (f"{best['label']} within 1 point at >= 100x ({best['less']:.0f}x)",
         best["delta"] >= -1.0 and best["less"] >= 100),
    ]
    for text, ok in verdicts:
        print(f"{'PASS' if ok else 'MISS'}  {text}")


if __name__ == "__main__":
    main()
