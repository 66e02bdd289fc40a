"""``ddl-lab grade SUBMISSIONS``: grade a class's notebooks with the course's own checks.

Every submission is identified (``discover``), scanned (``scan``: flags for the
instructor, the written justifications), rebuilt around the pristine check cells
(``pristine``), run in a fresh kernel in an OS sandbox with limits (``execute``,
``sandbox``) where each check cell keeps its arguments (``handover``), judged task by task
in a process no learner code runs in, which calls the learner's functions in the sandbox
and gets plain data back (``judge``, ``link``, ``plain``), scored (``record``), and
reported — once every process of the learner's is gone, and if the installation is as it
was — as a gradebook, a class report and one feedback page per learner (``report``), with
the instructor's marks of the written justifications folded in (``marks``, ``rubrics``);
``refold`` folds marks into a class graded before, without running a notebook again.
"""
from __future__ import annotations

import json
import secrets
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ddl_lab.tools.notebooks import ROOT
from . import marks as marking
from . import report
from . import rubrics
from .discover import (Exercise, Submission, course_exercises, identify, select,
                       submitted_files)
from . import sandbox
from .execute import finish_run, read_jsonl, start_run, stop_all, wait_serving
from .judge import Judge, stop_judges
from .pristine import grading_notebook, payload_name
from .record import Learner, Verdict, submission_notes, verdicts
from .scan import flags, justifications


@dataclass
class Limits:
    """Seconds a whole notebook and one cell may run; submissions graded at once; whether
    learner code may run without a sandbox (``--trust-learner-code``)."""
    timeout: float = 600.0
    cell_timeout: float = 120.0
    jobs: int = 1
    trust_learner_code: bool = False


class InstallationChanged(RuntimeError):
    """The course's or the environment's files changed while a submission ran."""


def grade(submissions: Path, out: Path, exercises: list[str] | None = None,
          limits: Limits | None = None, course: Path = ROOT,
          progress: bool = True, seed: int | None = None,
          checks: tuple[str, ...] = (), judges: "Judges | None" = None,
          marks: Path | None = None) -> list[Learner]:
    """Grade every notebook in ``submissions``; write the reports to ``out``; return the
    learners in name order. ``exercises`` (e.g. ["06"]) are those the class was asked to
    submit: another exercise is reported as the wrong one. By default, any exercise.
    ``seed``: the checks draw their cases from it (cases no learner ran at home).
    ``checks``: modules of checks beyond ``ddl_lab.check`` that the judges import, for a
    ``course`` of one's own (the grading tests' toy course). ``judges``: judges already
    started, kept for several calls (same ``seed`` and ``checks``; the caller stops them).
    ``marks``: the instructor's marks of the justifications (``marks.py``), checked against
    the rubrics before anything runs and folded in at the end."""
    limits = limits or Limits()
    rubric_set = rubrics.load(course)
    given = marking.read_marks(marks) if marks else []
    marking.check(given, rubric_set)
    no_box = sandbox.why_not()
    if no_box and not limits.trust_learner_code:
        raise sandbox.NoSandbox(
            f"ddl-lab grade runs learner code only in a sandbox, and none can be made here: "
            f"{no_box}. Without one, a learner's code can read other submissions, change the "
            f"installed course or the grades, and leave processes behind; to grade anyway, "
            f"pass {sandbox.FLAG} (only for code you trust).")
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
    hide = sandbox.hidden_from_learners(course, submissions, out, checks=checks)
    box = None if no_box else hide
    installed = Installation(course)
    own = judges is None
    judges = Judges(seed, checks) if judges is None else judges
    with ThreadPoolExecutor(max(1, limits.jobs)) as pool:
        futures = {pool.submit(grade_one, s, wanted[s.exercise], limits, out, judges, box): s
                   for s in todo}
        try:
            for future in as_completed(futures):
                s = futures[future]
                found, notes = future.result()
                installed.same_as_before(s.path.name)
                row = learners[s.learner]
                row.verdicts += found
                row.notes += notes
                row.flags += flags(s.nb)
                row.graded.add(s.exercise)
                bar.step(s, found)
        except KeyboardInterrupt:
            for future in futures:
                future.cancel()
            stop_all()
            stop_judges()
            raise
        finally:
            if own:
                judges.stop()
    columns = [e for e in wanted.values()
               if exercises or any(e.stem in r.graded for r in learners.values())]
    order = {(e.stem, t): i for i, (e, t) in
             enumerate((e, t) for e in wanted.values() for t in e.tasks)}
    for row in learners.values():
        row.verdicts.sort(key=lambda v: order[(v.exercise, v.task)])
    rows = [learners[name] for name in sorted(learners)]
    _fold_and_write(out, rows, columns, seed, rubric_set, given)
    return rows


