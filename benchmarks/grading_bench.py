"""Grading a class (``ddl-lab grade``): 20 submissions of exercise 06 (ring allreduce),
each right, graded with ``--jobs 2``, against a few graded one at a time, and the same few
graded without the sandbox (``--trust-learner-code``).

    .venv/bin/python benchmarks/grading_bench.py [--copies 20] [--jobs 2] [--serial 4]

Prints the wall time and the time per submission of each run, measured one after the
other in this process, their ratios (what the second job buys; what the sandbox costs),
the start-up of an empty sandbox against a bare Python, and the load average. Every
submission costs a fresh kernel, the course's imports, a judge, and the clusters.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nbformat

from ddl_lab.tools.grading import Limits, grade, sandbox
from ddl_lab.tools.grading.pristine import solved
from ddl_lab.tools.notebooks import ROOT

STEM = "06_ring_allreduce"


def class_of(folder: Path, copies: int) -> Path:
    nb = solved(ROOT, STEM)
    folder.mkdir(parents=True)
    for i in range(copies):
        nbformat.write(nb, folder / f"learner{i:02d}.ipynb")
    return folder


def timed(folder: Path, out: Path, jobs: int, trust: bool = False) -> tuple[float, int]:
    """Grade the folder; the wall time and the number of submissions. Right answers that
    lost points (a check's own time limit passed on an overloaded machine) are listed."""
    t0 = time.perf_counter()
    rows = grade(folder, out, [STEM], Limits(timeout=600, cell_timeout=300, jobs=jobs,
                                             trust_learner_code=trust), progress=False)
    wall = time.perf_counter() - t0
    wrong = [f"  {r.name} {v.task}: {v.message[:160]}" for r in rows for v in r.verdicts
             if not v.passed]
    if wrong:
        print(f"{len(wrong)} right answer(s) lost points:\n" + "\n".join(wrong))
    return wall, len(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--serial", type=int, default=4, help="copies graded with --jobs 1")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        print(f"load average before: {os.getloadavg()}")
        par, n = timed(class_of(tmp / "class", a.copies), tmp / "out", a.jobs)
        print(f"--jobs {a.jobs}: {n} submissions in {par:.1f} s, {par / n:.1f} s per "
              f"submission   load {os.getloadavg()}")
        ser, m = timed(class_of(tmp / "few", a.serial), tmp / "out1", 1)
        print(f"--jobs 1: {m} submissions in {ser:.1f} s, {ser / m:.1f} s per "
              f"submission   load {os.getloadavg()}")
        print(f"throughput of --jobs {a.jobs} over --jobs 1: {(ser / m) / (par / n):.2f}×")
        if sandbox.why_not() is None:
            bare, k = timed(class_of(tmp / "bare", a.serial), tmp / "out2", 1, trust=True)
            print(f"--jobs 1 without the sandbox: {k} submissions in {bare:.1f} s, "
                  f"{bare / k:.1f} s per submission   load {os.getloadavg()}")
            print(f"the sandbox's cost per submission: {(ser / m) / (bare / k):.2f}× "
                  f"({ser / m - bare / k:+.1f} s)")
            print(f"an empty sandbox starts in {_start(tmp, True) * 1000:.0f} ms, a bare "
                  f"Python in {_start(tmp, False) * 1000:.0f} ms (median of 5)")


def _start(tmp: Path, boxed: bool) -> float:
    """Seconds to start and end ``python -c pass``, in a sandbox or not (median of 5)."""
    argv = [sys.executable, "-c", "pass"]
    env = sandbox.environment(tmp, "DDL_LAB_GRADE_JOB", "bench")
    if boxed:
        argv = sandbox.command(sandbox.Box(tmp), argv, env)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        subprocess.run(argv, env=env, check=True)
        times.append(time.perf_counter() - t0)
    return sorted(times)[2]


if __name__ == "__main__":
    main()
