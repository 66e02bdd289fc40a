"""``ddl-lab grade SUBMISSIONS``: grade a class's notebooks with the course's own checks.

Every submission is identified (``discover``), rebuilt around the pristine check cells
(``pristine``), run in a fresh kernel in a private temporary folder with limits
(``execute``), scored from the structured record (``record``), and reported as a
gradebook, a class report and one feedback page per learner (``report``).
"""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from ddl_lab.tools.notebooks import ROOT
from . import report
from .discover import (Exercise, Submission, course_exercises, identify, select,
                       submitted_files)
from .execute import run_submission, stop_all
from .pristine import grading_notebook
from .record import Learner, Verdict, submission_notes, verdicts


@dataclass
class Limits:
    """Seconds a whole notebook and one cell may run; submissions graded at once."""
    timeout: float = 600.0
    cell_timeout: float = 120.0
    jobs: int = 1


def grade(submissions: Path, out: Path, exercises: list[str] | None = None,
          limits: Limits | None = None, course: Path = ROOT,
          progress: bool = True) -> list[Learner]:
    """Grade every notebook in ``submissions``; write the reports to ``out``; return the
    learners in name order. ``exercises`` (e.g. ["06"]) are those the class was asked to
    submit: another exercise is reported as the wrong one. By default, any exercise."""
    limits = limits or Limits()
    everything = course_exercises(course)
    wanted = select(everything, exercises)
    subs = [identify(Submission(learner, path), wanted, everything)
            for learner, path in submitted_files(submissions)]
    subs = _one_per_exercise(subs)
    learners = {s.learner: Learner(s.learner) for s in subs}
    for s in subs:
        learners[s.learner].notes += s.notes + ([s.error] if s.error else [])
    todo = [s for s in subs if s.exercise]
    out = Path(out)
    (out / "executed").mkdir(parents=True, exist_ok=True)
    bar = Progress(len(todo), enabled=progress)
    with ThreadPoolExecutor(max(1, limits.jobs)) as pool:
        futures = {pool.submit(grade_one, s, wanted[s.exercise], limits, out): s for s in todo}
        try:
            for future in as_completed(futures):
                s = futures[future]
                found, notes = future.result()
                row = learners[s.learner]
                row.verdicts += found
                row.notes += notes
                row.graded.add(s.exercise)
                bar.step(s, found)
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()
            stop_all()
            raise
    columns = [e for e in wanted.values()
               if exercises or any(e.stem in r.graded for r in learners.values())]
    order = {(e.stem, t): i for i, (e, t) in
             enumerate((e, t) for e in wanted.values() for t in e.tasks)}
    for row in learners.values():
        row.verdicts.sort(key=lambda v: order[(v.exercise, v.task)])
    rows = [learners[name] for name in sorted(learners)]
    report.write_all(out, rows, columns)
    return rows


def grade_one(sub: Submission, ex: Exercise, limits: Limits,
              out: Path) -> tuple[list[Verdict], list[str]]:
    """Run one submission in a private temporary folder; its verdicts and notes."""
    work = Path(tempfile.mkdtemp(prefix="ddl-lab-grade-"))
    try:
        run = run_submission(grading_notebook(sub.nb, ex), work, limits.cell_timeout,
                             limits.timeout)
        executed = work / "executed.ipynb"
        if executed.exists():
            shutil.copy(executed, out / "executed" / f"{sub.learner}--{ex.stem}.ipynb")
        return (verdicts(ex, run, limits.cell_timeout, limits.timeout),
                submission_notes(run, limits.cell_timeout))
    except Exception as e:          # a notebook the grader cannot handle costs only itself
        why = f"{sub.path.name} could not be graded ({type(e).__name__}: {e})"
        return ([Verdict(ex.stem, t, 0.0, c.points[t], False, why)
                 for c in ex.checks for t in c.tasks], [why])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _one_per_exercise(subs: list[Submission]) -> list[Submission]:
    """A learner with two notebooks of one exercise: the newer is graded, with a note."""
    newest: dict[tuple[str, str], Submission] = {}
    for s in subs:
        if not s.exercise:
            continue
        key = (s.learner, s.exercise)
        other = newest.get(key)
        if other is None or s.path.stat().st_mtime > other.path.stat().st_mtime:
            newest[key] = s
    kept = []
    for s in subs:
        if s.exercise and newest[(s.learner, s.exercise)] is not s:
            chosen = newest[(s.learner, s.exercise)]
            chosen.notes.append(f"{s.path.name} is also {s.exercise}: only the newer "
                                f"{chosen.path.name} was graded")
            continue
        kept.append(s)
    return kept


class Progress:
    """A progress bar over the class on stderr, one line per graded submission."""

    def __init__(self, total: int, enabled: bool = True, width: int = 24):
        self.total, self.done, self.enabled, self.width = total, 0, enabled, width
        self.t0 = time.perf_counter()

    def step(self, sub: Submission, found: list[Verdict]) -> None:
        self.done += 1
        if not self.enabled:
            return
        full = self.width * self.done // max(1, self.total)
        got = sum(v.points for v in found)
        most = sum(v.max_points for v in found)
        print(f"[{'#' * full}{'.' * (self.width - full)}] {self.done}/{self.total} "
              f"{time.perf_counter() - self.t0:5.0f} s  {sub.learner}: {sub.exercise} "
              f"{got:g}/{most:g}", file=sys.stderr, flush=True)
