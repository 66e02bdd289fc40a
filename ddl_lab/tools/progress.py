"""The learner's own progress (shown in lesson 00; ``ddl-lab progress``): every graded task of the
course, lesson by lesson, as passed / failed / not tried, read from the verdicts the
checks record locally (``ddl_lab/check/_record.py``)."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ddl_lab.check._record import progress_path

__all__ = ["Status", "course_tasks", "read_progress", "progress_table", "show_progress"]

MARK = {"passed": "✔", "failed": "✘", "not tried": "·"}


@dataclass(frozen=True)
class Status:
    """One task's latest verdict: ``passed``, ``failed`` or ``not tried``."""
    lesson: str
    task: str
    state: str
    message: str = ""


def course_tasks() -> dict[str, list[str]]:
    """Every graded task, by lesson slug, in the order of the lessons' numbers."""
    from ddl_lab import check                 # declares every task, listed in lesson order
    from ddl_lab.check._core import TASKS
    course = Path(__file__).resolve().parents[2] / "lessons"
    number = {p.stem[3:]: p.stem[:2] for p in course.glob("[0-9][0-9]_*.ipynb")}
    by_lesson: dict[str, list[str]] = {}
    for spec in sorted(TASKS.values(), key=lambda t: check.__all__.index(t.name)):
        by_lesson.setdefault(spec.lesson, []).append(spec.name)
    return dict(sorted(by_lesson.items(), key=lambda kv: (number.get(kv[0], "99"), kv[0])))


def read_progress(path: Path | None = None) -> dict[tuple[str, str], Status]:
    """The latest verdict per (lesson, task) in the progress file (missing: none yet)."""
    path = path or progress_path()
    latest: dict[tuple[str, str], Status] = {}
    if path is None or not Path(path).exists():
        return latest
    for line in Path(path).read_text(errors="replace").splitlines():
        try:
            e = json.loads(line)
            key = (str(e["lesson"]), str(e["task"]))
            latest[key] = Status(*key, "passed" if e["passed"] else "failed", e.get("message", ""))
        except (ValueError, KeyError, TypeError):
            continue                      # a torn or foreign line: skip it
    return latest


def _statuses(path: Path | None) -> list[Status]:
    seen = read_progress(path)
    return [seen.get((lesson, task), Status(lesson, task, "not tried"))
            for lesson, tasks in course_tasks().items() for task in tasks]


def progress_table(path: Path | None = None) -> str:
    """A text table: one line per lesson, each task marked ✔ passed, ✘ failed, · not tried."""
    rows, by_lesson = [], {}
    for s in _statuses(path):
        by_lesson.setdefault(s.lesson, []).append(s)
    width = max(map(len, by_lesson), default=0)
    for lesson, tasks in by_lesson.items():
        done = sum(s.state == "passed" for s in tasks)
        marks = "  ".join(f"{MARK[s.state]} {s.task}" for s in tasks)
        rows.append(f"{lesson:<{width}}  {done}/{len(tasks)}  {marks}")
    total = sum(s.state == "passed" for ss in by_lesson.values() for s in ss)
    count = sum(map(len, by_lesson.values()))
    return "\n".join(rows + [f"{'':<{width}}  {total}/{count} tasks passed  "
                             "(✔ passed, ✘ failed, · not tried)"])


def show_progress(path: Path | None = None) -> None:
    """Lesson 00's view of the same table, as an HTML widget."""
    import html

    import ipywidgets as widgets
    from IPython.display import display
    colour = {"passed": "#1a7f37", "failed": "#cf222e", "not tried": "#8c959f"}
    cells = "".join(
        f"<tr><td><code>{html.escape(s.lesson)}</code></td><td>{html.escape(s.task)}</td>"
        f"<td style='color:{colour[s.state]}'>{MARK[s.state]} {s.state}</td></tr>"
        for s in _statuses(path))
    display(widgets.HTML(f"<table><tr><th>lesson</th><th>task</th><th>verdict</th></tr>"
                         f"{cells}</table>"))
