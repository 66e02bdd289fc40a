"""Which exercise a submitted notebook is, and whose: the course side of ``ddl-lab grade``.

An exercise notebook carries ``metadata.ddl_lab = {"exercise", "version"}`` (written by
the generator, ``ddl_lab/tools/notebooks.py``). A copy without it (made before the metadata
existed) is recognised by its cell ids. The learner is the sub-folder a notebook sits in,
or else the notebook's file stem.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ddl_lab.tools.notebooks import exercise_version


@dataclass
class CheckCell:
    """A graded check cell of an exercise: the tasks it checks and their points."""
    index: int                      # position among the exercise's graded check cells
    cell_id: str
    source: str
    tasks: list[str]
    calls: list[str]                # the learner's names the check calls, e.g. ["my_rank"]
    points: dict[str, float]


@dataclass
class Exercise:
    """One exercise of the course, as exercises/NN_slug.ipynb has it (the pristine copy)."""
    stem: str
    nb: nbformat.NotebookNode
    version: str
    checks: list[CheckCell]
    positions: dict[str, int] = field(default_factory=dict)     # cell id -> position

    @property
    def tasks(self) -> list[str]:
        return [t for c in self.checks for t in c.tasks]

    @property
    def max_points(self) -> float:
        return sum(p for c in self.checks for p in c.points.values())


@dataclass
class Submission:
    """One submitted file: whose it is, which exercise it is, and what was wrong with it."""
    learner: str
    path: Path
    nb: nbformat.NotebookNode | None = None
    exercise: str | None = None
    notes: list[str] = field(default_factory=list)
    error: str | None = None        # why it cannot be graded at all


def check_calls(source: str) -> list[tuple[str, list[str]]]:
    """The graded checks a cell calls: ``[(task, [names of its arguments]), ...]`` for
    every ``check.<task>(...)`` call."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "check":
            names = [a.id for a in node.args if isinstance(a, ast.Name)]
            found.append((node.func.attr, names))
    return sorted(found, key=lambda f: source.find(f"check.{f[0]}("))


def task_points(cell: nbformat.NotebookNode, tasks: list[str]) -> dict[str, float]:
    """Points per task: ``metadata.ddl_lab.points`` of the check cell, a number (for each
    task of the cell) or ``{task: points}``; 1 by default."""
    points = cell.get("metadata", {}).get("ddl_lab", {}).get("points", 1)
    if isinstance(points, dict):
        return {t: float(points.get(t, 1)) for t in tasks}
    return {t: float(points) for t in tasks}


def load_exercise(path: Path) -> Exercise:
    nb = nbformat.read(path, as_version=4)
    checks = []
    for cell in nb.cells:
        calls = check_calls(cell.source) if cell.cell_type == "code" else []
        if "check" in cell.metadata.get("tags", []) and calls:
            tasks = [t for t, _ in calls]
            checks.append(CheckCell(len(checks), cell.get("id", ""), cell.source, tasks,
                                    [n for _, names in calls for n in names],
                                    task_points(cell, tasks)))
    return Exercise(path.stem, nb, exercise_version(nb), checks,
                    {c.get("id"): i for i, c in enumerate(nb.cells) if c.get("id")})


def course_exercises(course: Path) -> dict[str, Exercise]:
    """Every exercise of the course at ``course`` (its exercises/ folder), by stem."""
    found = sorted((Path(course) / "exercises").glob("[0-9][0-9]_*.ipynb"))
    if not found:
        raise FileNotFoundError(f"{course}/exercises holds no exercise notebook: pass the "
                                "course folder (the one with solutions/ and exercises/)")
    return {p.stem: load_exercise(p) for p in found}


def select(exercises: dict[str, Exercise], wanted: list[str] | None) -> dict[str, Exercise]:
    """The exercises named by ``--exercise`` (``06`` or ``06_ring_allreduce``)."""
    if not wanted:
        return exercises
    chosen = {}
    for w in wanted:
        hits = [s for s in exercises if s == w or s.split("_")[0] == w.zfill(2)]
        if not hits:
            raise ValueError(f"no exercise {w!r} in this course; there are "
                             f"{', '.join(exercises)}")
        chosen[hits[0]] = exercises[hits[0]]
    return chosen


def submitted_files(folder: Path) -> list[tuple[str, Path]]:
    """``(learner, path)`` for every notebook in ``folder``: ``folder/<learner>.ipynb`` or
    ``folder/<learner>/<anything>.ipynb`` (checkpoints and hidden files skipped)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} is not a folder: pass the folder of submitted "
                                "notebooks (one file or one sub-folder per learner)")
    found = []
    for p in sorted(folder.iterdir()):
        if p.name.startswith("."):
            continue
        if p.is_file() and p.suffix == ".ipynb":
            found.append((p.stem, p))
        elif p.is_dir():
            found += [(p.name, q) for q in sorted(p.rglob("*.ipynb"))
                      if not any(part.startswith(".") for part in q.relative_to(p).parts)]
    return found


def identify(sub: Submission, exercises: dict[str, Exercise],
             course: dict[str, Exercise]) -> Submission:
    """Read ``sub.path`` and name its exercise, or say why it cannot be graded. ``course``
    is every exercise; ``exercises`` those this class was asked to submit."""
    try:
        sub.nb = nbformat.read(sub.path, as_version=4)
    except Exception as e:      # empty, truncated, malformed JSON, not a notebook at all
        what = "an empty file" if sub.path.stat().st_size == 0 else \
            f"not a readable notebook ({type(e).__name__}: {str(e).splitlines()[0][:200]})"
        sub.error = f"{sub.path.name} is {what}: nothing could be graded"
        return sub
    meta = sub.nb.metadata.get("ddl_lab", {})
    stem = meta.get("exercise") if isinstance(meta, dict) else None
    if stem not in course:
        stem = _by_cells(sub.nb, course)
        if stem:
            sub.notes.append(f"{sub.path.name} carries no exercise metadata (an older copy?); "
                             f"recognised as {stem} by its cells")
    if stem is None:
        sub.error = (f"{sub.path.name} is no exercise of this course: neither its metadata nor "
                     "its cells match a notebook of exercises/ — submit your copy of "
                     "exercises/NN_….ipynb")
    elif stem not in exercises:
        sub.error = (f"{sub.path.name} is exercise {stem}, not {' or '.join(exercises)}: "
                     "the wrong exercise was submitted")
    else:
        sub.exercise = stem
        version = meta.get("version") if isinstance(meta, dict) else None
        if version and version != exercises[stem].version:
            sub.notes.append(f"{sub.path.name} was made from an older version of {stem}: "
                             "graded with the current checks")
    return sub


def _by_cells(nb: nbformat.NotebookNode, course: dict[str, Exercise]) -> str | None:
    """The exercise sharing at least half of its cell ids with ``nb``, if any."""
    ids = {c.get("id") for c in nb.cells} - {None}
    best = max(course.values(), key=lambda e: len(ids & e.positions.keys()), default=None)
    if best and best.positions and 2 * len(ids & best.positions.keys()) >= len(best.positions):
        return best.stem
    return None
