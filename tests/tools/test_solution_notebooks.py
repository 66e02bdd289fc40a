"""Each solution runs once, and that one run answers two questions: does the notebook run top
to bottom without an error, and did every check it calls pass? One test per task names the
task whose check failed.

The notebook run is the exercise as a learner who solved it hands it in (exercises/ with the
solution's code in every stub, ``pristine.solved``), in a fresh kernel started in exercises/
with the grading record on (``DDL_LAB_GRADE_RECORD``, ``check/_record.py``). So the exercise's
own cells (its imports, prompts and "try it" cells) run here too: an exercise that cannot run
up to its first stub fails here. What only the exercise has, its stubs, is covered by each
check's stub test and by the drift test (``test_notebooks.py``: exercises/ is what the
generator makes of solutions/). Under ``make test`` the two xdist workers share the
notebooks (root conftest.py groups this module's tests per notebook).
"""
from __future__ import annotations

import functools
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddl_lab.check._record import ENV
from ddl_lab.tools.grading.discover import load_exercise
from ddl_lab.tools.grading.execute import read_jsonl
from ddl_lab.tools.grading.pristine import first_line, solved
from ddl_lab.tools.notebooks import ROOT, _quiet_output_widgets

STEMS = sorted(p.stem for p in (ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))
TASKS = [(stem, task) for stem in STEMS
         for task in load_exercise(ROOT / "exercises" / f"{stem}.ipynb").tasks]
CELL_TIMEOUT = 600          # seconds, as nbval had (--nbval-cell-timeout)
ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class Ran:
    """One solved exercise, run: the cells that raised (and their errors), the verdicts
    recorded."""
    errors: list[str]
    record: list[dict]


@functools.cache
def ran(stem: str) -> Ran:
    """Run exercises/<stem> solved, every cell even after one raised, once per test process;
    never raises."""
    from nbclient import NotebookClient
    nb = solved(ROOT, stem)
    for cell in nb.cells:           # every cell must run: a check that fails is an error here
        tags = cell.metadata.get("tags")
        if tags and "raises-exception" in tags:
            tags.remove("raises-exception")
    _quiet_output_widgets()
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(ROOT / "exercises")}})
    with tempfile.TemporaryDirectory(prefix="ddl-lab-solution-") as tmp:
        record = Path(tmp) / "record.jsonl"
        try:
            client.execute(env={**os.environ, ENV: str(record)})
            errors = []
        except Exception as e:      # no kernel, a dead kernel, a cell past its limit
            errors = [f"the notebook could not be run to its end: {type(e).__name__}: {e}"]
        errors = [f"cell {i} (`{first_line(c.source)}`) raised {o.get('ename')}: "
                  f"{o.get('evalue')}\n" + ANSI.sub("", "\n".join(o.get("traceback", [])[-3:]))
                  for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
                  if o.get("output_type") == "error"] + errors
        return Ran(errors, read_jsonl(record))


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
