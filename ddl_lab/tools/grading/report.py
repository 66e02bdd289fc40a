"""What ``ddl-lab grade`` writes: ``gradebook.csv`` (one row per learner, one column per
task, the total, notes, the scan's flags, the checks' points (auto), the instructor's marks
(manual) and the most a learner can get, then per written justification its text and its
mark), ``report.html`` (the seed, pass rate and most frequent failure messages per task, every
learner's row, flags, justifications and marks), ``feedback/<learner>.html`` (their tasks,
verdicts, the checks' messages, their justifications with the mark and the rubric),
``unmarked.csv`` (the justifications no mark has been given for: a marks file to fill in,
``marks.py``), ``results.json`` (everything, for other tools, and for folding marks in
later without running the notebooks again) and, where the class ran lesson 15's capstone,
``leaderboard.html`` (its measured runs ranked, ``leaderboard.py``: linked from the class
report, each learner's place on their feedback page).
"""
from __future__ import annotations

import csv
import html
import json
import re
from collections import Counter
from pathlib import Path
from . import leaderboard
from .discover import Exercise
from .leaderboard import Boards
from .marks import write_unmarked
from .record import Learner, Verdict
from .rubrics import Rubric

STYLE = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
         "padding:.3em .6em;vertical-align:top;text-align:left}.ok{color:#1a7f37}"
         ".no{color:#c62828}pre{white-space:pre-wrap;margin:0;font-size:90%}"
         ".rubric{font-size:90%;margin:0;padding-left:1.2em}.spark{vertical-align:middle}")


NOT_WRITTEN = "(not written)"
NOT_MARKED = "not marked yet"
LEADERBOARD = "leaderboard.html"
Rubrics = dict[tuple[str, str], Rubric]


def write_all(out: Path, rows: list[Learner], columns: list[Exercise],
              seed: int | None = None, rubrics: Rubrics | None = None) -> int:
    """Write every report into ``out``; the number of justifications still to mark."""
    rubrics = rubrics or {}
    out.mkdir(parents=True, exist_ok=True)
    standings = leaderboard.boards(rows)
    write_gradebook(out / "gradebook.csv", rows, columns, rubrics)
    (out / "report.html").write_text(class_report(rows, columns, seed, rubrics, standings))
    write_leaderboard(out / LEADERBOARD, standings)
    (out / "feedback").mkdir(exist_ok=True)
    for row in rows:
        (out / "feedback" / f"{file_name(row.name)}.html").write_text(
            feedback(row, columns, rubrics, standings))
    most = maximum(columns, rubrics)
    (out / "results.json").write_text(json.dumps(
        {"seed": seed, "exercises": [e.stem for e in columns], "learners": [
            {"learner": r.name, "total": r.total, "auto": r.auto, "manual": r.manual,
             "max": most, "notes": r.notes, "flags": r.flags,
             "verdicts": [v.as_dict() for v in r.verdicts]} for r in rows]},
        indent=1, ensure_ascii=False))
    return write_unmarked(out / "unmarked.csv", rows)


def write_leaderboard(path: Path, standings: Boards) -> None:
    """Lesson 15's capstone leaderboard, where the class's verdicts carry its figures; an
    older one there is removed where they carry none."""
    if standings:
        path.write_text(_page("Capstone leaderboard", leaderboard.page_body(standings)))
    else:
        path.unlink(missing_ok=True)


def maximum(columns: list[Exercise], rubrics: Rubrics) -> float:
    """The most a learner can get: every task's points and every justification's."""
    return round(sum(e.max_points for e in columns)
                 + sum(rubrics[k].points for k in justified(columns) if k in rubrics), 2)


def mark_of(v: Verdict | None) -> str:
    """A justification's mark as the gradebook shows it: points, or blank."""
    return "" if v is None or v.mark is None else number(v.mark)


def find(row: Learner, stem: str, task: str) -> Verdict | None:
    return next((v for v in row.verdicts if (v.exercise, v.task) == (stem, task)), None)


def justified(columns: list[Exercise]) -> list[tuple[str, str]]:
    """``(exercise, task)`` of every task whose exercise asks for a justification."""
    from .scan import justification_cells
    return [(e.stem, t) for e in columns for t in justification_cells(e.nb)]


