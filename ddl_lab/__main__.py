"""Command line: ``python -m ddl_lab execute lessons``, ``python -m ddl_lab make-exercises``,
the stated ``times`` (``ddl_lab/tools/times.py``), the learner's ``progress``, and the instructor's ``grade`` and ``nbgrader-export`` (``ddl_lab/tools/grading/cli.py``)."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ddl_lab.tools import skip_iri_check

skip_iri_check()            # before nbformat (ddl_lab.tools)

from ddl_lab.tools import notebooks  # noqa: E402
from ddl_lab.tools.grading import cli as grading  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ddl-lab")
    sub = ap.add_subparsers(dest="cmd", required=True)
    ex = sub.add_parser("execute", help="run a notebook, or every notebook of a folder, headlessly")
    ex.add_argument("path", nargs="?", default="lessons", help="a .ipynb file or a folder")
    ex.add_argument("--out", default=None, help="where executed copies go (build/<folder>)")
    mk = sub.add_parser("make-exercises", help="generate exercises/ from solutions/")
    mk.add_argument("--check", action="store_true", help="only report stale exercises")
    pr = sub.add_parser("progress", help="your graded tasks, lesson by lesson: passed / failed / "
                                         "not tried")
    pr.add_argument("--file", default=None, help="a progress file (default: the course's own)")
    st = sub.add_parser("site", help="the course as a static website (build/site/), from the "
                                     "executed lessons; a missing or stale one is executed first")
    st.add_argument("--executed", default="build/lessons", help="the executed lessons' folder")
    st.add_argument("--out", default="build/site")
    st.add_argument("--repository", default="", help="its URL, for Binder / JupyterHub links")
    st.add_argument("--ref", default="main", help="the branch the launch links open")
    st.add_argument("--hub", default="", help="a JupyterHub's URL (nbgitpuller links)")
    st.add_argument("--no-execute", action="store_true",
                    help="fail on a missing or stale executed lesson instead of executing it")
    tm = sub.add_parser("times", help="each lesson's and exercise's time, from the notebooks and "
                                      "the measured cell times (lessons/timings.json)")
    tm.add_argument("--measure", nargs="*", default=None, metavar="NOTEBOOK",
                    help="first execute these notebooks (default: every lesson and solution) "
                         "and record their cells' wall times")
    tm.add_argument("--write", action="store_true", help="state the figures in the lessons' "
                    "At-a-glance cells and the task headings, and regenerate exercises/")
    grading.add_commands(sub)
    a = ap.parse_args(argv)
    if a.cmd == "times":
        return _times(a)
    if a.cmd in grading.COMMANDS:
        return grading.run(a)
    if a.cmd == "progress":
        from ddl_lab.tools.progress import progress_table
        if a.file and not Path(a.file).is_file():
            print(f"ddl-lab progress: no progress file {a.file}", file=sys.stderr)
            return 2
        print(progress_table(Path(a.file) if a.file else None))
        return 0
    if a.cmd == "site":
        return _site(a)
    if a.cmd == "execute":
        path = Path(a.path)
        out = Path(a.out) if a.out else Path("build") / (path.stem if path.is_file() else path.name)
        try:
            return 1 if notebooks.execute(path, out) else 0
        except FileNotFoundError as e:
            print(f"ddl-lab execute: {e}", file=sys.stderr)
            return 2
    stale = notebooks.make_exercises(check=a.check)
    verb = "stale" if a.check else "written"
    for p in stale:
        print(f"{verb}: {p.relative_to(notebooks.ROOT)}")
    return 1 if (a.check and stale) else 0


def _times(a: argparse.Namespace) -> int:
    from ddl_lab.tools import times
    if a.measure is not None:
        paths = [Path(p) for p in a.measure] or [
            p for d in ("lessons", "solutions") for p in sorted((notebooks.ROOT / d).glob("*.ipynb"))]
        times.measure(paths)
    try:
        lessons = times.course()
    except times.StaleTimings as e:
        print(f"ddl-lab times: {e}", file=sys.stderr)
        return 1
    if a.write:
        for p in times.write(lessons=lessons):
            print(f"written: {p.relative_to(notebooks.ROOT)}")
        notebooks.make_exercises()
    print(times.table(lessons))
    return 0


def _site(a: argparse.Namespace) -> int:
    from ddl_lab.tools import site
    executed = Path(a.executed)
    if not a.no_execute:
        for name in site.stale_lessons(notebooks.ROOT, executed):
            notebooks.execute(notebooks.ROOT / "lessons" / f"{name}.ipynb", executed)
    try:
        out = site.build(executed=executed.resolve(), out=Path(a.out).resolve(),
                         launch=site.Launch(a.repository, a.ref, a.hub))
    except site.SiteError as e:
        print(f"ddl-lab site: {e}", file=sys.stderr)
        return 1
    print(f"the site is in {out} (open {out / 'index.html'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
