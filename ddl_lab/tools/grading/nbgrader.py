"""``ddl-lab nbgrader-export OUT``: the course as an nbgrader course folder.

Writes ``OUT/nbgrader_config.py`` and ``OUT/source/<NN_slug>/<NN_slug>.ipynb`` for every
solution: the solution notebook with nbgrader's cell metadata (schema 3) — code cells with
a ``### BEGIN SOLUTION`` region are solution cells, graded check cells are locked
autograded test cells worth their points (``metadata.ddl_lab.points``, default 1 per
task). nbgrader finds the substring ``BEGIN SOLUTION`` in the course's markers, and the
config's ``code_stub`` is the generator's stub, so ``nbgrader generate_assignment`` yields
the notebooks of ``exercises/`` (same stubs, same check cells, same metadata), and
``nbgrader autograde`` scores a task all-or-nothing, as ``ddl-lab grade`` does a check
without parts. Each test cell carries a hidden test (nbgrader's ``BEGIN HIDDEN TESTS``,
left out of the released notebook) that runs the same check again in a judge
(``handover.judged``, ``judge.py``): a cell passes only if the check passes there too.
Install nbgrader with ``pip install -e ".[instructor]"``.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import nbformat

from ddl_lab.tools.notebooks import STUB, exercise_pairs, make_exercise, render
from .discover import check_calls, select, task_points
from .pristine import retarget

HIDDEN = ("\n### BEGIN HIDDEN TESTS\nfrom ddl_lab.tools.grading import handover as _judge  "
          "# the same check, in a judge\n{}\n### END HIDDEN TESTS")
CONFIG = """\
# nbgrader configuration for the ddl_lab course, written by `ddl-lab nbgrader-export`.
c = get_config()  # noqa: F821 (nbgrader provides it)
# The course's stub, so that generate_assignment gives the notebooks of exercises/.
c.ClearSolutions.code_stub = {{"python": {stub}}}
"""


def nbgrader_metadata(cell: nbformat.NotebookNode, tasks: list[str]) -> dict | None:
    """nbgrader's metadata for a cell of a solution notebook, or None for a plain cell."""
    if cell.cell_type != "code":
        return None
    if tasks and "check" in cell.metadata.get("tags", []):
        points = task_points(cell, tasks)
        return {"grade": True, "solution": False, "locked": True,
                "grade_id": "-".join(tasks), "points": sum(points.values()),
                "schema_version": 3}
    if "BEGIN SOLUTION" in cell.source:
        return {"grade": False, "solution": True, "locked": False,
                "grade_id": f"answer-{cell.get('id', '')}", "schema_version": 3}
    return None


def source_notebook(solution: nbformat.NotebookNode, stem: str) -> nbformat.NotebookNode:
    """The nbgrader source of one exercise: the solution's cells as the exercise has them
    (same tags, no solution-only cells), its answers kept, nbgrader metadata added."""
    exercise = make_exercise(solution, stem)
    answers = {c.get("id"): c.source for c in solution.cells}
    nb = copy.deepcopy(exercise)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.source = answers.get(cell.get("id"), cell.source)
        tasks = [t for t, _ in check_calls(cell.source)]
        meta = nbgrader_metadata(cell, tasks)
        if meta:
            cell.metadata["nbgrader"] = meta
        if meta and meta["grade"]:
            cell.source += HIDDEN.format(retarget(cell.source, "_judge", "judged"))
    return nb


def export(course: Path, out: Path, exercises: list[str] | None = None) -> list[Path]:
    """Write the nbgrader course folder ``out`` from ``course``/solutions; the paths written."""
    pairs = {sol.stem: sol for sol, _ in exercise_pairs(course)}
    if not pairs:
        raise FileNotFoundError(f"{course}/solutions holds no notebook")
    chosen = select(pairs, exercises)
    out = Path(out)
    written = []
    for stem, sol in chosen.items():
        path = out / "source" / stem / f"{stem}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(source_notebook(nbformat.read(sol, as_version=4), stem)))
        written.append(path)
    stub = STUB.format(indent="")
    config = out / "nbgrader_config.py"
    config.write_text(CONFIG.format(stub=json.dumps(stub)))
    return written + [config]
