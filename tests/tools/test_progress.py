"""The learner's own progress: checks record verdicts locally; `ddl-lab progress` and
lesson 00 show every task as passed / failed / not tried."""
import inspect
import json
import subprocess
import sys

import pytest

from ddl_lab import check
from ddl_lab.check import _record
from ddl_lab.check import CheckFailed
from ddl_lab.tools.progress import course_tasks, progress_table, read_progress


def my_ring_cost(n, nbytes, alpha, beta):
    return 2 * (n - 1) * alpha + 2 * (n - 1) / n * nbytes * beta


def wrong_ring_cost(n, nbytes, alpha, beta):
    return 2 * (n - 1) * alpha + nbytes * beta


@pytest.fixture
def progress(tmp_path, monkeypatch):
    path = tmp_path / "progress.jsonl"
    monkeypatch.setenv("DDL_LAB_PROGRESS", str(path))
    return path


def test_every_lesson_with_checks_is_listed_in_lesson_order():
    tasks = course_tasks()
    assert list(tasks)[:2] == ["welcome", "gradient_descent"]
    assert "ring_cost" in tasks["ring_allreduce"]


def test_a_check_records_its_verdict_and_the_latest_one_counts(progress):
    with pytest.raises(CheckFailed):
        check.ring_cost(wrong_ring_cost)
    assert read_progress(progress)[("ring_allreduce", "ring_cost")].state == "failed"
    check.ring_cost(my_ring_cost)
    seen = read_progress(progress)
    assert seen[("ring_allreduce", "ring_cost")].state == "passed"
    lines = [json.loads(x) for x in progress.read_text().splitlines()]
    assert [x["passed"] for x in lines] == [False, True]


def test_the_table_marks_passed_failed_and_not_tried(progress):
    check.ring_cost(my_ring_cost)
    table = progress_table(progress)
    assert "✔ ring_cost" in table and "· ring_allreduce" in table
    total = sum(map(len, course_tasks().values()))
    assert f"1/{total} tasks passed" in table


def test_grading_runs_and_off_write_no_progress(progress, monkeypatch):
    taken = []
    monkeypatch.setattr(_record, "SINK", taken.append)   # the grading judge's recorder
    check.ring_cost(my_ring_cost)
    assert not progress.exists() and [e["task"] for e in taken] == ["ring_cost"]
    monkeypatch.setattr(_record, "SINK", None)
    monkeypatch.setenv("DDL_LAB_PROGRESS", "off")
    check.ring_cost(my_ring_cost)
    assert not progress.exists()


def test_a_torn_line_is_skipped(progress):
    progress.write_text('{"lesson": "welcome", "task": "rank", "passed": true}\n{"less')
    assert read_progress(progress)[("welcome", "rank")].state == "passed"


def test_the_cli_prints_the_table(progress):
    check.ring_cost(my_ring_cost)
    out = subprocess.run([sys.executable, "-m", "ddl_lab", "progress", "--file", str(progress)],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "✔ ring_cost" in out.stdout


def _stub(*args, **kwargs):
    raise NotImplementedError("write me")


@pytest.mark.parametrize("task", sorted(set(check.__all__) - {"CheckFailed"}))
def test_every_check_records_its_own_task_and_lesson(task, progress):
    """Entry points that hand over to a private module still record under their own name
    (a record without a task is lost to the progress table and the gradebook)."""
    fn = getattr(check, task)
    needs = [p for p in inspect.signature(fn).parameters.values()
             if p.default is p.empty and p.kind is p.POSITIONAL_OR_KEYWORD]
    with pytest.raises(CheckFailed, match="not implemented"):
        fn(*[_stub] * len(needs))
    lesson = fn.task.lesson                     # the lesson that declares the check
    assert read_progress(progress)[(lesson, task)].state == "failed"
