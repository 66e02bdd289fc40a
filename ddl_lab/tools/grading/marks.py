"""An instructor's marks for the written justifications (``ddl-lab grade --marks``).

A justification is marked by a person against its rubric (``rubrics.py``). The marks come
from a CSV — columns ``learner, exercise, task, points`` and optionally ``comment``; other
columns are ignored and a row without points is still unmarked, so the ``unmarked.csv``
that ``ddl-lab grade`` writes can be filled in and passed back — or from nbgrader's
``gradebook.db`` (the manual scores and comments of the ``justify-<task>`` cells that
``ddl-lab nbgrader-export`` makes, the student's id being the learner). A justification
left unwritten is marked 0 by itself, as in nbgrader. ``fold`` checks
every mark (the learner, the exercise and the task exist and were graded; the points lie
within the rubric's) and adds it to the learner's verdict: the auto-graded points stay as
they are, the total becomes auto + manual.
"""
from __future__ import annotations

import csv
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from .record import Learner, Verdict
from .rubrics import Rubric

COLUMNS = ("learner", "exercise", "task", "points", "comment")
NOT_WRITTEN = "not written"
PREFIX = "justify-"          # nbgrader's grade_id of a justification cell: justify-<task>
DB_MARKS = """
SELECT student.id, assignment.name, cell.name, grade.manual_score, comment.manual_comment
FROM grade
JOIN base_cell AS cell ON cell.id = grade.cell_id
JOIN submitted_notebook ON submitted_notebook.id = grade.notebook_id
JOIN submitted_assignment ON submitted_assignment.id = submitted_notebook.assignment_id
JOIN student ON student.id = submitted_assignment.student_id
JOIN assignment ON assignment.id = submitted_assignment.assignment_id
LEFT JOIN base_cell AS answer ON answer.notebook_id = cell.notebook_id
     AND answer.name = cell.name AND answer.type = 'SolutionCell'
LEFT JOIN comment ON comment.cell_id = answer.id AND comment.notebook_id = grade.notebook_id
WHERE cell.name LIKE 'justify-%' AND grade.manual_score IS NOT NULL
ORDER BY student.id, assignment.name, cell.name
"""


class MarksError(ValueError):
    """Marks that cannot be folded in; the message lists every problem and what to do."""


@dataclass(frozen=True)
class Mark:
    """An instructor's points for one learner's justification of one task."""
    learner: str
    exercise: str
    task: str
    points: float
    comment: str = ""
    where: str = ""             # "marks.csv, line 4": for the error messages


def read_marks(path: Path) -> list[Mark]:
    """The marks in ``path``: a CSV, or nbgrader's gradebook database (``*.db``)."""
    path = Path(path)
    if not path.is_file():
        raise MarksError(f"--marks {path}: no such file (a CSV with columns "
                         f"{', '.join(COLUMNS)}, or nbgrader's gradebook.db)")
    with open(path, "rb") as f:
        sqlite = f.read(16) == b"SQLite format 3\x00"
    return _from_gradebook(path) if sqlite else _from_csv(path)


def _from_csv(path: Path) -> list[Mark]:
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS[:4] if c not in (reader.fieldnames or [])]
        if missing:
            raise MarksError(f"--marks {path}: no column {', '.join(missing)}; the first row "
                             f"must name the columns {', '.join(COLUMNS)} (comment optional)")
        marks, bad = [], []
        for line, row in enumerate(reader, 2):
            given = (row.get("points") or "").strip()
            if not given:
                continue                                # not marked yet
            where = f"{path.name}, line {line}"
            try:
                points = float(given)
            except ValueError:
                bad.append(f"{where}: points {given!r} is not a number")
                continue
            marks.append(Mark(*(str(row.get(c) or "").strip() for c in COLUMNS[:3]), points,
                              str(row.get("comment") or "").strip(), where))
    if bad:
        raise MarksError("\n".join(bad))
    return marks


def _from_gradebook(path: Path) -> list[Mark]:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            found = db.execute(DB_MARKS).fetchall()
    except sqlite3.Error as e:
        raise MarksError(f"--marks {path}: not an nbgrader gradebook ({e})") from e
    return [Mark(str(learner), stem, cell[len(PREFIX):], float(score), comment or "",
                 f"{path.name}, {learner}/{stem}/{cell}")
            for learner, stem, cell, score, comment in found]


