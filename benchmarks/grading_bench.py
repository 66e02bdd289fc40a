"""Grading a class (``ddl-lab grade``): 20 submissions of exercise 06 (ring allreduce),
each right, graded with ``--jobs 2``, against a few graded one at a time.

    .venv/bin/python benchmarks/grading_bench.py [--copies 20] [--jobs 2] [--serial 4]

Prints the wall time and the time per submission of both runs, measured one after the
other in this process, and their ratio (what the second job buys), with the load average.
Every submission costs a fresh kernel, the course's imports, and the checks' clusters.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import nbformat

from ddl_lab.tools.grading import Limits, grade
from ddl_lab.tools.grading.pristine import solved
from ddl_lab.tools.notebooks import ROOT

STEM = "06_ring_allreduce"


def class_of(folder: Path, copies: int) -> Path:
    nb = solved(ROOT, STEM)
    folder.mkdir(parents=True)
    for i in range(copies):
        nbformat.write(nb, folder / f"learner{i:02d}.ipynb")
    return folder


def timed(folder: Path, out: Path, jobs: int) -> tuple[float, int]:
    """Grade the folder; the wall time and the number of submissions. Right answers that
    lost points (a check's own time limit passed on an overloaded machine) are listed."""
    t0 = time.perf_counter()
    rows = grade(folder, out, [STEM], Limits(timeout=600, cell_timeout=300, jobs=jobs),
                 progress=False)
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


if __name__ == "__main__":
    main()
