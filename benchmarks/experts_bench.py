"""Experts and composed layouts, measured side by side (lesson 14).

    .venv/bin/python benchmarks/experts_bench.py [--quick]

The machine's load average is printed before and after: on a shared 2-core machine every
time ratio moves with it.

1. step time (forward and backward) of the hand expert-parallel MoE layer
   (``parallel.ep_moe``: all-to-all dispatch and combine with uneven splits) against the
   one-process MoE (``moe.moe_forward`` on the same n slices with a slice's capacity, as
   ``parallel.one_process`` does it), at 2 and 4 ranks, the same tokens in total, the two
   alternated inside the workers (the one-process step on rank 0, the others waiting at a
   barrier), median of several steps, slowest rank; a balanced router and the skewed one of
   ``parallel.problem`` (expert 0 everyone's favourite);
2. bytes on the wire per rank: expert parallelism measured by the wiretap (``ep_step``) /
   ``ep_bytes`` from the one-process routing, per all-to-all, forward and backward, top-1
   and top-2 (target 1.00; the outputs and every gradient checked against one process's
   too); and for every layout of ``compose.LAYOUTS``, each mesh dimension's bytes (the
   busiest rank's, the last step's) / the planner's prediction (``compose.predicted``:
   torch's way — no vocabulary parallelism, whole activations between pipeline stages,
   FSDP2's root gathered once, HSDP as ZeRO-3 over "shard" plus an all-reduce over
   "replicate") (target 1.00);
3. the planner's predicted / measured step time and model-state memory (weights, gradients,
   Adam's moments; the busiest rank) for every layout (targets: within 25 % and 10 %), the
   planner fed this machine's numbers: the FLOP/s one single-threaded process reaches on
   this GPT (``compose.effective_flop_s``), the cores shared by the ranks, α and β of a
   gloo message between two workers (lesson 06's ping-pong fit);
4. every layout's loss minus one process's after the same Adam steps (target: float32
   rounding, ≈ 1e-5 relative or less).

What this machine showed (2 cores shared with other work, load average 7–28 during the
runs, torch 2.13 CPU, gloo; one full run and two --quick runs):

- expert parallelism / one process: 0.34–0.72 in the full run (0.44–1.02 in the quick
  runs, moving with the load). The expert-parallel ranks use both cores against one
  thread, and they run only the kept pairs, a matmul per local expert, where the one-process
  layer's batched ``baddbmm`` runs every capacity slot of the (E, C, h) buffer, empty ones
  too (the all-to-alls' own share of the step is not measured apart here);
- bytes: 1.0000 everywhere — every all-to-all of expert parallelism on every rank (splits,
  dispatch, combine; top-1 and top-2; uneven splits, pairs dropped) and every mesh dimension
  of all 8 layouts, the 1-D ones included: nothing for the planner to explain away; the
  expert-parallel output and gradients equal one process's within 7e-7 of their largest
  element (float32), the same pairs routed and dropped;
- model states: predicted / measured 1.0000 for all 8 layouts;
- step time: predicted / measured 0.08–0.12 (the planner 8–13× too fast) for every layout
  but PP4 (0.68 in the full run, 0.81 in the first quick one: one plain block per stage, no DTensor
  or FSDP2 hooks, and a large modelled bubble), 0.06–0.16 in that quick run; the planner's
  model is FLOPs over the measured FLOP/s (6.5–8.6 GFLOP/s, one thread) plus α–β per
  collective, and on this tiny GPT per-op overheads — DTensor's dispatch, FSDP2's hooks, the
  pipeline's schedule, a gloo round per collective — and 4–8 ranks on 2 cores dominate. The
  25 % target is missed and printed as missed, not tuned;
- losses: every layout, every step, every rank within 1.0e-7 relative of one process's.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.experts import compose as C
from ddl_lab.experts import parallel as P
from ddl_lab.experts import planner as PL
from ddl_lab.experts.moe import MoEConfig, moe_forward
from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.ring_allreduce import cost
from ddl_lab.runtime import Cluster
from ddl_lab.runtime.launch import close_shared

MOE = MoEConfig(hidden=128, ffn=512, experts=8, k=2, capacity_factor=1.25, aux_weight=0.01)
TOKENS = 2048                                      # in total, over the ranks
GPT = GPTConfig(vocab=96, seq=64, hidden=64, heads=4, layers=4)
BATCH = 8


# ------------------------------------------------------------------ worker functions

def moe_times(cfg: MoEConfig, tokens_per_rank: int, steps: int,
              skew: float) -> dict[str, float]:
    """Worker: median seconds of one forward and backward of the expert-parallel layer on
    this rank's slice (all ranks) and of the one-process layer on all n slices (rank 0,
    the others waiting at the closing barrier), alternated, float32."""
    rank, n = dist.get_rank(), dist.get_world_size()
    data = P.problem(cfg, n, tokens_per_rank, 0, torch.float32, skew)
    mine = P.local_experts(cfg, rank, n)
    rows = slice(rank * tokens_per_rank, (rank + 1) * tokens_per_rank)
    ep_params = {k: (v if k == "router.weight" else v[mine.start:mine.stop]).clone()
                 .requires_grad_() for k, v in data["params"].items()}
    whole = {k: v.clone().requires_grad_() for k, v in data["params"].items()}
    x_ep, w_ep = data["x"][rows].clone().requires_grad_(), data["w"][rows]
    x_one = data["x"].clone().requires_grad_()

    def ep_step() -> None:
        for p in (*ep_params.values(), x_ep):
            p.grad = None
        y, facts = P.ep_moe(ep_params, x_ep, cfg)
        ((y * w_ep).sum() + cfg.aux_weight * facts["aux"]).backward()

    def one_step() -> None:
        if rank:
            return
        for p in (*whole.values(), x_one):
            p.grad = None
        loss = x_one.new_zeros(())
        for xs, ws in zip(x_one.split(tokens_per_rank), data["w"].split(tokens_per_rank)):
            y, stats = moe_forward(whole, xs, cfg)
            loss = loss + (y * ws).sum() + cfg.aux_weight * stats.aux
        loss.backward()

    times: dict[str, list[float]] = {"ep": [], "one": []}
    for i in range(steps + 1):                     # one more warm step left out
        for name, step in (("ep", ep_step), ("one", one_step)):
            dist.barrier()
            t0 = time.perf_counter()
            step()
            dist.barrier()
            if i:
                times[name].append(time.perf_counter() - t0)
    return {k: float(np.median(v)) for k, v in times.items()}


# ------------------------------------------------------------------------ sections

def ep_time(clusters: dict[int, Cluster], steps: int) -> None:
    print(f"\n1. MoE layer, forward and backward, h = {MOE.hidden}, f = {MOE.width}, "
          f"E = {MOE.experts}, top-{MOE.k}, capacity factor {MOE.capacity_factor}, "
          f"{TOKENS} tokens in total, float32: median of {steps} alternated steps, slowest "
          "rank (one process: rank 0, one thread)")
    for n, c in clusters.items():
        for skew, label in ((0.0, "balanced router"), (1.5, "skewed router")):
            runs = c.run(moe_times, MOE, TOKENS // n, steps, skew)
            ep, one = max(r["ep"] for r in runs), runs[0]["one"]
            print(f"   n = {n}, {label:15}: expert-parallel {1e3 * ep:6.1f} ms, one process "
                  f"{1e3 * one:6.1f} ms: EP/one process = {ep / one:.2f}")


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a − b| over max |b|: float32 rounding of sums taken in another order."""
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