def attach(rows: list[Learner], rubrics: dict[tuple[str, str], Rubric]) -> None:
    """Give every verdict of a justified task its rubric's points as the most it can be
    marked (``mark_max``); a justification left unwritten is marked 0 at once, as nbgrader
    does an answer cell left as released (a mark given for it later replaces that 0)."""
    for row in rows:
        for v in row.verdicts:
            r = rubrics.get((v.exercise, v.task))
            v.mark_max = None if r is None else r.points
            if r is not None and v.justification == "" and v.mark is None:
                v.mark, v.mark_comment = 0.0, NOT_WRITTEN


def _exercise(name: str, stems: set[str]) -> str | None:
    """The stem ``name`` means: the stem itself or its number (``06``)."""
    if name in stems:
        return name
    return next((s for s in stems if s.split("_")[0] == name.zfill(2)), None)


def _static(m: Mark, rubrics: dict[tuple[str, str], Rubric], stems: set[str]) -> str | None:
    """What is wrong with ``m`` whoever was graded: the exercise, the task, the points."""
    stem = _exercise(m.exercise, stems)
    rubric = rubrics.get((stem, m.task)) if stem else None
    if stem is None:
        return f"{m.where}: no exercise {m.exercise!r} (e.g. 06 or 06_ring_allreduce)"
    if rubric is None:
        asks = sorted(t for s, t in rubrics if s == stem)
        return (f"{m.where}: {stem} asks no justification of {m.task!r} (it asks for "
                f"{', '.join(asks) or 'none'})")
    if not 0 <= m.points <= rubric.points:
        return (f"{m.where}: {m.points:g} points for {m.task}, whose rubric gives 0 to "
                f"{rubric.points:g}: give a mark within it")
    return None


def check(marks: list[Mark], rubrics: dict[tuple[str, str], Rubric]) -> None:
    """Raise MarksError for marks that fit no rubric, before anything is graded."""
    stems = {s for s, _ in rubrics}
    problems = [p for m in marks if (p := _static(m, rubrics, stems))]
    if problems:
        raise MarksError(f"{len(problems)} mark(s) cannot be folded in:\n" + "\n".join(problems))


def fold(rows: list[Learner], rubrics: dict[tuple[str, str], Rubric],
         marks: list[Mark]) -> None:
    """Check every mark and add it to its verdict (``mark``, ``mark_comment``); raise
    MarksError naming every mark that does not fit, before changing any verdict."""
    by_name = {r.name: r for r in rows}
    stems = {s for s, _ in rubrics}
    problems: list[str] = []
    found: list[tuple[Verdict, Mark]] = []
    seen: dict[tuple[str, str, str], str] = {}
    for m in marks:
        row = by_name.get(m.learner)
        stem = _exercise(m.exercise, stems)
        v = next((v for v in row.verdicts if (v.exercise, v.task) == (stem, m.task)),
                 None) if row else None
        if row is None:
            known = ", ".join(sorted(by_name)[:8]) + (" …" if len(by_name) > 8 else "")
            problems.append(f"{m.where}: no learner {m.learner!r} was graded (graded: "
                            f"{known or 'none'}); use the name of their notebook or folder")
        elif wrong := _static(m, rubrics, stems):
            problems.append(wrong)
        elif v is None:
            problems.append(f"{m.where}: {m.learner} handed in no {stem}, so nothing of "
                            f"theirs can be marked for {m.task}")
        elif (key := (m.learner, stem, m.task)) in seen:
            problems.append(f"{m.where}: {m.learner}'s {m.task} is marked twice (also at "
                            f"{seen[key]}); keep one mark")
        else:
            seen[key] = m.where
            found.append((v, m))
    if problems:
        raise MarksError(f"{len(problems)} mark(s) cannot be folded in:\n" + "\n".join(problems))
    for v, m in found:
        v.mark, v.mark_comment = m.points, m.comment


def unmarked(rows: list[Learner]) -> list[tuple[str, Verdict]]:
    """``(learner, verdict)`` of every justification no mark has been given for yet."""
    return [(r.name, v) for r in rows for v in r.verdicts
            if v.mark_max is not None and v.mark is None]


def write_unmarked(path: Path, rows: list[Learner]) -> int:
    """``unmarked.csv``: a marks file to fill in (points, comment) and pass to ``--marks``,
    with the most points and the learner's text beside; the number of rows."""
    todo = unmarked(rows)
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow([*COLUMNS, "max_points", "justification"])
        for learner, v in todo:
            text = v.justification or "(not read: the notebook could not be graded)"
            w.writerow([learner, v.exercise, v.task, "", "", f"{v.mark_max:g}", text])
    return len(todo)