def _fold_and_write(out: Path, rows: list[Learner], columns: list[Exercise], seed: int | None,
                    rubric_set: dict, given: list[marking.Mark]) -> None:
    """Fold the marks in and write the reports — without the marks where they do not fit
    (the MarksError then says how to fold them in later)."""
    marking.attach(rows, rubric_set)
    try:
        marking.fold(rows, rubric_set, given)
    except marking.MarksError as e:
        raise marking.MarksError(f"{e}\nThe grades in {out} are written without these marks: "
                                 "correct them and fold them in with --fold-only.") from None
    finally:
        report.write_all(out, rows, columns, seed, rubric_set)


def refold(out: Path, marks: Path, course: Path = ROOT) -> list[Learner]:
    """Fold ``marks`` into the class graded before into ``out`` (its results.json) and
    write its reports again; no notebook runs. A mark replaces an earlier one for the same
    justification; the others stay."""
    try:
        before = json.loads((Path(out) / "results.json").read_text())
        stems = before["exercises"]
    except (OSError, ValueError, KeyError) as e:
        raise FileNotFoundError(f"{out}/results.json: no class graded by this version of "
                                f"ddl-lab grade to fold marks into ({e}); grade it first") from e
    rubric_set = rubrics.load(course)
    given = marking.read_marks(marks)
    marking.check(given, rubric_set)
    everything = course_exercises(course)
    missing = [s for s in stems if s not in everything]
    if missing:
        raise FileNotFoundError(f"{course}/exercises has no {', '.join(missing)}, graded in {out}")
    columns = [everything[s] for s in stems]
    rows = [Learner(r["learner"], [Verdict(**v) for v in r["verdicts"]], r["notes"], r["flags"])
            for r in before["learners"]]
    _fold_and_write(Path(out), rows, columns, before["seed"], rubric_set, given)
    return rows


def grade_one(sub: Submission, ex: Exercise, limits: Limits, out: Path, judges: "Judges",
              hide: tuple[Path, ...] | None = None) -> tuple[list[Verdict], list[str]]:
    """Run one submission in its sandbox (``hide``: what it hides; None: no sandbox) while
    a judge calls its functions there; its verdicts and notes."""
    work = Path(tempfile.mkdtemp(prefix="ddl-lab-grade-"))
    key = secrets.token_hex(16)
    judge = judges.mine()
    run = running = None
    try:
        box = None if hide is None else sandbox.Box(
            work, hide, cpu_seconds=int(limits.timeout * 4) + 60)
        nb = grading_notebook(sub.nb, ex)
        running = start_run(nb, work, limits.cell_timeout, limits.timeout, box, key)
        serving = wait_serving(running)
        killed = not serving and running.proc.poll() is None
        done = read_jsonl(work / "events.jsonl")
        judged = judge_run(ex, done, work, judge, key, limits.cell_timeout) if serving else {}
        run = finish_run(running, killed)
        executed = work / "executed.ipynb"
        if executed.exists():
            shutil.copy(executed, out / "executed" / f"{sub.learner}--{ex.stem}.ipynb")
        if not serving:
            judged = _before_the_end(ex, nb, run, work, judge, box, key, limits)
        found = verdicts(ex, run, judged, limits.cell_timeout, limits.timeout)
        written = justifications(sub.nb, ex)
        for v in found:
            if v.task in written:
                v.justification = written[v.task] or ""         # "": asked, not written
        return found, submission_notes(run, limits.cell_timeout)
    except Exception as e:          # a notebook the grader cannot handle costs only itself
        why = f"{sub.path.name} could not be graded ({type(e).__name__}: {e})"
        return ([Verdict(ex.stem, t, 0.0, c.points[t], False, why)
                 for c in ex.checks for t in c.tasks], [why])
    finally:
        if running is not None and run is None:
            finish_run(running, killed=True)
        shutil.rmtree(work, ignore_errors=True)


