"""DDP vs the course's synchronous SGD, two hosts vs one, and the time a restart loses
(lesson 11).

    .venv/bin/python benchmarks/scaling_out_bench.py [--skip-unsafe]

1. Time per step of ``scaling_out.ddp.ddp_train`` (torch DDP) and lesson 05's
   ``data_parallel.engine.sync_sgd`` on the same 4 workers, model, data and seed,
   alternating so a change of load hits both (the digits MLP, 9 k parameters, and the wide
   MLP, 300 k).
2. A 64 MB allreduce among 4 processes under torchrun: on one host (one namespace) and on
   two hosts (two namespaces joined by a veth pair, 2 processes each); bytes on the wire.
   Needs root; skipped with the reason otherwise.
3. The same elastic job under torchrun, uninterrupted and with a worker killed at step 13
   (resumed from the checkpoint of step 10): the wall time a restart costs. Then the
   restart without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (torchrun's default), which fails
   or hangs on gloo (skip with --skip-unsafe).
4. Lesson 11's Options: the same worker function (lesson 05's sync SGD, 2 workers) on the
   course runtime, torchrun, Spark's TorchDistributor and Ray Train's TorchTrainer: each
   engine's own start, its job start-up and per-step time as ratios to the course runtime's,
   median of ``--rounds`` rounds (Spark and Ray skipped, saying why, without the extra).
   ``--engines-only`` runs this section alone.
"""
from __future__ import annotations

import argparse
import os

import numpy as np

from ddl_lab.data_parallel import engine as D
from ddl_lab.runtime import Cluster
from ddl_lab.scaling_out import ddp as P
from ddl_lab.scaling_out import engines as G
from ddl_lab.scaling_out.elastic import run_elastic
from ddl_lab.scaling_out.hosts import VirtualHosts, unavailable
from ddl_lab.scaling_out.launch import run_jobs, torchrun_command

WHERE = "ddl_lab.scaling_out.hosts:where_am_i"


def ddp_vs_ours(rounds: int, steps: int) -> None:
    with Cluster(4, timeout=300) as c:
        c.run_with(P.ddp_train, ("digits-mlp", 2, 64, 0.1), timeout=300)   # DDP's first import
        for workload, batch in (("digits-mlp", 64), ("digits-wide-mlp", 256)):
            ours, ddp = [], []
            for _ in range(rounds):
                ours.append(np.median(D.step_times(c.run(D.sync_sgd, workload, steps, batch,
                                                         0.1, barrier=False))))
                ddp.append(np.median(D.step_times(c.run(P.ddp_train, workload, steps, batch,
                                                        0.1))))
            o, d = float(np.median(ours)), float(np.median(ddp))
            print(f"  {workload}, global batch {batch}: sync_sgd {1e3 * o:.2f} ms/step, DDP "
                  f"{1e3 * d:.2f} ms/step -> DDP / ours = {d / o:.2f}x")


def _best(job_results: dict) -> float:
    per_rank = [r["allreduce_s"] for r in job_results.values()]
    return float(np.min(np.max(np.array(per_rank), axis=0)))


def two_hosts_vs_one(repeats: int) -> None:
    why = unavailable()
    if why:
        print(f"  skipped: {why}")
        return
    nbytes = 64 << 20
    with VirtualHosts() as vh:
        one = run_jobs([torchrun_command(WHERE, nbytes, repeats, nproc=4)], 120,
                       prefixes=[vh.a.prefix], envs=[{"GLOO_SOCKET_IFNAME": "lo"}])[0]
        before = vh.veth_bytes()
        two = vh.torchrun(WHERE, nbytes, repeats, nproc=2, timeout=120)
        after = vh.veth_bytes()
    for job in [one] + two:
        job.raise_for_failure()
    t1, t2 = _best(one.results()), _best(two[0].results())
    sent = after[vh.a.name]["tx"] - before[vh.a.name]["tx"]
    print(f"  64 MB allreduce, 4 processes: one host {1e3 * t1:.0f} ms, two hosts "
          f"{1e3 * t2:.0f} ms -> two / one = {t2 / t1:.2f}x; A -> B carried "
          f"{sent / (repeats + 1) / 1e6:.1f} MB per allreduce (ring: 1.5 x 64 = 96 MB + headers)")


