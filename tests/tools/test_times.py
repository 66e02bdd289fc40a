"""The stated times (issue 35, item 8; ``ddl_lab/tools/times.py``): every lesson's At-a-glance
time and every task heading's "~N min" equal what the tool computes from the notebooks and the
committed measurements (``lessons/timings.json``), and the site's lesson map shows them. Pure and
fast: nothing here executes a notebook."""
import json

import nbformat
import pytest

from ddl_lab.tools import times
from ddl_lab.tools.notebooks import ROOT
from ddl_lab.tools.site import pages

RERUN = "run `python -m ddl_lab times --write` (after `--measure NOTEBOOK` for a changed one)"


@pytest.fixture(scope="module")
def course():
    try:
        return times.course()
    except times.StaleTimings as e:
        pytest.fail(f"the timings no longer match the notebooks: {e}")


def test_every_notebook_was_measured_on_a_stated_machine():
    entries = times.load_timings()
    wanted = {f"{d}/{p.name}" for d in ("lessons", "solutions")
              for p in (ROOT / d).glob("*.ipynb")}
    assert wanted <= set(entries), f"not measured: {sorted(wanted - set(entries))}"
    for key, e in entries.items():
        assert e["machine"]["cores"] >= 1 and len(e["machine"]["load_average"]) == 3, key
        assert e["date"][:2] == "20" and "failed" not in e, key
        assert abs(sum(e["cells"]) - e["seconds"]) < 0.5, key


def test_every_lesson_states_its_computed_time(course):
    for lesson in course:
        assert lesson.stated == lesson.minutes, (
            f"{lesson.name} states about {lesson.stated} min, the tool computes "
            f"{lesson.minutes}: {RERUN}")
        src = "".join(c.source for c in nbformat.read(
            ROOT / "lessons" / f"{lesson.name}.ipynb", as_version=4).cells)
        assert times.glance_sentence(lesson) in src, f"{lesson.name}: its time line drifted: {RERUN}"


def test_every_task_heading_states_its_computed_time(course):
    for lesson in course:
        for t in lesson.tasks:
            assert t.stated == t.minutes, (f"exercise {lesson.name[:2]} task {t.number} states "
                                           f"~{t.stated} min, the tool computes {t.minutes}: {RERUN}")


def test_every_exercise_has_its_tasks_and_every_task_work_to_do(course):
    for lesson in course:
        if (ROOT / "solutions" / f"{lesson.name}.ipynb").exists():
            assert [t.number for t in lesson.tasks] == list(range(1, len(lesson.tasks) + 1))
            for t in lesson.tasks:
                assert t.read_words > 20 and (t.lines or t.justify_words or t.run_s), (lesson.name, t)


def test_the_site_map_shows_the_stated_times(course):
    for lesson in course:
        entry = pages.describe(ROOT, lesson.name)
        assert entry.stated, f"{lesson.name}: the site estimates instead of reading its time"
        assert (entry.minutes, entry.exercise_min) == (lesson.minutes,
                                                         lesson.exercise_minutes), lesson.name


# -- the rule itself, on notebooks made here ------------------------------------------------

def _md(src, tags=()):
    return nbformat.v4.new_markdown_cell(src, metadata={"tags": list(tags)} if tags else {})


def _code(src, tags=()):
    return nbformat.v4.new_code_cell(src, metadata={"tags": list(tags)} if tags else {})


def test_a_task_counts_its_prompt_the_section_it_points_to_its_lines_and_its_runs():
    lesson = nbformat.v4.new_notebook(cells=[
        _md("# 99 · A lesson"), _md("## 1 · First\n" + "word " * 400), _code("x = 1"),
        _md("## 2 · Second\n" + "word " * 1000), _md("## Summary\n" + "word " * 50)])
    sol = nbformat.v4.new_notebook(cells=[
        _md("# Exercise 99"), _code("import numpy"),
        _md("## Task 1 · Something  (warm-up · difficulty ★★☆ · ~5 min)\nAs §1 says, do it."),
        _code("def f(x):\n    ### BEGIN SOLUTION\n    # a comment\n    y = x\n\n"
              "    return y\n    ### END SOLUTION"),
        _code("check.f(f)", ["check"]), _code("print(42)", ["solution-only"]),
        _md("Why?\n<!-- BEGIN SOLUTION -->\n" + "because " * 40 + "\n<!-- END SOLUTION -->",
            ["justification"]),
        _md("## Task 2 · More  (difficulty ★★★ · ~5 min)\nlesson 99 §2 and lesson 98's §7"),
        _code("def g():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION")])
    secs = times.sections(lesson)
    assert secs[1] == 400 + 4 + 3 and 2 in secs and 0 not in secs
    one, two = times.tasks(sol, "99", [1.0, 2.0, 3.0, 4.0, 5.0], {"99": secs})
    assert (one.number, one.stars, one.stated, one.lines, one.justify_words) == (1, 2, 5, 2, 40)
    assert one.run_s == 2.0 + 3.0                # not the set-up cell, not the solution-only one
    assert one.read_words > secs[1] and two.read_words > secs[2]
    assert one.minutes == times.round5(one.read_words / 200 + 2 + 40 / 20 + 10 / 60 + 10)
    assert two.stars == 3 and two.lines == 1 and two.run_s == 5.0


