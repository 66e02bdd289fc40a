"""The capstone's worked plan against plain synchronous SGD, side by side (lesson 15).

    .venv/bin/python benchmarks/capstone_bench.py [--rounds 3] [--seed 0] [--part 1|2]

Both train the digits CNN on 4 real workers under the capstone's budget, measured by its
meter: the plan of ``solutions/15_capstone.ipynb`` (``my_plan``, read from the notebook,
its single source) and ``capstone.plans.sync_sgd_plan`` (the whole fp32 gradient at
every step). Runs alternate (baseline, plan) so a change of load hits both alike; the
bytes are exact and the same every round, the times are medians.

``--part 2``: the transformer brief. Plain DDP against the solution's ``my_gpt_plan``
(peak memory, bytes per step, held-out loss, time), and what the memory meter costs: the
same DDP steps on 4 ranks bare, under the meter (two profiled windows), and with the whole
run under the profiler (why the meter profiles windows only).
"""
from __future__ import annotations

import argparse
import os
import statistics
from pathlib import Path

import nbformat

from ddl_lab.capstone.budget import BUDGET, size_text
from ddl_lab.capstone.meter import measure
from ddl_lab.capstone.plans import sync_sgd_plan
from ddl_lab.runtime.launch import close_shared

SOLUTION = Path(__file__).resolve().parents[1] / "solutions" / "15_capstone.ipynb"


def solution_plan():
    """``my_plan`` as the solution notebook defines it (its imports, then its cell)."""
    code = [c.source for c in nbformat.read(SOLUTION, as_version=4).cells
            if c.cell_type == "code" and not c.metadata.get("tags")]
    ns = {"__name__": "__main__"}
    for source in (code[0], next(s for s in code if "def my_plan(" in s)):
        exec(source, ns)
    return ns["my_plan"]


def solution_gpt_plan():
    """``my_gpt_plan`` as the solution notebook defines it."""
    code = [c.source for c in nbformat.read(SOLUTION, as_version=4).cells
            if c.cell_type == "code" and not c.metadata.get("tags")]
    ns = {"__name__": "__main__"}
    for source in (code[0], next(s for s in code if "def my_gpt_plan(" in s)):
        exec(source, ns)
    return ns["my_gpt_plan"]


def _bare_steps(profiled: bool, seed: int) -> float:
    """On every rank: the DDP plan's run without the meter (optionally all of it under the
    profiler with memory events); its wall time."""
    import time

    from torch.profiler import ProfilerActivity, profile

    from ddl_lab.capstone.gpt_plans import ddp_plan
    from ddl_lab.capstone.transformer import BRIEF, GPTBatches, initial_gpt
    from ddl_lab.ml.profiling import quiet_stderr
    model, batches = initial_gpt(0), GPTBatches(BRIEF, seed, lambda i: None)
    t0 = time.perf_counter()
    if profiled:
        with quiet_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True):
            ddp_plan(model, batches, None)
    else:
        ddp_plan(model, batches, None)
    return time.perf_counter() - t0


def part_two(rounds: int, seed: int) -> None:
    from ddl_lab.capstone.gpt_plans import ddp_plan
    from ddl_lab.capstone.transformer import BRIEF, MiB, measure_gpt
    from ddl_lab.runtime.worlds import run_in_world
    print(f"part 2: {BRIEF}; {os.cpu_count()} cores, load average before "
          f"{os.getloadavg()[0]:.1f}")
    plans = {"plain DDP + AdamW": ddp_plan, "solution plan": solution_gpt_plan()}
    runs: dict[str, list] = {k: [] for k in plans}
    walls: dict[str, list] = {"bare": [], "meter (windows)": [], "whole run profiled": []}
    for _ in range(rounds):
        for label, plan in plans.items():
            runs[label].append(measure_gpt(plan, seed=seed))
        walls["meter (windows)"].append(runs["plain DDP + AdamW"][-1].wall)
        for label, profiled in (("bare", False), ("whole run profiled", True)):
            walls[label].append(max(run_in_world(_bare_steps, 4, profiled, seed,
                                                 fn=_bare_steps, timeout=600)))
    load_after = os.getloadavg()[0]
    close_shared()
    print(f"{'':<20}{'loss':>7}{'peak/rank':>11}{'sent/step':>11}{'time (median)':>15}")
    for label, rs in runs.items():
        r = rs[-1]
        print(f"{label:<20}{r.loss:>7.3f}{r.peak / MiB:>8.1f} MiB{size_text(r.bytes_per_step):>11}"
              f"{statistics.median(x.wall for x in rs):>14.2f}s")
    bare = statistics.median(walls["bare"])
    print("the DDP plan's 100 steps on 4 ranks: " + ", ".join(
        f"{k} {statistics.median(v):.1f} s ({statistics.median(v) / bare:.2f}×)"
        for k, v in walls.items()) + f" (load average after {load_after:.1f})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--part", type=int, choices=(1, 2), default=1)
    a = ap.parse_args()
    if a.part == 2:
        part_two(a.rounds, a.seed)
        return
    plans = {"plain sync SGD (fp32)": sync_sgd_plan, "solution plan": solution_plan()}
    print(f"capstone: {BUDGET}; {os.cpu_count()} cores, load average before "
          f"{os.getloadavg()[0]:.1f}")
    runs: dict[str, list] = {k: [] for k in plans}
    for _ in range(a.rounds):
        for label, plan in plans.items():
            runs[label].append(measure(plan, seed=a.seed))
    load_after = os.getloadavg()[0]
    close_shared()
    rows = {k: (rs[-1].accuracy, rs[-1].bytes, rs[-1].rounds,
                statistics.median(r.wall for r in rs)) for k, rs in runs.items()}
    print(f"{'':<24}{'accuracy':>9}{'sent/worker':>13}{'calls':>7}{'time (median)':>15}")
    for label, (acc, sent, calls, wall) in rows.items():
        print(f"{label:<24}{100 * acc:>8.1f}%{size_text(sent):>13}{calls:>7}{wall:>14.2f}s")
    (_, b_sent, _, b_wall), (_, s_sent, _, s_wall) = rows.values()
    print(f"ratios, baseline / plan: bytes {b_sent / s_sent:.1f}×, time {b_wall / s_wall:.2f}× "
          f"(load average after {load_after:.1f}; bytes are exact, times move with the load)")


if __name__ == "__main__":
    main()
