"""Where the time goes, measured side by side (lesson 13).

    .venv/bin/python benchmarks/performance_bench.py [--quick]

The machine's load average is printed before and after each part: on a shared 2-core
machine every time ratio moves with it.

1. the lesson's matmul FLOP/s (``roofline.matmul_flop_s``: best of a few ``torch.mm``
   timed with ``perf_counter``, the way a learner's cell measures it) against torch's own
   best, the best block of ``torch.utils.benchmark.Timer.blocked_autorange`` on the same
   product, measured
   alternately: float32 and bfloat16, sizes 256–1024, one thread and all (target: the
   lesson's within 10 %, ratio ≥ 0.90);
2. FLOPs counted by ``FlopCounterMode`` in a real forward and backward of lesson 12's GPT
   (and two other shapes) / the formula 6N + 12·L·h·s (target: 1.00 ± 2 %);
3. the overlap share read from real traces (``traces.summary``) of a DDP step and of a hand
   step that allreduces the same buckets after backward, two ranks, three bucket sizes,
   averaged over ranks and repeats (target: DDP's higher; the hand step's is 0 by
   construction), with lesson 11's φ from the same traces;
4. the per-rank batch where compute meets the allreduce: predicted from the measured FLOP/s
   and gloo's fitted α, β, and found by a real sweep on two ranks (predicted / swept; the
   prediction counts FLOPs at the matmul peak, while a small MLP's step runs below the peak
   and pays a fixed overhead per operation, so its compute meets the allreduce at a smaller
   batch than predicted: the ratio is above 1, most for the narrowest model).
"""
from __future__ import annotations

import argparse
import os
import tempfile

import numpy as np
import torch
from torch.utils import benchmark

from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.performance import crossover as X
from ddl_lab.performance import flops as F
from ddl_lab.performance import traces as T
from ddl_lab.performance.roofline import DTYPES, cores, matmul_flop_s, threads
from ddl_lab.runtime import Cluster
from ddl_lab.transformers.train import MODEL


def _load() -> str:
    return f"load {os.getloadavg()[0]:.1f}"


def torch_best(n: int, dtype: str) -> float:
    """FLOP/s of torch.mm on n × n by torch.utils.benchmark's blocked_autorange: its best
    block (a best against the lesson's best, as a shared machine's load only slows runs)."""
    a, b = (torch.randn(n, n).to(DTYPES[dtype]) for _ in range(2))
    m = benchmark.Timer("torch.mm(a, b)", globals={"a": a, "b": b, "torch": torch},
                        num_threads=torch.get_num_threads()).blocked_autorange(min_run_time=0.2)
    return 2.0 * n ** 3 / min(m.times)


def peak(quick: bool) -> None:
    print(f"\n1. matmul FLOP/s: the lesson's measurement / torch.utils.benchmark's ({_load()})")
    print(f"  {'dtype':<9}{'threads':>8}{'n':>6}{'lesson GFLOP/s':>16}{'torch GFLOP/s':>15}"
          f"{'ratio':>7}")
    for dtype in ("float32", "bfloat16"):
        for t in sorted({1, cores()}):
            with threads(t):
                for n in ((256, 512) if quick else (256, 512, 1024)):
                    ours, theirs = [], []
                    for _ in range(2 if quick else 3):              # alternated
                        ours.append(matmul_flop_s(n, dtype, repeats=5))
                        theirs.append(torch_best(n, dtype))
                    o, th = max(ours), max(theirs)
                    print(f"  {dtype:<9}{t:>8}{n:>6}{o / 1e9:>16.1f}{th / 1e9:>15.1f}"
                          f"{o / th:>7.2f}")
    print(f"  (target ≥ 0.90; {_load()})")


def counted() -> None:
    print(f"\n2. FlopCounterMode / 6N + 12·L·h·s on real steps ({_load()})")
    for cfg, b in ((MODEL, 4), (GPTConfig(vocab=50, seq=32, hidden=48, heads=3, layers=3), 2),
                   (GPTConfig(vocab=256, seq=128, hidden=128, heads=4, layers=4), 2)):
        c, f = F.gpt_counted_flops(cfg, b), F.step_flops(cfg, b)
        print(f"  h={cfg.hidden:<4} L={cfg.layers} s={cfg.seq:<4} V={cfg.vocab:<4} b={b}: "
              f"counted {c:.4g}, formula {f:.4g}, ratio {c / f:.4f}  (6N alone: {c / F.step_flops(cfg, b, attention=False):.3f})")


def overlap(c2: Cluster, quick: bool) -> None:
    print(f"\n3. overlap share from real traces, 2 ranks ({_load()})")
    print(f"  {'bucket MB':>10}{'DDP overlap':>13}{'hand overlap':>14}{'DDP φ':>7}"
          f"{'DDP exposed ms':>16}{'hand exposed ms':>17}")
    for mb in (0.02, 0.05, 0.2):
        got = {"ddp": [], "hand": []}
        phis = []
        for _ in range(2 if quick else 5):
            for mode in ("ddp", "hand"):                        # alternated
                with tempfile.TemporaryDirectory() as d:
                    runs = c2.run(T.profiled_steps, d, mode, mb, T.TRACE_MODEL, 4, 2)
                    path = T.merge_traces([r["path"] for r in runs], os.path.join(d, "m.json"))
                    got[mode] += T.summary(path)
                    if mode == "ddp":
                        phis.append(T.phi(path))
        mean = {m: (np.mean([r["overlap"] for r in rows]),
                    np.mean([r["exposed"] for r in rows]) * 1e3) for m, rows in got.items()}
        print(f"  {mb:>10}{mean['ddp'][0]:>13.2f}{mean['hand'][0]:>14.2f}{np.mean(phis):>7.2f}"
              f"{mean['ddp'][1]:>16.2f}{mean['hand'][1]:>17.2f}")
    print(f"  (target: DDP's overlap higher; {_load()})")


def crossover(c2: Cluster, quick: bool) -> None:
    print(f"\n4. the DP crossover batch of an MLP (2 layers), 2 ranks ({_load()})")
    sizes = (4 << 10, 64 << 10, 512 << 10, 2 << 20)
    for width in ((256,) if quick else (128, 256, 512)):
        alpha, beta = X.fit_ring(2, sizes, [max(t) for t in zip(*c2.run(X.link, sizes, 5))])
        batches = [2 ** k for k in range(1, 13)]
        runs = c2.run(X.sweep, batches, width, 2, 3 if quick else 7)
        compute = [max(v) for v in zip(*(r["compute"] for r in runs))]
        comm = [max(v) for v in zip(*(r["comm"] for r in runs))]
        s = runs[0]
        pred = X.predicted(s["flop_s"], 6 * s["params"], X.ring_time(2, 4 * s["params"],
                                                                     alpha, beta))
        swept = X.found(batches, compute, comm)
        print(f"  width {width}: {s['params']:,} parameters, {s['flop_s'] / 1e9:.0f} GFLOP/s, "
              f"α {alpha * 1e6:.0f} µs, β {1 / beta / 1e9:.2f} GB/s: predicted b = {pred:.0f}, "
              f"swept b = {swept:.0f}, predicted / swept = {pred / swept:.2f}")
    print(f"  ({_load()})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer sizes and repeats")
    a = ap.parse_args()
    print(f"{os.cpu_count()} cores; torch {torch.__version__}; "
          f"load average before: {os.getloadavg()[0]:.1f}")
    peak(a.quick)
    counted()
    with Cluster(2, timeout=300) as c2:
        overlap(c2, a.quick)
        crossover(c2, a.quick)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
