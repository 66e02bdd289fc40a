"""What ``ddl-lab grade`` writes: ``gradebook.csv`` (one row per learner, one column per
task, the total, notes, the scan's flags, one column per written justification),
``report.html`` (the seed, pass rate and most frequent failure messages per task, every
learner's row, flags and justifications), ``feedback/<learner>.html`` (their
tasks, verdicts, the checks' messages, their justifications) and ``results.json``
(everything, for other tools).
"""
from __future__ import annotations

import csv
import html
import json
import re
from collections import Counter
from pathlib import Path
from .discover import Exercise
from .record import Learner

STYLE = ("body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;"
         "padding:.3em .6em;vertical-align:top;text-align:left}.ok{color:#1a7f37}"
         ".no{color:#c62828}pre{white-space:pre-wrap;margin:0;font-size:90%}")


NOT_WRITTEN = "(not written)"


def write_all(out: Path, rows: list[Learner], columns: list[Exercise],
              seed: int | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    write_gradebook(out / "gradebook.csv", rows, columns)
    (out / "report.html").write_text(class_report(rows, columns, seed))
    (out / "feedback").mkdir(exist_ok=True)
    for row in rows:
        (out / "feedback" / f"{file_name(row.name)}.html").write_text(feedback(row, columns))
    (out / "results.json").write_text(json.dumps(
        {"seed": seed, "learners": [
            {"learner": r.name, "total": r.total, "notes": r.notes, "flags": r.flags,
             "verdicts": [v.as_dict() for v in r.verdicts]} for r in rows]},
        indent=1, ensure_ascii=False))


def justified(columns: list[Exercise]) -> list[tuple[str, str]]:
    """``(exercise, task)`` of every task whose exercise asks for a justification."""
    from .scan import justification_cells
    return [(e.stem, t) for e in columns for t in justification_cells(e.nb)]


def justification_of(row: Learner, stem: str, task: str) -> str:
    v = next((v for v in row.verdicts if (v.exercise, v.task) == (stem, task)), None)
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


def write_gradebook(path: Path, rows: list[Learner], columns: list[Exercise]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        asked = justified(columns)
        w.writerow(["learner"] + [t for e in columns for t in e.tasks] + ["total", "notes",
                                                                          "flags"]
                   + [f"justification: {t}" for _, t in asked])
        for row in rows:
            w.writerow([row.name] + cells_of(row, columns) + [number(row.total),
                                                              " | ".join(row.notes),
                                                              " | ".join(row.flags)]
                       + [justification_of(row, e, t) for e, t in asked])


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


def class_report(rows: list[Learner], columns: list[Exercise], seed: int | None = None) -> str:
    head = "".join(f"<th>{html.escape(t)}</th>" for e in columns for t in e.tasks)
    most = number(sum(e.max_points for e in columns))
    cases = (f"the instructor's seed {seed} (cases no learner ran at home)" if seed is not None
             else "the checks' own seeds (the cases learners ran at home)")
    body = [f"<p>Graded on {html.escape(cases)}.</p>"] + [task_summary(rows, e) for e in columns]
    table = [f"<tr><th>learner</th>{head}<th>total / {most}</th><th>notes</th>"
             "<th>flags</th></tr>"]
    for row in rows:
        cells = "".join(f"<td>{c}</td>" for c in cells_of(row, columns))
        link = f"feedback/{file_name(row.name)}.html"
        notes = "<br>".join(html.escape(n) for n in row.notes)
        marks = "<br>".join(html.escape(n) for n in row.flags)
        table.append(f"<tr><td><a href='{html.escape(link)}'>{html.escape(row.name)}</a></td>"
                     f"{cells}<td>{number(row.total)}</td><td>{notes}</td><td>{marks}</td></tr>")
    body.append(f"<h2>Learners</h2><table>{''.join(table)}</table>")
    asked = justified(columns)
    if asked:
        lines = ["<tr><th>learner</th><th>task</th><th>verdict</th><th>justification</th></tr>"]
        for row in rows:
            for stem, task in asked:
                v = next((v for v in row.verdicts if (v.exercise, v.task) == (stem, task)), None)
                if v is not None:
                    lines.append(f"<tr><td>{html.escape(row.name)}</td><td>{html.escape(task)}"
                                 f"</td><td>{verdict_mark(v)}</td><td><pre>"
                                 f"{html.escape(justification_of(row, stem, task))}</pre></td></tr>")
        body.append(f"<h2>Justifications (not graded)</h2><table>{''.join(lines)}</table>")
    return _page(f"Grades: {', '.join(e.stem for e in columns)}", "".join(body))


def verdict_mark(v) -> str:
    return "<span class='ok'>✔ passed</span>" if v.passed else \
        "<span class='no'>✘ not passed</span>"


def feedback(row: Learner, columns: list[Exercise]) -> str:
    """One learner's page: every task with its verdict, points and the check's message."""
    body = []
    for ex in columns:
        mine = [v for v in row.verdicts if v.exercise == ex.stem]
        if not mine:
            continue
        lines = ["<tr><th>task</th><th>verdict</th><th>points</th><th>message</th>"
                 "<th>your justification</th></tr>"]
        for v in mine:
            said = "" if v.justification is None else (v.justification or NOT_WRITTEN)
            lines.append(f"<tr><td>{html.escape(v.task)}</td><td>{verdict_mark(v)}</td>"
                         f"<td>{number(v.points)} / {number(v.max_points)}</td>"
                         f"<td><pre>{html.escape(v.message)}</pre></td>"
                         f"<td><pre>{html.escape(said)}</pre></td></tr>")
        body.append(f"<h2>{html.escape(ex.stem)}</h2><table>{''.join(lines)}</table>")
    if row.notes:
        body.append("<h2>Notes</h2><ul>" + "".join(f"<li>{html.escape(n)}</li>"
                                                  for n in row.notes) + "</ul>")
    most = number(sum(e.max_points for e in columns))
    body.append(f"<p><b>Total: {number(row.total)} / {most}</b></p>")
    return _page(f"Feedback for {row.name}", "".join(body))
