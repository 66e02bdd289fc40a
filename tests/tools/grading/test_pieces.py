"""The parts of ``ddl-lab grade``: the record the checks write, which exercise a notebook
is, the pristine check cells, points and partial credit, the notebook limit, the CLI."""
import json
import shutil

import nbformat
import pytest

from ddl_lab import check
from ddl_lab.__main__ import main
from ddl_lab.check import _record
from ddl_lab.tools.grading.discover import (Submission, course_exercises, identify,
                                            load_exercise)
from ddl_lab.tools.grading.execute import run_submission
from ddl_lab.tools.grading.pristine import check_index, grading_notebook, handover_source
from ddl_lab.tools.grading.record import verdicts
from ddl_lab.tools.notebooks import make_exercises

from .sample_class import GD, RING, ROOT, check_cells, exercise, solved, tasks_of

COURSE = course_exercises(ROOT)


def test_the_judges_sink_takes_every_verdict_named_from_the_stack(monkeypatch, solution):
    taken = []
    monkeypatch.setattr(_record, "SINK", taken.append)
    task, fn = tasks_of(RING)[0]
    with pytest.raises(check.CheckFailed):
        getattr(check, task)(lambda n, nbytes, alpha, beta: 0.0)
    getattr(check, task)(solution(RING, fn))
    assert [(r["task"], r["passed"]) for r in taken] == [(task, False), (task, True)]
    assert "returned 0" in taken[0]["message"]


def test_nothing_is_recorded_unless_grading_asks(tmp_path, monkeypatch, solution):
    monkeypatch.chdir(tmp_path)
    task, fn = tasks_of(RING)[0]
    getattr(check, task)(solution(RING, fn))
    assert not list(tmp_path.iterdir())


def submission(nb, tmp_path, name="x.ipynb"):
    path = tmp_path / name
    nbformat.write(nb, path) if nb is not None else path.write_text("")
    return identify(Submission("x", path), {GD: COURSE[GD]}, COURSE)


def test_a_notebook_is_recognised_by_its_metadata_or_its_cells(tmp_path):
    assert submission(solved(GD), tmp_path).exercise == GD
    bare = solved(GD)
    del bare.metadata["ddl_lab"]
    sub = submission(bare, tmp_path)
    assert sub.exercise == GD and "recognised as" in sub.notes[0]
    old = solved(GD)
    old.metadata["ddl_lab"]["version"] = "old"
    assert "older version" in submission(old, tmp_path).notes[0]
    assert "wrong exercise" in submission(exercise(RING), tmp_path).error
    foreign = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(1)")])
    assert "no exercise of this course" in submission(foreign, tmp_path).error
    assert "empty file" in submission(None, tmp_path).error


def test_the_pristine_checks_replace_whatever_the_learner_did_to_them():
    ex = COURSE[GD]
    nb = solved(GD)
    cells = check_cells(nb)
    cells[0].source = 'print("✔ passed")'
    cells[1].metadata["tags"] = []
    nb.cells.remove(cells[2])
    graded = grading_notebook(nb, ex)
    pristine = [c for c in graded.cells if check_index(c) is not None]
    assert [c.source for c in pristine] == [handover_source(c.source, c.index)
                                            for c in ex.checks]
    assert all(f"take({t!r}" in s.source for s, c in zip(pristine, ex.checks) for t in c.tasks)
    assert "✔ passed" not in "".join(c.source for c in graded.cells)
    # each check comes after the cell defining the function it calls, before the next one
    order = [c.source for c in graded.cells]
    for k, (task, fn) in enumerate(tasks_of(GD)):
        defined = next(i for i, s in enumerate(order) if f"def {fn}(" in s)
        assert order.index(handover_source(ex.checks[k].source, k)) > defined


def test_points_from_the_solution_and_partial_credit(tmp_path):
    """Points set in a solution's check cell reach the exercise; a check with parts that
    reports 2 of 3 earns 2/3 of them."""
    for d in ("solutions", "exercises"):
        (tmp_path / d).mkdir()
    shutil.copy(ROOT / "solutions" / f"{RING}.ipynb", tmp_path / "solutions")
    sol = nbformat.read(tmp_path / "solutions" / f"{RING}.ipynb", as_version=4)
    check_cells(sol)[1].metadata["ddl_lab"] = {"points": 3}
    nbformat.write(sol, tmp_path / "solutions" / f"{RING}.ipynb")
    make_exercises(tmp_path)
    ex = load_exercise(tmp_path / "exercises" / f"{RING}.ipynb")
    first, second, *_ = ex.tasks
    assert ex.checks[0].points == {first: 1} and ex.checks[1].points == {second: 3}
    judged = {first: {"outcome": "passed", "message": "right"},
              second: {"outcome": "failed", "score": 2 / 3, "message": "part 3: wrong"}}
    events = [{"event": "done", "check": 0}, {"event": "done", "check": 1}]
    from ddl_lab.tools.grading.execute import Run
    got = verdicts(ex, Run(events, None, False, 0.0, ""), judged, 60, 600)
    assert [(v.task, v.points, v.max_points, v.passed) for v in got[:2]] == \
        [(first, 1, 1, True), (second, 2, 3, False)]
    assert got[1].message == "part 3: wrong"


def graded_run(tmp_path, hang: str, cell_timeout: float, timeout: float):
    """Exercise 01 solved, with the cell ``hang`` first: the limits are reached as soon as
    the kernel is up. The hangs sleep, as a cell waiting for a message does: the limits
    stop them as they would a busy loop, and cost no CPU meanwhile."""
    nb = solved(GD)
    nb.cells.insert(1, nbformat.v4.new_code_cell(hang))
    work = tmp_path / "work"
    work.mkdir()
    run = run_submission(grading_notebook(nb, COURSE[GD]), work, cell_timeout, timeout)
    return run, verdicts(COURSE[GD], run, {}, cell_timeout, timeout)


def test_a_notebook_past_its_limit_is_stopped(tmp_path):
    run, got = graded_run(tmp_path, "import time\nwhile True:\n    time.sleep(1)",
                          cell_timeout=600, timeout=8)
    assert run.killed_at_limit
    assert all(not v.passed and "past its limit of 8 s" in v.message for v in got), got


def test_a_cell_that_ignores_interrupts_stops_the_notebook_there(tmp_path):
    """Interrupted at the per-cell limit, the cell goes on; the kernel does not answer
    within execute.PROBE seconds, and the notebook is stopped there."""
    run, got = graded_run(tmp_path, "import signal\nimport time\n"
                          "signal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n"
                          "    time.sleep(1)", cell_timeout=1, timeout=300)
    assert not run.killed_at_limit
    assert all(not v.passed and "could not be interrupted" in v.message for v in got), got
    assert "`import signal`" in got[0].message


def test_the_cli_says_what_to_pass(tmp_path, capsys):
    assert main(["grade", str(tmp_path / "nowhere")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["grade", str(tmp_path), "--exercise", "99"]) == 2
    assert "no exercise '99'" in capsys.readouterr().err
    assert main(["grade", str(tmp_path), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "gradebook.csv").read_text() == \
        "learner,total,notes,flags,auto,manual,max\n"
    assert json.loads((tmp_path / "o" / "results.json").read_text()) == \
        {"seed": None, "exercises": [], "learners": []}
    assert main(["grade", str(tmp_path), "--out", str(tmp_path / "s"), "--seed", "5"]) == 0
    assert json.loads((tmp_path / "s" / "results.json").read_text())["seed"] == 5
    assert "seed 5 (cases no learner ran at home)" in (tmp_path / "s" / "report.html").read_text()