def restart_cost(skip_unsafe: bool) -> None:
    clean = run_elastic(steps=30, every=5, kill_at=-1, nproc=2)
    killed = run_elastic(steps=30, every=5, kill_at=13, nproc=2)
    for r in (clean, killed):
        if not r.ok:
            raise RuntimeError(r.jobs[0].tail())
    same = float((clean.params - killed.params).abs().max())
    print(f"  uninterrupted {clean.seconds:.1f} s, killed at step 13 and resumed from step 10 "
          f"{killed.seconds:.1f} s -> the restart cost {killed.seconds - clean.seconds:.1f} s "
          f"(final parameters differ by {same:.1e})")
    if skip_unsafe:
        return
    unsafe = run_elastic(steps=30, every=5, kill_at=13, nproc=2, restart_safe=False,
                         timeout=90)
    errors = [ln for ln in unsafe.jobs[0].stderr.splitlines() if "Error" in ln]
    hint = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 (lesson 11)" in unsafe.jobs[0].stderr
    print(f"  without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: "
          f"{'finished' if unsafe.ok else 'FAILED'} after {unsafe.seconds:.1f} s; attempts that "
          f"trained: {[a['attempt'] for a in unsafe.attempts()]}; the entry point's hint "
          f"{'was' if hint else 'was NOT'} printed; last error: {(errors or [''])[-1][:200]}")


def engines(rounds: int, steps: int) -> None:
    names = ["course runtime", "torchrun"] + [e for e in ("spark", "ray") if not G.missing(e)]
    for e in ("spark", "ray"):
        if G.missing(e):
            print(f"  {e} skipped: {G.missing(e)}")
    runs: dict[str, list[G.EngineRun]] = {n: [] for n in names}
    for _ in range(rounds):                      # alternate, so a change of load hits all
        for name, run in zip(names, G.compare(2, "digits-mlp", steps, 64, 0.3, engines=names)):
            runs[name].append(run)
    base = runs["course runtime"]
    start0 = float(np.median([r.startup_s for r in base]))
    step0 = float(np.median([r.step_s for r in base]))
    for name, rs in runs.items():
        start, step = (float(np.median([getattr(r, k) for r in rs])) for k in ("startup_s", "step_s"))
        gap = max(float((r.params - b.params).abs().max()) for r, b in zip(rs, base))
        print(f"  {rs[0].engine:<24} engine start {rs[0].engine_s:5.1f} s (first round); job "
              f"start-up {start:5.1f} s = {start / start0:4.1f}x; per step {1e3 * step:6.2f} ms "
              f"= {step / step0:4.2f}x; max |dtheta| vs course runtime {gap:.1e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-unsafe", action="store_true")
    ap.add_argument("--engines-only", action="store_true")
    a = ap.parse_args()
    print(f"{os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.1f}")
    if a.engines_only:
        print("4. one worker function on four engines (2 workers)")
        engines(a.rounds, a.steps)
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        return
    print("1. DDP vs lesson 05's synchronous SGD, 4 workers (median of "
          f"{a.rounds} alternating runs of {a.steps} steps)")
    ddp_vs_ours(a.rounds, a.steps)
    print("2. two hosts vs one (torchrun, 4 processes)")
    two_hosts_vs_one(a.repeats)
    print("3. the time a restart costs (torchrun --max-restarts=1, 2 workers)")
    restart_cost(a.skip_unsafe)
    print("4. one worker function on four engines (2 workers)")
    engines(a.rounds, a.steps)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
