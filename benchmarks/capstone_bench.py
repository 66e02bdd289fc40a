"""The capstone's worked plan against plain synchronous SGD, side by side (lesson 15).

    .venv/bin/python benchmarks/capstone_bench.py [--rounds 3] [--seed 0]

Both train the digits CNN on 4 real workers under the capstone's budget, measured by its
meter: the plan of ``solutions/15_capstone.ipynb`` (``my_plan``, read from the notebook,
its single source) and ``capstone.plans.sync_sgd_plan`` (the whole fp32 gradient at
every step). Runs alternate (baseline, plan) so a change of load hits both alike; the
bytes are exact and the same every round, the times are medians.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
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
