"""From a graded run and the judge's answers to a verdict per task (``ddl-lab grade``).

A task's verdict is the judge's (``judge.py``): passed, failed (with the check's
message) or ended (the learner's kernel or the judge stopped without an answer). A passed task earns its points; a failed one earns ``score`` × points where a
check with parts reported partial credit, else 0. A task the judge never saw gets 0 and
the reason: the function it calls is not defined (renamed or deleted), the check cell
timed out or raised in the kernel, or was never reached because the kernel died or the
notebook ran past its limit. A task that asks for a justification also carries the
learner's text and, once an instructor has marked it against its rubric (``marks.py``),
the mark: a learner's total is the checks' points plus the marks. A check that measured a
run (lesson 15's capstone) hands its ``figures`` with its verdict, for the leaderboard.
"""
from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field

from .discover import CheckCell, Exercise
from .execute import Run


@dataclass
class Verdict:
    """One task of one learner: points earned of points possible, and why."""
    exercise: str
    task: str
    points: float
    max_points: float
    passed: bool
    message: str
    justification: str | None = None       # the learner's text, where the task asks for one
    mark_max: float | None = None          # the rubric's points, where a person marks it
    mark: float | None = None              # the instructor's mark (``marks.py``); None: not yet
    mark_comment: str = ""
    figures: dict | None = None            # a measured run's numbers (lesson 15's leaderboard)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Learner:
    """One row of the gradebook: a learner's verdicts over the graded exercises."""
    name: str
    verdicts: list[Verdict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)       # the static scan's, for a look
    graded: set[str] = field(default_factory=set)        # exercises with a submission

    @property
    def auto(self) -> float:
        """The checks' points."""
        return round(sum(v.points for v in self.verdicts), 2)

    @property
    def manual(self) -> float:
        """The instructor's marks of the justifications given so far."""
        return round(sum(v.mark or 0.0 for v in self.verdicts), 2)

    @property
    def total(self) -> float:
        return round(self.auto + self.manual, 2)


def verdicts(ex: Exercise, run: Run, judged: dict[str, dict], cell_timeout: float,
             timeout: float) -> list[Verdict]:
    """A verdict for every task of ``ex`` from the events of ``run`` and the judge's answers
    (``{task: answer}``)."""
    done = {e["check"]: e for e in run.events if e.get("event") == "done"
            and e.get("check") is not None}
    out = []
    for check in ex.checks:
        event = done.get(check.index)
        for task in check.tasks:
            answer = judged.get(task)
            if event is None:
                ok, score, message = False, 0.0, not_reached(run, timeout)
            elif answer is None:
                ok, score, message = False, 0.0, no_record(check, task, event, cell_timeout)
            else:
                ok = answer.get("outcome") == "passed"
                score = 0.0 if ok else float(answer.get("score") or 0)
                message = str(answer.get("message", ""))
            figures = answer.get("figures") if event is not None and answer else None
            most = check.points[task]
            out.append(Verdict(ex.stem, task, most if ok else round(score * most, 2), most,
                               ok, message,
                               figures=figures if isinstance(figures, dict) else None))
    return out


def no_record(check: CheckCell, task: str, event: dict, cell_timeout: float) -> str:
    """Why a check cell that ran left no verdict for ``task``."""
    error = event.get("error") or {}
    ename, evalue = error.get("ename", ""), error.get("evalue", "")
    if event.get("timed_out") or ename == "CellTimeout":
        return (f"the check of {task} ran past the per-cell limit of {cell_timeout:g} s and was "
                "stopped: does your code loop forever or wait for a message that never comes?")
    if ename == "NameError":
        missing = next((n for n in check.calls if f"'{n}'" in evalue), None)
        if missing:
            return (f"{missing} is not defined ({evalue}): the check calls {missing}(…). Did "
                    "you rename or delete it? Keep the name the exercise gives, run its cell, "
                    "and run the check again.")
        return f"the check cell could not run: {ename}: {evalue}"
    if ename:
        return f"the check of {task} stopped with {ename}: {evalue}"
    return (f"the check cell of {task} ran but handed nothing to the judge (was "
            "ddl_lab.tools.grading.handover replaced or changed by the notebook?)")


def not_reached(run: Run, timeout: float) -> str:
    """Why a check cell never finished: where the kernel died or the run was stopped."""
    died = next((e for e in run.events if e.get("event") == "died"), None)
    if died:
        code = died.get("code")
        how = ("" if code is None else f", killed by {signal_name(-code)}" if code < 0
               else f", exit code {code}")
        return (f"not graded: the kernel died while running the cell starting "
                f"`{died.get('line', '')}`{how}. Everything after it was lost; fix that cell "
                "(os._exit, a crash in native code, running out of memory?).")
    stuck = next((e for e in run.events if e.get("event") == "stuck"), None)
    if stuck:
        return (f"not graded: the cell starting `{stuck.get('line', '')}` ran past the "
                "per-cell limit and could not be interrupted (does it ignore KeyboardInterrupt "
                "or wait in native code?); the notebook was stopped there.")
    starts = [e for e in run.events if e.get("event") == "start"]
    if run.killed_at_limit:
        where = f" while running the cell starting `{starts[-1]['line']}`" if starts else ""
        return (f"not graded: the notebook ran past its limit of {timeout:g} s{where} and "
                "was stopped.")
    if not any(e.get("event") == "kernel" for e in run.events):
        return f"not graded: no kernel could be started for this notebook ({run.log_tail[-300:]})"
    return "not graded: the check cell never ran"


def submission_notes(run: Run, cell_timeout: float) -> list[str]:
    """What the learner's own cells did that the instructor should know about."""
    notes = []
    for e in run.events:
        if e.get("event") == "done" and e.get("check") is None and e.get("timed_out"):
            notes.append(f"the cell starting `{e.get('line', '')}` ran past the per-cell "
                         f"limit of {cell_timeout:g} s and was interrupted")
    if any(e.get("event") in ("died", "stuck") for e in run.events):
        notes.append(not_reached(run, 0).replace("not graded: ", ""))
    elif run.killed_at_limit:
        notes.append("the notebook ran past its time limit and was stopped")
    return notes


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
