"""The rubrics of the written justifications: ``solutions/rubrics.toml``, their one source.

Every markdown cell of a solution tagged ``justification`` (``metadata.ddl_lab.task``) is
marked by a person: its rubric gives the points, what a full-mark answer says and two
typical partial answers with their points. ``ddl-lab grade`` takes the marks into the
totals (``marks.py``), ``ddl-lab nbgrader-export`` makes the cell a manually graded answer
cell worth the rubric's points (``nbgrader.py``), and the site's instructors page shows
them all. ``drift(course)`` names a justification without a rubric and a rubric without
a justification.
"""
from __future__ import annotations

import html
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .scan import justification_cells

FILE = Path("solutions") / "rubrics.toml"


@dataclass(frozen=True)
class Rubric:
    """How one justification is marked: ``points`` for what ``full`` says, and
    ``partial`` — ``(points, what such an answer says)`` — for two typical partial answers."""
    exercise: str
    task: str
    points: float
    full: str
    partial: tuple[tuple[float, str], ...]

    def markdown(self, level: int = 3) -> str:
        """The rubric as Markdown, under a heading of ``level``."""
        lines = [f"{'#' * level} {self.exercise} · {_md(self.task)} ({self.points:g} points)",
                 "", f"**Full marks ({self.points:g}).** {_md(self.full)}", ""]
        lines += [f"**{p:g} point{'s' if p != 1 else ''}.** {_md(says)}\n"
                  for p, says in self.partial]
        return "\n".join(lines).rstrip() + "\n"

    def html(self) -> str:
        """The rubric as an HTML list (for the feedback pages and the class report)."""
        items = [f"<li><b>{self.points:g}</b>: {html.escape(_one_line(self.full))}</li>"]
        items += [f"<li><b>{p:g}</b>: {html.escape(_one_line(s))}</li>" for p, s in self.partial]
        return f"<ul class='rubric'>{''.join(items)}</ul>"


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _md(text: str) -> str:
    """``text`` on one line, its Markdown characters escaped (``J*``, ``max_steps``)."""
    return re.sub(r"([\\`*_<>\[\]#|$])", r"\\\1", _one_line(text))


def load(course: Path) -> dict[tuple[str, str], Rubric]:
    """The course's rubrics by ``(exercise stem, task)``; none where the course has no
    ``solutions/rubrics.toml``. Raises ValueError for a rubric that is not well formed."""
    path = Path(course) / FILE
    if not path.exists():
        return {}
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise ValueError(f"{path}: {e}") from e
    found = {}
    for stem, tasks in raw.items():
        for task, r in (tasks.items() if isinstance(tasks, dict) else []):
            found[(stem, task)] = _rubric(path, stem, task, r)
    return found


def _rubric(path: Path, stem: str, task: str, r: object) -> Rubric:
    where = f"{path}: [{stem}.{task}]"
    if not isinstance(r, dict) or not {"points", "full", "partial"} <= set(r):
        raise ValueError(f"{where} needs points, full and two [[{stem}.{task}.partial]]")
    points = r["points"]
    partial = r["partial"]
    if not isinstance(points, (int, float)) or points <= 0:
        raise ValueError(f"{where}: points must be a positive number, not {points!r}")
    if not isinstance(partial, list) or len(partial) != 2 or not all(
            isinstance(p, dict) and isinstance(p.get("points"), (int, float))
            and 0 < p["points"] < points and str(p.get("says", "")).strip() for p in partial):
        raise ValueError(f"{where}: give two typical partial answers, each with points "
                         f"between 0 and {points:g} and what it says")
    if not str(r["full"]).strip():
        raise ValueError(f"{where}: say what a full-mark answer says (full)")
    return Rubric(stem, task, float(points), str(r["full"]).strip(),
                  tuple((float(p["points"]), str(p["says"]).strip()) for p in partial))


def justified(course: Path) -> list[tuple[str, str]]:
    """``(stem, task)`` of every justification cell of the course's solutions."""
    return [(p.stem, task) for p in sorted((Path(course) / "solutions").glob("[0-9][0-9]_*.ipynb"))
            for task in justification_cells(nbformat.read(p, as_version=4))]


def drift(course: Path) -> list[str]:
    """What keeps the rubrics and the justification cells of ``course`` apart."""
    have = load(course)
    asked = justified(course)
    return ([f"{stem}: the justification of {task} has no rubric in {FILE}"
             for stem, task in asked if (stem, task) not in have]
            + [f"{FILE}: [{stem}.{task}] names no justification cell of solutions/{stem}.ipynb"
               for stem, task in have if (stem, task) not in asked])


def rubric_for(rubrics: dict[tuple[str, str], Rubric], stem: str, task: str) -> Rubric:
    """The rubric of ``task`` of ``stem``; a ValueError that says what to write if none."""
    try:
        return rubrics[(stem, task)]
    except KeyError:
        raise ValueError(f"the justification of {task} ({stem}) has no rubric: add "
                         f"[{stem}.{task}] to {FILE} (points, full, two partial)") from None


def markdown_all(rubrics: dict[tuple[str, str], Rubric], level: int = 3) -> str:
    """Every rubric as Markdown, in course order."""
    return "\n".join(r.markdown(level) for r in sorted(rubrics.values(), key=lambda r: r.exercise))
