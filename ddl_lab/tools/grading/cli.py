"""The instructor's commands: ``ddl-lab grade`` and ``ddl-lab nbgrader-export``."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ddl_lab.tools.notebooks import ROOT

COMMANDS = ("grade", "nbgrader-export")


def add_commands(sub: argparse._SubParsersAction) -> None:
    gr = sub.add_parser("grade", help="grade a folder of submitted exercise notebooks")
    gr.add_argument("submissions", help="a folder: <learner>.ipynb or <learner>/<any>.ipynb")
    gr.add_argument("--exercise", action="append", metavar="NN",
                    help="the exercise the class submitted (e.g. 06); repeat for several; "
                         "default: whichever each notebook is")
    gr.add_argument("--out", default="grades", help="where the gradebook, report and "
                    "feedback go (default: grades)")
    gr.add_argument("--timeout", type=float, default=600.0,
                    help="seconds one notebook may run in all (default 600)")
    gr.add_argument("--cell-timeout", type=float, default=120.0,
                    help="seconds one cell may run (default 120)")
    gr.add_argument("--jobs", type=int, default=1, help="notebooks graded at once (default 1)")
    gr.add_argument("--course", default=str(ROOT), help="the course folder (with exercises/)")
    gr.add_argument("--seed", type=int, default=None,
                    help="the checks draw their cases from this seed: cases no learner ran "
                         "at home (default: the checks' own seeds); the report names it")
    gr.add_argument("--marks", metavar="FILE",
                    help="your marks of the written justifications, folded into the totals: "
                         "a CSV with columns learner, exercise, task, points[, comment] (fill "
                         "in OUT/unmarked.csv), or nbgrader's gradebook.db")
    gr.add_argument("--fold-only", action="store_true",
                    help="fold --marks into the class graded before into --out (its "
                         "results.json), without running the notebooks again")
    gr.add_argument("--trust-learner-code", action="store_true",
                    help="grade even where no sandbox can be made (bubblewrap missing or "
                         "user namespaces off): learner code then runs with your rights and "
                         "can read other submissions, change the course or the grades")
    nb = sub.add_parser("nbgrader-export",
                        help="write an nbgrader course folder (source/<assignment>/) from solutions/")
    nb.add_argument("out", help="the nbgrader course folder to write")
    nb.add_argument("--exercise", action="append", metavar="NN",
                    help="only these exercises (default: all)")
    nb.add_argument("--course", default=str(ROOT), help="the course folder (with solutions/)")


def run(a: argparse.Namespace) -> int:
    try:
        if a.cmd == "grade":
            return _grade(a)
        from .nbgrader import export
        written = export(Path(a.course), Path(a.out), a.exercise)
        for p in written:
            print(f"written: {p}")
        print(f"now: cd {a.out} && nbgrader generate_assignment <assignment>", file=sys.stderr)
        return 0
    except (FileNotFoundError, ValueError, RuntimeError) as e:
        print(f"ddl-lab {a.cmd}: {e}", file=sys.stderr)
        return 2


def _grade(a: argparse.Namespace) -> int:
    from .grade import Limits, grade, refold
    from .marks import unmarked
    if a.jobs < 1 or a.timeout <= 0 or a.cell_timeout <= 0:
        raise ValueError("--jobs, --timeout and --cell-timeout must be positive")
    marks = Path(a.marks) if a.marks else None
    out = Path(a.out)
    if a.fold_only:
        if marks is None:
            raise ValueError("--fold-only folds the marks of --marks FILE: pass it")
        rows = refold(out, marks, Path(a.course))
        print(f"folded the marks of {marks} into {len(rows)} learner(s) graded in {out}")
    else:
        rows = grade(Path(a.submissions), out, a.exercise,
                     Limits(a.timeout, a.cell_timeout, a.jobs, a.trust_learner_code),
                     Path(a.course), seed=a.seed, marks=marks)
        print(f"graded {len(rows)} learner(s): {out / 'gradebook.csv'}, {out / 'report.html'}, "
              f"{out / 'feedback'}/")
    todo = len(unmarked(rows))
    if todo:
        print(f"{todo} justification(s) to mark: fill in points (and a comment) in "
              f"{out / 'unmarked.csv'} against the rubrics in report.html, then "
              f"ddl-lab grade {a.submissions} --out {out} --marks FILE --fold-only")
    return 0
