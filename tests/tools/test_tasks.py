"""Every graded check is declared once (``check._core.task``): its name, its lesson, what it
refuses; the recording knows the running task from the declaration, not from the stack."""
from __future__ import annotations

import json

import pytest

from ddl_lab import check
from ddl_lab.check import _core, _record


def test_every_exported_check_is_declared_under_its_own_lesson():
    exported = [n for n in check.__all__ if n != "CheckFailed"]
    assert len(exported) == len(_core.TASKS) == 64
    for name in exported:
        declared = getattr(check, name).task
        assert declared.name == name
        assert name in __import__(f"ddl_lab.check.{declared.lesson}",
                                  fromlist=["__all__"]).__all__


def test_a_task_declared_twice_is_refused():
    def rank(my_rank):
        """A second check named like lesson 00's."""
    with pytest.raises(ImportError, match="task 'rank' is declared twice"):
        _core.task("welcome")(rank)


@pytest.fixture
def record(tmp_path, monkeypatch):
    path = tmp_path / "record.jsonl"
    monkeypatch.setenv(_record.ENV, str(path))
    return lambda: [json.loads(line) for line in path.read_text().splitlines()]


def test_a_failure_is_recorded_under_the_declared_task_and_lesson(record):
    def my_darts_per_rank(tol, workers):
        raise NotImplementedError
    with pytest.raises(check.CheckFailed):
        check.darts_per_rank(my_darts_per_rank)
    assert [(r["task"], r["passed"]) for r in record()] == [("darts_per_rank", False)]
    assert _record.current_task() is None                # nothing is running any more


def test_a_check_called_by_another_records_the_outer_one(record):
    @_core.task("welcome")
    def outer_probe(my_fn):
        check.darts_per_rank(my_fn)
    try:
        def my_darts_per_rank(tol, workers):
            raise NotImplementedError
        with pytest.raises(check.CheckFailed):
            outer_probe(my_darts_per_rank)
    finally:
        del _core.TASKS["outer_probe"]
    assert [r["task"] for r in record()] == ["outer_probe"]


def test_a_declared_refusal_runs_before_the_check():
    from ddl_lab.welcome import sum_of_ranks
    with pytest.raises(check.CheckFailed, match="package's own implementation"):
        check.sum_of_ranks(sum_of_ranks)
