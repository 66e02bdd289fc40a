"""Justifications marked by people: every justification cell has a rubric (and every rubric
a cell), the nbgrader export makes each a manually graded cell worth its rubric's points,
and ``ddl-lab grade`` lists the unmarked ones and folds an instructor's marks into the
totals, refusing marks that fit no learner, task or rubric — on a made-up class of the toy
course (no notebook runs here; test_tampering.py grades the toy class for real)."""
import csv
import json
import shutil

import nbformat
import pytest

from ddl_lab.__main__ import main
from ddl_lab.tools.grading import nbgrader, report, rubrics
from ddl_lab.tools.grading.discover import course_exercises
from ddl_lab.tools.grading.marks import MarksError, attach, fold, read_marks, unmarked
from ddl_lab.tools.grading.record import Learner, Verdict
from ddl_lab.tools.notebooks import JUSTIFY, ROOT, exercise_pairs, stub_justification

from .toy_course import JUSTIFIED, NUMPY, WORKERS, solution

TEXT = "Two factors near √budget: the nearest divisors keep both small."


def test_every_justification_has_a_rubric_and_every_rubric_a_justification():
    assert rubrics.drift(ROOT) == []
    found = rubrics.load(ROOT)
    asked = rubrics.justified(ROOT)
    assert asked and sorted(found) == sorted(asked)
    for r in found.values():              # load() checked the form; the marks make sense
        assert [p for p, _ in r.partial] == sorted((p for p, _ in r.partial), reverse=True)
        assert len(r.full.split()) >= 40, f"{r.exercise}.{r.task}: say what full marks take"


def test_drift_is_named_both_ways(tmp_path, toy_course):
    course = tmp_path / "course"
    shutil.copytree(toy_course / "solutions", course / "solutions")
    toml = course / "solutions" / "rubrics.toml"
    toml.write_text(toml.read_text().replace(f".{JUSTIFIED}", ".toy_mean"))
    assert rubrics.drift(course) == [
        f"{NUMPY}: the justification of {JUSTIFIED} has no rubric in {rubrics.FILE}",
        f"{rubrics.FILE}: [{NUMPY}.toy_mean] names no justification cell of "
        f"solutions/{NUMPY}.ipynb"]


@pytest.mark.parametrize("partials, says", [
    ("[[\"01_toy\".toy_plan.partial]]\npoints = 1\nsays = \"one\"\n", "two typical partial"),
    ("[[\"01_toy\".toy_plan.partial]]\npoints = 3\nsays = \"x\"\n" * 2, "between 0 and 2")])
def test_a_rubric_without_two_partial_answers_within_its_points_is_refused(tmp_path, partials,
                                                                           says):
    (tmp_path / "solutions").mkdir()
    (tmp_path / "solutions" / "rubrics.toml").write_text(
        "[\"01_toy\".toy_plan]\npoints = 2\nfull = \"all\"\n" + partials)
    with pytest.raises(ValueError, match=says):
        rubrics.load(tmp_path)


def made_up_class(course) -> tuple[list[Learner], list, dict]:
    """alice, bob and dan handed in the toy exercise 01 (alice and bob justified their plan,
    dan wrote nothing), carol only exercise 00: as ``grade`` returns them, before any mark
    (dan's unwritten justification is marked 0 at once)."""
    exercises = course_exercises(course)
    columns = [exercises[NUMPY], exercises[WORKERS]]

    def verdicts(stem, passed, justification=None):
        ex = exercises[stem]
        return [Verdict(stem, t, c.points[t] if passed else 0.0, c.points[t], passed, "",
                        justification if t == JUSTIFIED and stem == NUMPY else None)
                for c in ex.checks for t in c.tasks]
    rows = [Learner("alice", verdicts(NUMPY, True, TEXT)),
            Learner("bob", verdicts(NUMPY, False, "Because it fits.")),
            Learner("carol", verdicts(WORKERS, True)),
            Learner("dan", verdicts(NUMPY, True, ""))]
    found = rubrics.load(course)
    attach(rows, found)
    return rows, columns, found


def write_marks(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["learner", "exercise", "task", "points", "comment"])
        w.writerows(rows)
    return path


