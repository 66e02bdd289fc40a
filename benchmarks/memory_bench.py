"""Training memory, measured side by side (lesson 10).

    .venv/bin/python benchmarks/memory_bench.py [--quick]

The machine's load average is printed before and after: on a shared 2-core machine every
time ratio moves with it.

1. hand ZeRO-3 against FSDP2 (``fully_shard``), the same MLP, data and Adam, 4 ranks, runs
   alternated: step time hand/FSDP2 (target ≤ 1.3);
2. bytes sent per rank and step, measured: hand ZeRO-1, -2, -3 and FSDP2 against DDP
   (targets: ZeRO-3 within 5 % of 1.5, ZeRO-1/2 within 5 % of 1.0);
3. bytes kept per rank against ZeRO's formula, for every stage, fp32 and bf16
   (target: within 10 %), and the memory per rank of every scheme of lessons 05–10 for an
   8.5 M-parameter MLP with Adam on 2 ranks;
4. recomputation on a chain of 16 layers: bytes kept for backward and peak at √16 = 4
   segments against none, and the time ratio (one extra forward: about 1.33);
5. mixed precision on this CPU: one step in bf16 and fp16 autocast against fp32.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from ddl_lab.memory import anatomy as A
from ddl_lab.memory import library as L
from ddl_lab.memory import precision as Pr
from ddl_lab.memory import recompute as R
from ddl_lab.memory import schemes as M
from ddl_lab.memory import zero as Z
from ddl_lab.runtime import Cluster

HIDDEN, DEPTH, BATCH = 512, 4, 256


def hand_vs_fsdp(cluster: Cluster, rounds: int, steps: int) -> None:
    hand, builtin, lib = [], [], []
    for _ in range(rounds):                # alternated: a change of load hits all alike
        for out, run in ((hand, lambda: cluster.run(Z.zero_run, 3, "fp32", False, HIDDEN,
                                                    DEPTH, BATCH, steps)),
                         (builtin, lambda: cluster.run(Z.zero_run, 3, "fp32", False, HIDDEN,
                                                       DEPTH, BATCH, steps, builtin=True)),
                         (lib, lambda: cluster.run(L.library_run, "FSDP2", HIDDEN, DEPTH,
                                                   BATCH, steps))):
            out.append(np.median([r.seconds for r in run()]))
    h, b, f = (float(np.median(x)) for x in (hand, builtin, lib))
    print(f"\n1. step time, 4 ranks, MLP {DEPTH}×{HIDDEN}, batch {BATCH}: hand ZeRO-3 "
          f"{1e3 * h:.1f} ms with the ring by hand, {1e3 * b:.1f} ms with gloo's collectives; "
          f"FSDP2 {1e3 * f:.1f} ms: hand/FSDP2 = {h / f:.2f} and {b / f:.2f} (target ≤ 1.3)")


def bytes_and_memory(cluster: Cluster) -> None:
    ddp = cluster.run(Z.ddp_run, HIDDEN, DEPTH, BATCH, 2)
    base = np.mean([r.sent for r in ddp])
    print(f"\n2. bytes sent per rank and step against DDP's {base / 2**20:.2f} MiB")
    runs = {(s, p): cluster.run(Z.zero_run, s, p, False, HIDDEN, DEPTH, BATCH, 2)
            for s in Z.STAGES for p in A.PRECISIONS}
    for s in (1, 2, 3):
        ratio = np.mean([r.sent for r in runs[s, "fp32"]]) / base
        want = 1.5 if s == 3 else 1.0
        print(f"   hand ZeRO-{s}: {ratio:.3f}× DDP (target {want} ± 5 %: "
              f"{'met' if abs(ratio / want - 1) <= 0.05 else 'MISSED'})")
    fsdp = cluster.run(L.library_run, "FSDP2", HIDDEN, DEPTH, BATCH, 2)
    print(f"   FSDP2: {np.mean([r.sent for r in fsdp]) / base:.3f}× DDP (pads every parameter)")
    print("\n3. bytes kept per rank / ZeRO's formula (params, grads, optimizer; the busiest rank)")
    for (s, p), rs in runs.items():
        f = A.per_rank(rs[0].numel, 4, s, "adam", p)
        worst = max(max(getattr(r.memory, k) / f[k] for r in rs) for k in f)
        print(f"   ZeRO-{s}, {p}: at most {worst:.4f}× the formula "
              f"({'within' if worst <= 1.1 else 'OVER'} 10 %)")


def schemes(cluster2: Cluster) -> None:
    table = M.memory_table(cluster2.run(M.memory_run, 2048, 3, 64, 8))
    n_params = table["one process"][0].params // 4
    print(f"   every scheme, MLP of {n_params / 1e6:.1f} M parameters, Adam, 2 ranks, batch 64 "
          "(MiB: params + grads + optimizer state = total; activations apart)")
    for scheme, mems in table.items():
        cells = [f"{m.params / M.MiB:.0f} + {m.grads / M.MiB:.0f} + {m.optimizer / M.MiB:.0f} = "
                 f"{(m.params + m.grads + m.optimizer) / M.MiB:.0f} (+{m.activations / M.MiB:.1f})"
                 for m in mems]
        print(f"   {scheme:>16}: " + " | ".join(cells))


def recomputation(repeats: int) -> None:
    rows = {r.segments: r for r in R.recompute_run(16, 256, 1024, (0, 4), repeats)}
    none, four = rows[0], rows[4]
    print(f"\n4. recomputation, 16 layers of 256, batch 1024, √16 = 4 segments against none: "
          f"kept for backward {four.kept / none.kept:.2f}×, peak {four.peak / none.peak:.2f}×, "
          f"time {four.seconds / none.seconds:.2f}× (one extra forward: about 1.33)")


def precision(repeats: int) -> None:
    t = Pr.step_times(repeats)
    print(f"\n5. one step, batch 256, autocast on this CPU (2-byte units: "
          f"{Pr.low_precision_units() or 'none'}): "
          + ", ".join(f"{m} {t[m] / t['fp32']:.2f}× fp32" for m in t))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    a = ap.parse_args()
    rounds = 2 if a.quick else 5
    print(f"{os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.1f}")
    with Cluster(4, timeout=300) as c4:
        hand_vs_fsdp(c4, rounds, steps=4 if a.quick else 8)
        bytes_and_memory(c4)
    with Cluster(2, timeout=300) as c2:
        schemes(c2)
    recomputation(rounds)
    precision(5 if a.quick else 15)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
