"""Every graded check is declared once (``check._core.task``): its name, its lesson, what it
refuses; the recording knows the running task from the declaration, not from the stack."""
from __future__ import annotations


import pytest

from ddl_lab import check
from ddl_lab.check import _core, _record


def test_every_exported_check_is_declared_under_its_own_lesson():
    """The namespace is written out in check/__init__.py: every declared task is listed there
    once, under the module of its own lesson, and no lesson module exports a name another
    one exports (or one that is not a declared task)."""
    import importlib
    exported = [n for n in check.__all__ if n != "CheckFailed"]
    assert len(exported) == len(set(exported)) == len(_core.TASKS) == 64
    assert set(exported) == set(_core.TASKS)
    owner: dict[str, str] = {}
    for lesson in {t.lesson for t in _core.TASKS.values()}:
        for name in importlib.import_module(f"ddl_lab.check.{lesson}").__all__:
            assert name not in owner, f"{name} is exported by check/{owner[name]}.py and {lesson}.py"
            owner[name] = lesson
    for name in exported:
        declared = getattr(check, name).task
        assert declared is _core.TASKS[name] and declared.name == name
        assert owner[name] == declared.lesson, f"check {name} is not declared under its lesson"


def test_every_check_module_is_listed_in_the_namespace():
    """A lesson's check module that check/__init__.py does not import would declare no task:
    every public module of check/ is some task's lesson, and all it exports is listed."""
    from pathlib import Path
    lessons = {t.lesson for t in _core.TASKS.values()}
    modules = {p.stem for p in Path(check.__file__).parent.glob("[!_]*.py")}
    assert modules == lessons


def test_a_task_declared_twice_is_refused():
    def rank(my_rank):
        """A second check named like lesson 00's."""
    with pytest.raises(ImportError, match="task 'rank' is declared twice"):
        _core.task("welcome")(rank)


@pytest.fixture
def record(monkeypatch):
    taken: list[dict] = []
    monkeypatch.setattr(_record, "SINK", taken.append)      # the grading judge's recorder
    return lambda: list(taken)


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
    from ddl_lab.data_parallel.engine import average_params
    with pytest.raises(check.CheckFailed, match="package's own implementation"):
        check.local_sgd(average_params)


def test_a_check_that_rewords_a_failure_records_it_once(record):
    """sync_plan catches a plan's failure and raises it again with more said: one record."""
    def my_sync_plan(steps, max_allreduces):          # right for the prompt's budgets only
        shown = (steps, max_allreduces) in [(96, 8), (100, 6), (60, 3)]
        return steps // max_allreduces + 1 if shown else "every step"
    with pytest.raises(check.CheckFailed, match="That budget is not one the prompt shows"):
        check.sync_plan(my_sync_plan)
    assert [(r["task"], r["passed"]) for r in record()] == [("sync_plan", False)]