def justification_of(row: Learner, stem: str, task: str) -> str:
    v = find(row, stem, task)
    if v is None or v.justification is None:
        return ""
    return v.justification or NOT_WRITTEN


def number(x: float) -> str:
    return f"{x:g}"


def file_name(learner: str) -> str:
    return re.sub(r"[^\w.-]", "_", learner) or "_"


def cells_of(row: Learner, columns: list[Exercise]) -> list[str]:
    """The row's points per task column; blank where the learner submitted no such exercise."""
    got = {(v.exercise, v.task): v.points for v in row.verdicts}
    return [number(got[(e.stem, t)]) if (e.stem, t) in got else ""
            for e in columns for t in e.tasks]


def write_gradebook(path: Path, rows: list[Learner], columns: list[Exercise],
                    rubrics: Rubrics | None = None) -> None:
    """One row per learner: the tasks' points, total (auto + manual), notes, flags, auto,
    manual, max, then each justification and its mark (blank: not marked yet)."""
    most = number(maximum(columns, rubrics or {}))
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        asked = justified(columns)
        w.writerow(["learner"] + [t for e in columns for t in e.tasks]
                   + ["total", "notes", "flags", "auto", "manual", "max"]
                   + [c for _, t in asked for c in (f"justification: {t}", f"mark: {t}")])
        for row in rows:
            w.writerow([row.name] + cells_of(row, columns)
                       + [number(row.total), " | ".join(row.notes), " | ".join(row.flags),
                          number(row.auto), number(row.manual), most]
                       + [c for e, t in asked for c in (justification_of(row, e, t),
                                                        mark_of(find(row, e, t)))])


def _page(title: str, body: str) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            f"</title><style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"{body}</body></html>\n")


def _first_line(message: str, size: int = 300) -> str:
    line = message.strip().splitlines()[0] if message.strip() else "(no message)"
    return line[:size] + ("…" if len(line) > size else "")


def task_summary(rows: list[Learner], ex: Exercise, top: int = 3) -> str:
    """A table of ``ex``'s tasks: points, pass rate, the most frequent failure messages."""
    lines = ["<tr><th>task</th><th>points</th><th>passed</th><th>most frequent failures</th></tr>"]
    for task in ex.tasks:
        mine = [v for r in rows for v in r.verdicts if v.exercise == ex.stem and v.task == task]
        ok = sum(v.passed for v in mine)
        rate = f"{ok}/{len(mine)} ({100 * ok / len(mine):.0f}%)" if mine else "—"
        common = Counter(_first_line(v.message) for v in mine if not v.passed).most_common(top)
        fails = "".join(f"<li>{n}× <pre>{html.escape(m)}</pre></li>" for m, n in common)
        most = next((c.points[task] for c in ex.checks if task in c.points), 1)
        lines.append(f"<tr><td>{html.escape(task)}</td><td>{number(most)}</td><td>{rate}</td>"
                     f"<td><ul>{fails}</ul></td></tr>")
    return f"<h2>{html.escape(ex.stem)}</h2><table>{''.join(lines)}</table>"