def ep_wire(clusters: dict[int, Cluster]) -> list[float]:
    print("\n2. bytes on the wire per rank and step, measured / formula (target 1.00)")
    print("   expert parallelism, wiretap / ep_bytes (routing of the one-process run; skewed "
          "router, uneven splits): per rank, forward (splits + dispatch + combine) and "
          "backward (combine + dispatch); in brackets the busiest rank's")
    tokens = 256
    worst: list[float] = []
    for n, c in clusters.items():
        for k in (1, 2):
            cfg = MoEConfig(hidden=MOE.hidden, ffn=MOE.width, experts=MOE.experts, k=k,
                            capacity_factor=MOE.capacity_factor, aux_weight=MOE.aux_weight)
            runs = c.run(P.ep_step, cfg, tokens, 3, torch.float32)
            ref = P.one_process(cfg, n, tokens, 3, torch.float32)
            want = P.ep_bytes(cfg, ref["splits"], torch.float32)
            cells, per_op = [], []
            for phase in ("forward", "backward"):
                got = [sum(r["bytes"][phase].values()) for r in runs]
                ratios = [g / sum(w[phase].values()) for g, w in zip(got, want)]
                per_op += [r["bytes"][phase][op] / w[phase][op] for r, w in zip(runs, want)
                           for op in w[phase] if w[phase][op]]
                worst += ratios
                cells.append(f"{phase} {min(ratios):.4f}–{max(ratios):.4f} "
                             f"({max(got) / 2**10:.1f} KiB)")
            got = P.assemble(runs)
            same = all(got[key] == ref[key] for key in ("dropped", "received", "splits"))
            off = max(_relative(got["output"], ref["output"]),
                      *(_relative(got["grads"][g], want) for g, want in ref["grads"].items()))
            print(f"     n = {n}, top-{k}: " + ", ".join(cells)
                  + f"; each all-to-all {min(per_op):.4f}–{max(per_op):.4f}")
            print(f"       received {ref['received']}, dropped {sum(ref['dropped'])} "
                  f"({'the same' if same else 'NOT the same'} on the workers); output and "
                  f"every gradient = one process's within {off:.1e} of its largest element")
    return worst