def test_marks_fold_into_the_totals_and_every_report(tmp_path, toy_course):
    rows, columns, found = made_up_class(toy_course)
    auto = {r.name: r.auto for r in rows}
    assert [(n, v.task) for n, v in unmarked(rows)] == [("alice", JUSTIFIED), ("bob", JUSTIFIED)]
    fold(rows, found, read_marks(write_marks(tmp_path / "m.csv", [
        ["alice", "01", JUSTIFIED, "1.5", "why the nearest divisors?"]])))
    alice = rows[0]
    assert alice.auto == auto["alice"] and alice.manual == 1.5
    assert alice.total == auto["alice"] + 1.5
    out = tmp_path / "out"
    assert report.write_all(out, rows, columns, None, found) == 1            # bob's, to mark
    most = sum(e.max_points for e in columns) + 2
    with open(out / "gradebook.csv", newline="") as f:
        book = {r["learner"]: r for r in csv.DictReader(f)}
    assert book["alice"]["total"] == f"{auto['alice'] + 1.5:g}"
    assert (book["alice"]["auto"], book["alice"]["manual"], book["alice"]["max"]) == \
        (f"{auto['alice']:g}", "1.5", f"{most:g}")
    assert book["alice"][f"justification: {JUSTIFIED}"] == TEXT
    assert book["alice"][f"mark: {JUSTIFIED}"] == "1.5"
    assert book["bob"][f"mark: {JUSTIFIED}"] == "" and book["bob"]["manual"] == "0"
    assert book["dan"][f"mark: {JUSTIFIED}"] == "0"                      # not written
    assert book["dan"][f"justification: {JUSTIFIED}"] == "(not written)"
    results = {r["learner"]: r for r in json.loads((out / "results.json").read_text())["learners"]}
    assert (results["alice"]["total"], results["alice"]["max"]) == (alice.total, most)
    mark = next(v for v in results["alice"]["verdicts"] if v["task"] == JUSTIFIED)
    assert (mark["mark"], mark["mark_max"], mark["mark_comment"]) == \
        (1.5, 2, "why the nearest divisors?")
    page = (out / "feedback" / "alice.html").read_text()
    assert "1.5 / 2" in page and "why the nearest divisors?" in page
    assert "nearest its square root" in page                                 # the rubric
    assert f"Total: {alice.total:g} / {most:g}" in page
    assert "not marked yet (of 2)" in (out / "feedback" / "bob.html").read_text()
    assert "0 / 2<br><i>not written</i>" in (out / "feedback" / "dan.html").read_text()
    assert "nearest its square root" in (out / "report.html").read_text()
    with open(out / "unmarked.csv", newline="") as f:
        todo = list(csv.DictReader(f))
    assert [(r["learner"], r["exercise"], r["task"], r["points"], r["max_points"],
             r["justification"]) for r in todo] == [
        ("bob", NUMPY, JUSTIFIED, "", "2", "Because it fits.")]


def test_marks_that_fit_nobody_are_named_with_what_to_do(tmp_path, toy_course):
    rows, _, found = made_up_class(toy_course)
    path = write_marks(tmp_path / "m.csv", [
        ["alice", NUMPY, JUSTIFIED, "2.5", ""],            # over the rubric's 2
        ["zoe", NUMPY, JUSTIFIED, "1", ""],                # graded nobody of that name
        ["bob", NUMPY, "toy_mean", "1", ""],               # a task without a justification
        ["carol", NUMPY, JUSTIFIED, "1", ""],              # carol handed in no 01_toy
        ["bob", "07", JUSTIFIED, "1", ""],                 # no exercise 07
        ["bob", NUMPY, JUSTIFIED, "1", ""],
        ["bob", NUMPY, JUSTIFIED, "2", ""],                # twice
        ["alice", NUMPY, JUSTIFIED, "", ""]])              # blank: not marked, no problem
    with pytest.raises(MarksError) as e:
        fold(rows, found, read_marks(path))
    said = str(e.value)
    assert said.startswith("6 mark(s) cannot be folded in")
    for line, what in [(2, "whose rubric gives 0 to 2: give a mark within it"),
                       (3, "no learner 'zoe' was graded (graded: alice, bob, carol, dan); use the "
                           "name of their notebook or folder"),
                       (4, f"{NUMPY} asks no justification of 'toy_mean' (it asks for "
                           f"{JUSTIFIED})"),
                       (5, f"carol handed in no {NUMPY}"),
                       (6, "no exercise '07'"),
                       (8, "bob's toy_plan is marked twice (also at m.csv, line 7)")]:
        assert f"m.csv, line {line}: " in said and what in said, (line, said)
    assert [(r.name, v.mark) for r in rows for v in r.verdicts if v.mark_max] == \
        [("alice", None), ("bob", None), ("dan", 0)]                  # nothing folded in
    (tmp_path / "bad.csv").write_text("learner,task,points\nalice,toy_plan,x\n")
    with pytest.raises(MarksError, match="no column exercise"):
        read_marks(tmp_path / "bad.csv")
    (tmp_path / "nan.csv").write_text(f"learner,exercise,task,points\nalice,01,{JUSTIFIED},x\n")
    with pytest.raises(MarksError, match="points 'x' is not a number"):
        read_marks(tmp_path / "nan.csv")


