"""An exercise notebook as a learner works through it in JupyterLab: the stub's check shows
one helpful red line (no traceback wall); the solution typed into the cell passes."""
import re

import nbformat
import pytest

pytestmark = pytest.mark.browser

EXERCISE = "00_welcome"


def tasks(exercise: nbformat.NotebookNode, solution: nbformat.NotebookNode):
    """(stub cell, check cell, the learner's answer) for each task of the exercise."""
    sol = [c for c in solution.cells if "solution-only" not in c.metadata.get("tags", [])]
    assert len(sol) == len(exercise.cells), "exercise and solution do not line up"
    found = []
    for i, cell in enumerate(exercise.cells[:-1]):
        nxt = exercise.cells[i + 1]
        if "NotImplementedError(" in cell.source and "check" in nxt.metadata.get("tags", []):
            answer = "\n".join(ln for ln in sol[i].source.split("\n")
                               if "### BEGIN SOLUTION" not in ln and "### END SOLUTION" not in ln)
            found.append((i, i + 1, answer))
    return found


def test_exercise_stub_fails_helpfully_and_the_solution_passes(lab, open_notebook):
    exercise = nbformat.read(lab.root / "exercises" / f"{EXERCISE}.ipynb", as_version=4)
    solution = nbformat.read(lab.root / "solutions" / f"{EXERCISE}.ipynb", as_version=4)
    work = tasks(exercise, solution)
    assert len(work) >= 2, f"{EXERCISE}: expected two graded tasks, found {len(work)}"
    nb = open_notebook(f"exercises/{EXERCISE}.ipynb")
    nb.run_all(timeout=120)
    shown = nb.errors()
    calls_learner = [i for i, c in enumerate(exercise.cells)      # checks and "try it" cells
                     if "check" in c.metadata.get("tags", [])]
    assert {check for _, check, _ in work} <= set(calls_learner)
    assert [e.cell for e in shown] == calls_learner, (
        "Run All on the fresh exercise should fail exactly at the cells that call the "
        "learner's code (tagged raises-exception, so Run All goes on past them):\n"
        + "\n".join(map(str, shown)))

    for stub, check, answer in work:
        text = nb.output_text(check).strip()
        assert re.fullmatch(r"CheckFailed: \w+ is not implemented yet: .+", text), (
            f"cell {check}: the stub's check should show one line, got:\n{text}")
        red = nb.cells.nth(check).locator(".jp-OutputArea-output .ansi-red-fg")
        assert red.first.text_content() == "CheckFailed", "the failure is not shown in red"
        if stub == work[0][0]:
            nb.screenshot(f"exercise-{EXERCISE}-stub", focus=nb.cells.nth(check))

        nb.set_source(stub, answer)
        nb.run_cell(stub)
        nb.run_cell(check)
        out = nb.output_text(check)
        assert re.search(r"✔ \w+: passed", out), f"cell {check} after the solution: {out}"
        errs = [e for e in nb.errors() if e.cell in (stub, check)]
        assert not errs, "\n".join(map(str, errs))
    for cell in sorted(set(calls_learner) - {check for _, check, _ in work}):
        nb.run_cell(cell)                  # the "try it" cells, now with the learner's code
    nb.assert_no_errors("after every task was solved")
    nb.screenshot(f"exercise-{EXERCISE}-solved", focus=nb.cells.nth(work[-1][1]))