def layout_wire(checked: list[dict], worst: list[float]) -> None:
    print("   composed layouts, each mesh dimension: measured (busiest rank, last step) / "
          "the planner's")
    for v in checked:
        cells = []
        for dim, want in v["bytes_predicted"].items():
            got = v["bytes"].get(dim, 0.0)
            ratio = got / want if want else float("nan")
            if want:
                worst.append(ratio)
            cells.append(f"{dim} {got / 2**10:.1f}/{want / 2**10:.1f} KiB = {ratio:.4f}")
        cells += [f"{dim} {got / 2**10:.1f} KiB NOT PREDICTED"
                  for dim, got in v["unpredicted"].items()]
        print(f"     {v['name']:12}: " + ", ".join(cells))
    far = max(worst, key=lambda r: abs(r - 1))
    print(f"   furthest from 1: {far:.4f} ({'met' if abs(far - 1) < 5e-3 else 'MISSED'})")


def machine(c2: Cluster) -> tuple[float, float]:
    """α (s) and β (s/byte) of a gloo message between two workers (lesson 06's fit)."""
    probe = [1 << 10, 1 << 14, 1 << 18, 1 << 21]
    return cost.fit_alpha_beta(probe, c2.run(cost.ping_pong, probe, 5)[0])


def planner_fit(rows: list[dict], checked: list[dict], flop_s: float, alpha: float,
                beta: float, cores: int) -> None:
    print(f"\n3. the planner against the runs: GPT {GPT.layers}×{GPT.hidden} ({GPT.heads} heads),"
          f" s = {GPT.seq}, V = {GPT.vocab}, batch {BATCH}, Adam fp32; this machine: "
          f"{flop_s / 1e9:.2f} GFLOP/s one process (one thread; step "
          f"{1e3 * rows[0]['one_process_seconds']:.1f} ms), {cores} cores shared by the ranks,"
          f" α = {1e6 * alpha:.0f} µs, 1/β = {1 / beta / 1e9:.2f} GB/s")
    print("   predicted / measured: step time (target within 25 %), model states of the "
          "busiest rank (target within 10 %)")
    t_ok = s_ok = 0
    for row, v in zip(rows, checked):
        n = C.ranks_of(row["layout"])
        c = PL.on_one_node(PL.Cluster(n, 1e12, flop_s * min(1.0, cores / n), per_node=n,
                                      alpha_node=alpha, beta_node=beta))
        parts = C.predicted(row["layout"], GPT, BATCH, c)["seconds"]
        t = v["seconds_predicted"] / v["seconds"]
        s = v["states_predicted"] / v["states"]
        t_ok += abs(t - 1) <= 0.25
        s_ok += abs(s - 1) <= 0.10
        split = ", ".join(f"{k} {1e3 * x:.1f}" for k, x in parts.items()
                          if k != "total" and x)
        print(f"     {v['name']:12} ({n} ranks): time {1e3 * v['seconds_predicted']:6.1f} / "
              f"{1e3 * v['seconds']:6.1f} ms = {t:.3f} ({split} ms); states "
              f"{v['states_predicted'] / 2**20:.3f} / {v['states'] / 2**20:.3f} MiB = {s:.4f}")
    k = len(checked)
    print(f"   step time within 25 %: {t_ok} of {k} ({'met' if t_ok == k else 'MISSED'}: per-op "
          "overheads and oversubscribed cores, not in the planner's model, dominate this tiny "
          f"model); model states within 10 %: {s_ok} of {k} ({'met' if s_ok == k else 'MISSED'})")


def losses(rows: list[dict], steps: int) -> None:
    print(f"\n4. loss after {steps} Adam steps minus one process's (float32; target ≲ 1e-5 "
          "relative)")
    worst = 0.0
    for row in rows:
        ref = np.asarray(row["reference"])
        rel = max(float(np.max(np.abs(np.asarray(r) - ref) / np.abs(ref)))
                  for r in row["losses"])
        worst = max(worst, rel)
        print(f"     {row['name']:12}: {row['loss_diff']:+.2e} (one process "
              f"{ref[-1]:.5f}); every step, every rank: at most {rel:.1e} relative")
    print(f"   at most {worst:.1e} relative ({'met' if worst <= 1e-5 else 'MISSED'})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer steps")
    a = ap.parse_args()
    torch.set_num_threads(1)                       # one process = one worker: one thread
    cores = os.cpu_count() or 1
    print(f"{cores} cores; torch {torch.__version__}; "
          f"load average before: {os.getloadavg()[0]:.1f}")
    with Cluster(2, timeout=300) as c2, Cluster(4, timeout=300) as c4:
        clusters = {2: c2, 4: c4}
        ep_time(clusters, steps=5 if a.quick else 15)
        worst = ep_wire(clusters)
        alpha, beta = machine(c2)
    steps = 3 if a.quick else 5
    rows = C.table(GPT, C.LAYOUTS, steps=steps, batch=BATCH)
    close_shared()
    flop_s = C.effective_flop_s(GPT, BATCH, rows[0]["one_process_seconds"])
    checked = C.validate(rows, flop_s, alpha, beta, cores)
    layout_wire(checked, worst)
    planner_fit(rows, checked, flop_s, alpha, beta, cores)
    losses(rows, steps)
    print(f"\nload average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