def _before_the_end(ex: Exercise, nb, run, work: Path, judge: Judge, box, key: str,
                    limits: Limits) -> dict[str, dict]:
    """A notebook whose kernel died, got stuck or ran out of time serves no judge: its
    cells up to the one that ended it run again, and the checks done before are judged."""
    started = [e["cell"] for e in run.events if e.get("event") == "start"]
    ended = {e["cell"] for e in run.events if e.get("event") == "done"} - \
        {e["cell"] for e in run.events if e.get("event") == "stuck"}
    fatal = next((c for c in started if c not in ended), None)
    if fatal is None or not any(e.get("event") == "done" and e.get("check") is not None
                                for e in run.events):
        return {}
    for name in ("events.jsonl", "link.sock", "link.sock.ready", "kernel.pid"):
        (work / name).unlink(missing_ok=True)
    again = nbformat.v4.new_notebook(metadata=nb.metadata)
    again.cells = nb.cells[:fatal]
    running = start_run(again, work, limits.cell_timeout, limits.timeout, box, key)
    serving = wait_serving(running)
    try:
        return judge_run(ex, run.events, work, judge, key, limits.cell_timeout) \
            if serving else {}
    finally:
        finish_run(running, not serving and running.proc.poll() is None)


def judge_run(ex: Exercise, events: list[dict], work: Path, judge: Judge, key: str,
              cell_timeout: float) -> dict[str, dict]:
    """The judge's answer for every task whose check cell wrote its manifest."""
    done = {e["check"] for e in events if e.get("event") == "done"
            and e.get("check") is not None and not e.get("error") and not e.get("timed_out")}
    todo = [(check, i, task) for check in ex.checks if check.index in done
            and (work / payload_name(check.index)).exists()
            for i, task in enumerate(check.tasks)]
    return judge.judge_all([(work / payload_name(check.index), i, task)
                            for check, i, task in todo], cell_timeout,
                           link=str(work / "link.sock"), key=key, work=work)


class Judges:
    """One judge per grading thread, started at its first submission and kept for the
    class: no learner code runs in a judge, so nothing of one submission reaches the next."""

    def __init__(self, seed: int | None, checks: tuple[str, ...]):
        self.seed, self.checks, self.local = seed, checks, threading.local()
        self.folder = Path(tempfile.mkdtemp(prefix="ddl-lab-judges-"))
        self.started: list[Judge] = []
        self.lock = threading.Lock()

    def mine(self) -> Judge:
        judge = getattr(self.local, "judge", None)
        if judge is None:
            with self.lock:
                judge = Judge(self.seed, self.folder / f"judge-{len(self.started)}.log",
                              self.checks)
                self.started.append(judge)
            judge.start()
            self.local.judge = judge
        return judge

    def stop(self) -> None:
        for judge in self.started:
            judge.stop()
        shutil.rmtree(self.folder, ignore_errors=True)


class Installation:
    """The course's and the environment's files, as they were before grading: a change
    after a submission ran stops the whole run (something escaped, or ran unsandboxed)."""

    def __init__(self, course: Path):
        import site

        import ddl_lab
        course = Path(course).resolve()
        self.trees = [Path(ddl_lab.__file__).resolve().parent, course / "exercises",
                      course / "solutions"]
        self.tops = [Path(p) for p in site.getsitepackages() if Path(p).is_dir()]
        self.before = self.now()

    def now(self) -> dict[str, tuple[int, int]]:
        """(size, mtime) of every source file of the package and the course's notebooks, and
        of the top level of site-packages (where ``.pth`` files and start-up hooks lie)."""
        files = [p for root in self.trees if root.is_dir() for p in root.rglob("*")
                 if p.is_file() and "__pycache__" not in p.parts]
        files += [p for root in self.tops for p in root.iterdir() if p.is_file()]
        seen: dict[str, tuple[int, int]] = {}
        for path in files:
            try:
                st = path.stat()
            except OSError:
                continue
            seen[str(path)] = (st.st_size, st.st_mtime_ns)
        return seen

    def same_as_before(self, during: str) -> None:
        after = self.now()
        changed = sorted(p for p in self.before.keys() | after.keys()
                         if self.before.get(p) != after.get(p))
        if changed:
            raise InstallationChanged(
                f"the installation changed while {during} was graded: {changed[:5]}"
                f"{' …' if len(changed) > 5 else ''}. Grading stopped: reinstall the course "
                "(make setup) and grade again in a sandbox.")


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