def test_the_command_folds_the_filled_in_unmarked_list_without_grading_again(
        tmp_path, toy_course, capsys):
    rows, columns, found = made_up_class(toy_course)
    out = tmp_path / "out"
    report.write_all(out, rows, columns, 7, found)
    filled = tmp_path / "filled.csv"
    with open(out / "unmarked.csv", newline="") as f, open(filled, "w", newline="") as g:
        table = list(csv.DictReader(f))
        w = csv.DictWriter(g, fieldnames=list(table[0]))
        w.writeheader()
        for r in table:
            w.writerow({**r, "points": "2" if r["learner"] == "alice" else ""})
    args = ["grade", str(tmp_path / "subs"), "--out", str(out), "--course", str(toy_course),
            "--marks", str(filled), "--fold-only"]
    assert main(args) == 0
    said = capsys.readouterr().out
    assert "folded the marks" in said
    assert f"1 justification(s) to mark: fill in points (and a comment) in {out}" in said
    results = json.loads((out / "results.json").read_text())
    assert results["seed"] == 7 and results["exercises"] == [NUMPY, WORKERS]
    totals = {r["learner"]: (r["auto"], r["manual"]) for r in results["learners"]}
    assert totals["alice"] == (rows[0].auto, 2) and totals["bob"] == (0, 0)
    assert (out / "unmarked.csv").read_text().count("\nbob,") == 1   # bob's, still to mark
    # a later file changes one mark and keeps the others
    assert main(args[:-3] + ["--marks", str(write_marks(tmp_path / "b.csv", [
        ["bob", NUMPY, JUSTIFIED, "0.5", "late"]])), "--fold-only"]) == 0
    again = {r["learner"]: r["manual"] for r in
             json.loads((out / "results.json").read_text())["learners"]}
    assert again == {"alice": 2, "bob": 0.5, "carol": 0, "dan": 0}
    assert "to mark" not in capsys.readouterr().out
    assert (out / "unmarked.csv").read_text().count("\n") == 1       # the header alone
    assert main(args[:-3] + ["--marks", str(write_marks(tmp_path / "c.csv", [
        ["bob", NUMPY, JUSTIFIED, "3", ""]])), "--fold-only"]) == 2
    assert "rubric gives 0 to 2" in capsys.readouterr().err


def test_a_justification_is_a_manually_graded_nbgrader_cell_with_its_rubric(toy_course):
    found = rubrics.load(toy_course)
    nb = nbgrader.source_notebook(solution(NUMPY), NUMPY, found)
    cell = next(c for c in nb.cells if "justification" in c.metadata.get("tags", []))
    assert cell.metadata["nbgrader"] == {"grade": True, "solution": True, "locked": False,
                                         "grade_id": f"justify-{JUSTIFIED}", "points": 2.0,
                                         "schema_version": 3}
    assert "The worked justification." in cell.source and "nearest its square root" in cell.source
    # generate_assignment replaces the solution region (answer and rubric) by the text stub
    assert stub_justification(cell.source) == f"Justify your plan.\n{JUSTIFY}"
    with pytest.raises(ValueError, match=rf"\[{NUMPY}.{JUSTIFIED}\] to solutions/rubrics.toml"):
        nbgrader.source_notebook(solution(NUMPY), NUMPY, {})


def test_the_course_export_marks_every_justification_by_hand(tmp_path):
    written = nbgrader.export(ROOT, tmp_path)
    found = rubrics.load(ROOT)
    cells = {}
    for sol, _ in exercise_pairs():
        nb = nbformat.read(tmp_path / "source" / sol.stem / sol.name, as_version=4)
        cells |= {(sol.stem, c.metadata["nbgrader"]["grade_id"]): c for c in nb.cells
                  if c.cell_type == "markdown" and "nbgrader" in c.metadata}
    assert sorted(cells) == sorted((s, f"justify-{t}") for s, t in found)
    for (stem, grade_id), cell in cells.items():
        r = found[(stem, grade_id.removeprefix("justify-"))]
        assert cell.metadata["nbgrader"]["points"] == r.points
        assert stub_justification(cell.source).endswith(JUSTIFY)
    guide = (tmp_path / "rubrics.md").read_text()
    assert tmp_path / "rubrics.md" in written and guide.count("**Full marks") == len(found)
    assert "text_stub" in (tmp_path / "nbgrader_config.py").read_text()

