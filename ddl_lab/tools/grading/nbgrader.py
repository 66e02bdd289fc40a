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

Every justification cell (markdown, tagged ``justification``) is a manually graded answer
cell (``grade`` and ``solution``, ``grade_id`` ``justify-<task>``) worth its rubric's points
(``solutions/rubrics.toml``, ``rubrics.py``). nbgrader has no field for a rubric, so the
rubric stands inside the cell's solution region, under the model answer: instructors read
it in ``source/``, and ``generate_assignment`` replaces the whole region by the course's
prompt line (the config's ``text_stub``), as exercises/ has it. ``OUT/rubrics.md``, beside
the config and never released, holds every rubric for the graders at formgrader's side.
``ddl-lab grade --marks gradebook.db`` folds their manual scores into the totals.
Install nbgrader with ``pip install -e ".[instructor]"``.
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import nbformat

from ddl_lab.tools.notebooks import JUSTIFY, MD_END, STUB, exercise_pairs, make_exercise, render
from .discover import check_calls, select, task_points
from .marks import PREFIX
from .pristine import retarget
from .rubrics import Rubric, load, markdown_all, rubric_for

HIDDEN = ("\n### BEGIN HIDDEN TESTS\nfrom ddl_lab.tools.grading import handover as _judge  "
          "# the same check, in a judge\n{}\n### END HIDDEN TESTS")
CONFIG = """\
# nbgrader configuration for the ddl_lab course, written by `ddl-lab nbgrader-export`.
c = get_config()  # noqa: F821 (nbgrader provides it)
# The course's stub, so that generate_assignment gives the notebooks of exercises/.
c.ClearSolutions.code_stub = {{"python": {stub}}}
# The prompt line a justification cell's solution region (model answer, rubric) becomes.
c.ClearSolutions.text_stub = {text}
"""
RUBRIC = "\n---\n**For graders** (left out of the released notebook)\n\n{}"


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


def justification_cell(cell: nbformat.NotebookNode, answer: str, rubric: Rubric) -> None:
    """Make ``cell`` a manually graded answer cell worth ``rubric``'s points: its source the
    solution's (``answer``) with the rubric at the end of the solution region."""
    lines = answer.split("\n")
    end = max((i for i, line in enumerate(lines) if MD_END.match(line)), default=None)
    if end is None:
        raise ValueError(f"the justification of {rubric.task} ({rubric.exercise}) has no "
                         "<!-- END SOLUTION --> line")
    lines.insert(end, RUBRIC.format(rubric.markdown(level=4)))
    cell.source = "\n".join(lines)
    cell.metadata["nbgrader"] = {"grade": True, "solution": True, "locked": False,
                                 "grade_id": f"{PREFIX}{rubric.task}",
                                 "points": rubric.points, "schema_version": 3}


def source_notebook(solution: nbformat.NotebookNode, stem: str,
                    rubrics: dict[tuple[str, str], Rubric] | None = None) -> nbformat.NotebookNode:
    """The nbgrader source of one exercise: the solution's cells as the exercise has them
    (same tags, no solution-only cells), its answers kept, nbgrader metadata added; each
    justification a manually graded cell with its rubric (ValueError where none)."""
    exercise = make_exercise(solution, stem)
    answers = {c.get("id"): c.source for c in solution.cells}
    nb = copy.deepcopy(exercise)
    for cell in nb.cells:
        task = (cell.metadata.get("ddl_lab") or {}).get("task")
        if cell.cell_type == "markdown" and "justification" in cell.metadata.get("tags", []) \
                and task:
            justification_cell(cell, answers.get(cell.get("id"), cell.source),
                               rubric_for(rubrics or {}, stem, task))
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
    rubrics = load(course)
    out = Path(out)
    written = []
    for stem, sol in chosen.items():
        path = out / "source" / stem / f"{stem}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render(source_notebook(nbformat.read(sol, as_version=4), stem, rubrics)))
        written.append(path)
    stub = STUB.format(indent="")
    config = out / "nbgrader_config.py"
    config.write_text(CONFIG.format(stub=json.dumps(stub), text=json.dumps(JUSTIFY)))
    mine = {k: r for k, r in rubrics.items() if k[0] in chosen}
    guide = out / "rubrics.md"
    guide.write_text("# Rubrics of the justifications (for graders; not released)\n\n"
                     "Each is the manually graded cell `justify-<task>` of its assignment.\n\n"
                     + markdown_all(mine))
    return written + [config, guide]
