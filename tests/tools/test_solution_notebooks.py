"""Each solution runs once, and that one run answers two questions: does the notebook run top
to bottom without an error, and did every check it calls pass? One test per task names the
task whose check failed. It is graded as a class is, under an instructor's seed (SEED): the
checks draw cases no learner ran at home, so a check whose verdict hangs on its default
cases fails here. The default cases are those the right answers of each check's own tests
(``tests/<slug>/``) and the solutions in learner types (``test_check_learner_types``) meet.

The run is ``ddl-lab grade`` itself (tools/grading) on the exercise as a learner who solved it
hands it in (exercises/ with the solution's code in every stub, ``pristine.solved``): the
notebook runs in the sandbox (``--trust-learner-code`` where none can be made), and each
check is judged in a judge that calls the solution's functions there and reads plain data
back. So every check's way through the sandbox is proven on its solution, and the
exercise's own cells (its imports, prompts and "try it" cells) run here too. What only the
exercise has, its stubs, is covered by each check's stub test and by the drift test
(``test_notebooks.py``). Under ``make test`` the two xdist workers share the notebooks
(root conftest.py groups this module's tests per notebook).
"""
from __future__ import annotations

import functools
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest

from ddl_lab.tools.grading.discover import load_exercise
from ddl_lab.tools.grading.pristine import first_line, solved
from ddl_lab.tools.notebooks import ROOT

STEMS = sorted(p.stem for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
TASKS = [(stem, task) for stem in STEMS
         for task in load_exercise(ROOT / "exercises" / f"{stem}.ipynb").tasks]
SEED = 20260527            # an instructor's grading seed, not the checks' default
CELL_TIMEOUT = 600          # seconds, as nbval had (--nbval-cell-timeout)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Ran:
    """One solved exercise, graded: the cells that raised (and their errors), the verdicts."""
    errors: list[str]
    record: list[dict]


@pytest.fixture(scope="module", autouse=True)
def judges():
    """One judge for every notebook this process grades (as one class would have)."""
    from ddl_lab.tools.grading.grade import Judges
    _JUDGES.append(Judges(SEED, ()))
    yield
    _JUDGES.pop().stop()


_JUDGES: list = []


@functools.cache
def ran(stem: str) -> Ran:
    """Grade exercises/<stem> solved, once per test process; never raises."""
    from ddl_lab.tools.grading import Limits, grade, sandbox
    with tempfile.TemporaryDirectory(prefix="ddl-lab-solution-") as tmp:
        subs, out = Path(tmp) / "submissions", Path(tmp) / "out"
        subs.mkdir()
        nbformat.write(solved(ROOT, stem), subs / "solution.ipynb")
        limits = Limits(timeout=1800, cell_timeout=CELL_TIMEOUT, jobs=1,
                        trust_learner_code=sandbox.why_not() is not None)
        try:
            row, = grade(subs, out, [stem[:2]], limits, progress=False, seed=SEED,
                         judges=_JUDGES[-1] if _JUDGES else None)
        except Exception as e:      # noqa: BLE001 — the grader itself failed
            return Ran([f"the exercise could not be graded: {type(e).__name__}: {e}"], [])
        executed = out / "executed" / f"solution--{stem}.ipynb"
        nb = nbformat.read(executed, as_version=4) if executed.exists() else None
        errors = [f"cell {i} (`{first_line(c.source)}`) raised {o.get('ename')}: "
                  f"{o.get('evalue')}\n" + ANSI.sub("", "\n".join(o.get("traceback", [])[-3:]))
                  for i, c in enumerate(nb.cells if nb else []) for o in c.get("outputs", [])
                  if o.get("output_type") == "error"]
        if nb is None:
            errors.append("the notebook could not be run: " + "; ".join(row.notes))
        return Ran(errors, [{"task": v.task, "passed": v.passed, "message": v.message}
                            for v in row.verdicts])


@pytest.mark.parametrize("stem", STEMS)
def test_the_solved_exercise_runs_top_to_bottom(stem):
    run = ran(stem)
    if run.errors:
        pytest.fail(f"{stem}: " + "\n".join(run.errors), pytrace=False)
    failed = [f"{e['task']}: {e['message']}" for e in run.record if not e["passed"]]
    assert not failed, f"{stem}: checks failed on the solution:\n" + "\n".join(failed)


@pytest.mark.parametrize("stem, task", TASKS)
def test_the_solution_passes_its_check(stem, task):
    run = ran(stem)
    mine = [e for e in run.record if e["task"] == task]
    if not mine:
        pytest.fail(f"{stem}: check.{task} recorded no verdict; the notebook's errors: "
                    + "\n".join(run.errors), pytrace=False)
    failed = [e["message"] for e in mine if not e["passed"]]
    if failed:
        pytest.fail(f"{stem}: check.{task} failed on the solution: {failed[-1]}", pytrace=False)


def test_every_exercise_has_graded_tasks():
    assert {stem for stem, _ in TASKS} == set(STEMS)