def class_report(rows: list[Learner], columns: list[Exercise], seed: int | None = None,
                 rubrics: Rubrics | None = None, standings: Boards | None = None) -> str:
    """The class's page; ``standings``: lesson 15's boards (by default, the rows')."""
    rubrics = rubrics or {}
    standings = leaderboard.boards(rows) if standings is None else standings
    head = "".join(f"<th>{html.escape(t)}</th>" for e in columns for t in e.tasks)
    most = number(maximum(columns, rubrics))
    cases = (f"the instructor's seed {seed} (cases no learner ran at home)" if seed is not None
             else "the checks' own seeds (the cases learners ran at home)")
    body = [f"<p>Graded on {html.escape(cases)}.</p>"]
    if standings:
        body.append(f"<p>The <a href='{LEADERBOARD}'>capstone leaderboard</a> (lesson 15) "
                    f"ranks {sum(s.place is not None for b in standings.values() for s in b)} "
                    f"runs within their budgets by wall time.</p>")
    body += [task_summary(rows, e) for e in columns]
    table = [f"<tr><th>learner</th>{head}<th>total / {most}</th><th>auto + manual</th>"
             "<th>notes</th><th>flags</th></tr>"]
    for row in rows:
        cells = "".join(f"<td>{c}</td>" for c in cells_of(row, columns))
        link = f"feedback/{file_name(row.name)}.html"
        notes = "<br>".join(html.escape(n) for n in row.notes)
        marks = "<br>".join(html.escape(n) for n in row.flags)
        table.append(f"<tr><td><a href='{html.escape(link)}'>{html.escape(row.name)}</a></td>"
                     f"{cells}<td>{number(row.total)}</td><td>{number(row.auto)} + "
                     f"{number(row.manual)}</td><td>{notes}</td><td>{marks}</td></tr>")
    body.append(f"<h2>Learners</h2><table>{''.join(table)}</table>")
    asked = justified(columns)
    if asked:
        lines = ["<tr><th>learner</th><th>task</th><th>verdict</th><th>justification</th>"
                 "<th>mark</th></tr>"]
        for row in rows:
            for stem, task in asked:
                v = find(row, stem, task)
                if v is not None:
                    lines.append(f"<tr><td>{html.escape(row.name)}</td><td>{html.escape(task)}"
                                 f"</td><td>{verdict_mark(v)}</td><td><pre>"
                                 f"{html.escape(justification_of(row, stem, task))}</pre></td>"
                                 f"<td>{marked(v)}</td></tr>")
        body.append("<h2>Justifications, marked by the instructor</h2><p>Marks come from "
                    "<code>ddl-lab grade --marks</code> (unmarked.csv lists those to give).</p>"
                    f"<table>{''.join(lines)}</table>")
        body += [f"<h3>Rubric: {html.escape(s)} · {html.escape(t)}</h3>{rubrics[(s, t)].html()}"
                 for s, t in asked if (s, t) in rubrics]
    return _page(f"Grades: {', '.join(e.stem for e in columns)}", "".join(body))


def verdict_mark(v) -> str:
    return "<span class='ok'>✔ passed</span>" if v.passed else \
        "<span class='no'>✘ not passed</span>"


def marked(v: Verdict) -> str:
    """A justification's mark in a page: points of the most, the comment, or not yet."""
    if v.mark_max is None:
        return "(no rubric)"
    if v.mark is None:
        return f"{NOT_MARKED} (of {number(v.mark_max)})"
    said = f"<br><i>{html.escape(v.mark_comment)}</i>" if v.mark_comment else ""
    return f"{number(v.mark)} / {number(v.mark_max)}{said}"


def feedback(row: Learner, columns: list[Exercise], rubrics: Rubrics | None = None,
             standings: Boards | None = None) -> str:
    """One learner's page: every task with its verdict, points and the check's message;
    each justification with its mark and the rubric it was marked by; their place on the
    class's capstone leaderboard (``standings``, lesson 15) where they ran the capstone."""
    rubrics = rubrics or {}
    body = []
    for ex in columns:
        mine = [v for v in row.verdicts if v.exercise == ex.stem]
        if not mine:
            continue
        lines = ["<tr><th>task</th><th>verdict</th><th>points</th><th>message</th>"
                 "<th>your justification</th><th>its mark</th></tr>"]
        for v in mine:
            said = "" if v.justification is None else (v.justification or NOT_WRITTEN)
            lines.append(f"<tr><td>{html.escape(v.task)}</td><td>{verdict_mark(v)}</td>"
                         f"<td>{number(v.points)} / {number(v.max_points)}</td>"
                         f"<td><pre>{html.escape(v.message)}</pre></td>"
                         f"<td><pre>{html.escape(said)}</pre></td>"
                         f"<td>{marked(v) if v.mark_max is not None else ''}</td></tr>")
        body.append(f"<h2>{html.escape(ex.stem)}</h2><table>{''.join(lines)}</table>")
        body += [f"<h3>How your justification of {html.escape(v.task)} is marked</h3>"
                 f"{rubrics[(v.exercise, v.task)].html()}" for v in mine
                 if v.mark_max is not None and (v.exercise, v.task) in rubrics]
    body.append(leaderboard.your_place(row.name, standings or {}))
    if row.notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>"
                                                  for n in row.notes) + "</ul>")
    most = number(maximum(columns, rubrics))
    body.append(f"<p><b>Total: {number(row.total)} / {most}</b> (the checks' {number(row.auto)}"
                f" + the justifications' {number(row.manual)})</p>")
    return _page(f"Feedback for {row.name}", "".join(body))