def test_rounding_to_five_minutes():
    assert [times.round5(x) for x in (0.2, 7.4, 7.5, 12.6, 61)] == [5, 5, 10, 15, 60]


def test_a_notebook_whose_code_changed_since_its_measurement_is_stale():
    nb = nbformat.v4.new_notebook(cells=[_code("a"), _code("b")])
    entry = {"cells": [1.0], "seconds": 1.0}
    with pytest.raises(times.StaleTimings, match="1 cells measured, 2 now"):
        times.run_seconds(nb, "lessons/x.ipynb", {"lessons/x.ipynb": entry})
    with pytest.raises(times.StaleTimings, match="not measured"):
        times.run_seconds(nb, "lessons/x.ipynb", {})
    entry = {"cells": [1.0, 2.0], "code": times.code_hash(nb)}
    assert times.run_seconds(nb, "k", {"k": entry}) == [1.0, 2.0]
    nb.cells[1].source = "b + 1"
    with pytest.raises(times.StaleTimings, match="its code changed"):
        times.run_seconds(nb, "k", {"k": entry})


def test_cell_seconds_reads_nbclients_timestamps():
    nb = nbformat.v4.new_notebook(cells=[_code("a"), _md("m"), _code("b")])
    nb.cells[0].metadata["execution"] = {"iopub.execute_input": "2026-01-01T10:00:00.000000Z",
                                         "shell.execute_reply": "2026-01-01T10:00:02.500000Z"}
    assert times.cell_seconds(nb) == [2.5, 0.0]


def test_write_changes_only_the_time_lines(tmp_path, course):
    for d in ("lessons", "solutions"):
        (tmp_path / d).mkdir()
    lesson = course[1]
    for d in ("lessons", "solutions"):
        src = ROOT / d / f"{lesson.name}.ipynb"
        (tmp_path / d / src.name).write_text(src.read_text())
    stale = times.Lesson(lesson.name, lesson.read_words + 4000, lesson.run_s, lesson.controls,
                         lesson.asks, lesson.stated, lesson.tasks[:1] + tuple(
                             times.Task(t.number, t.stars, t.stated, t.read_words, t.lines + 30,
                                        t.justify_words, t.run_s) for t in lesson.tasks[1:]))
    changed = times.write(tmp_path, [stale])
    assert len(changed) == 2
    for path in changed:
        before = (ROOT / path.parent.name / path.name).read_text().splitlines()
        after = path.read_text().splitlines()
        diff = [(a, b) for a, b in zip(before, after) if a != b]
        assert len(before) == len(after) and diff
        assert all("Estimated time" in a or "## Task" in a for a, _ in diff), diff
    assert json.loads(changed[0].read_text())["cells"]


@pytest.mark.slow
def test_measure_records_each_cells_wall_time_from_a_real_kernel(tmp_path):
    """One real headless run of a two-cell notebook made here (no lesson is executed)."""
    (tmp_path / "lessons").mkdir()
    path = tmp_path / "lessons" / "99_x.ipynb"
    nb = nbformat.v4.new_notebook(cells=[_code("import time\ntime.sleep(0.3)"), _md("m"),
                                         _code("x = 1")])
    nbformat.write(nb, path)
    timings = tmp_path / "timings.json"
    times.measure([path], timings)
    entry = json.loads(timings.read_text())["notebooks"]["lessons/99_x.ipynb"]
    assert len(entry["cells"]) == 2 and entry["cells"][0] >= 0.3 and "failed" not in entry
    assert entry["code"] == times.code_hash(nb) and entry["machine"]["cores"] >= 1
    assert times.run_seconds(nbformat.read(path, as_version=4), "lessons/99_x.ipynb",
                             json.loads(timings.read_text())["notebooks"]) == entry["cells"]
