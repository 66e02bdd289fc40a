"""Every graded check, tested the same way, from the one registry (``check._core.TASKS``), in
the manner of scikit-learn's ``parametrize_with_checks``: the exercise's stub is refused as
not implemented yet; the package's own implementation of the task is refused (the check's
``refuses=`` declaration); and where the learner's function returns numbers in the
notebook, float32 and numpy answers pass. (The solution itself is graded once, under an
instructor's seed: tests/tools/test_solution_notebooks.py.) Each check's tests in ``tests/<slug>/`` keep only
its catalogue of wrong answers and what is particular to it."""
from __future__ import annotations

import functools
import re
from typing import Any, Callable

import nbformat
import numpy as np
import pytest

from ddl_lab import check
from ddl_lab.check import _core, _diagnose, _record
from ddl_lab.check._diagnose import package_functions
from tests.conftest import ROOT, define_cell

STEMS = {p.stem[3:]: p.stem for p in (ROOT / "exercises").glob("[0-9][0-9]_*.ipynb")}


def _calls() -> dict[str, tuple[str, list[str]]]:
    """task → (notebook stem, the learner's functions its check cell hands it)."""
    found = {}
    for stem in STEMS.values():
        nb = nbformat.read(ROOT / "exercises" / f"{stem}.ipynb", as_version=4)
        for c in nb.cells:
            if "check" in c.metadata.get("tags", []):
                for task, args in re.findall(r"\bcheck\.(\w+)\(([^)]*)\)", c.source):
                    found[task] = (stem, [a.strip() for a in args.split(",")])
    return found


CALLS = _calls()
TASKS = sorted(_core.TASKS)
REFUSING = sorted(t for t, spec in _core.TASKS.items() if spec.refuses)


def _defined(folder: str, stem: str, names: list[str]) -> list[Callable]:
    """``names`` as ``<folder>/<stem>.ipynb`` defines them: its first code cell (imports) and
    the untagged cells that define them, run as notebook cells."""
    nb = nbformat.read(ROOT / folder / f"{stem}.ipynb", as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code" and not c.metadata.get("tags")]
    ns, todo = define_cell(code[0].source), list(names)
    while todo:                     # and the learner's functions these call (my_…), if any
        name = todo.pop(0)
        cell = next((c for c in code if f"def {name}(" in c.source or f"class {name}" in
                     c.source), None)
        if name not in ns and cell is not None:
            exec(cell.source, ns)
            todo += [m for m in re.findall(r"\b(my_\w+)\(", cell.source) if m not in ns]
    return [ns[name] for name in names]


def _verdicts(monkeypatch: pytest.MonkeyPatch, seed: int | None) -> list[dict]:
    taken: list[dict] = []
    monkeypatch.setattr(_record, "SINK", None)
    monkeypatch.setattr(_diagnose, "GRADING_SEED", None)
    _record.grade_with(taken.append, seed)
    return taken


def test_every_task_has_a_check_cell():
    assert sorted(CALLS) == TASKS


@pytest.mark.parametrize("task", TASKS)
def test_the_exercise_stub_is_not_implemented_yet(task, monkeypatch):
    stem, names = CALLS[task]
    taken = _verdicts(monkeypatch, None)
    with pytest.raises(check.CheckFailed, match="is not implemented yet"):
        getattr(check, task)(*_defined("exercises", stem, names))
    assert [(v["task"], v["passed"]) for v in taken] == [(task, False)]     # recorded once


@pytest.mark.parametrize("task", REFUSING)
def test_the_package_s_own_implementation_is_refused(task):
    spec = _core.TASKS[task]
    own = package_functions(spec.refuses[0], *spec.refuses[1:])
    assert own, f"{task} refuses {spec.refuses}, which names no function"
    with pytest.raises(check.CheckFailed, match="package's own implementation"):
        getattr(check, task)(*[own[0]] * len(CALLS[task][1]))


class _OnWorkers(Exception):
    """The check started workers: the answer's numbers are not returned in the notebook."""


# answers with no number in them: nothing to convert (skipped before the check starts its
# real run, as tests/scaling_out/test_check_learner_types.py leaves them out)
NO_NUMBERS = {"rendezvous_env": "its answers are strings (the env:// variables)"}


def _returning(kind: str, fn: Callable, converted: list[bool]) -> Callable:
    """``fn`` whose float answers come back as float32 numbers or numpy values."""
    def convert(x: Any) -> Any:
        if isinstance(x, float):
            converted.append(True)
            return np.float32(x) if kind == "float32" else np.float64(x)
        if kind == "numpy" and type(x).__module__.startswith("torch") and hasattr(x, "numpy"):
            converted.append(True)
            return x.detach().cpu().numpy()
        if isinstance(x, (tuple, list)) and x and all(isinstance(v, (float, int)) and
                                                      not isinstance(v, bool) for v in x):
            return type(x)(convert(float(v)) if isinstance(v, float) else v for v in x)
        return x

    @functools.wraps(fn)
    def answer(*args: Any, **kwargs: Any) -> Any:
        return convert(fn(*args, **kwargs))
    return answer


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["float32", "numpy"])
@pytest.mark.parametrize("task", TASKS)
def test_float32_and_numpy_answers_pass(task, kind, monkeypatch):
    from ddl_lab.runtime.cluster import Cluster
    if task in NO_NUMBERS:
        pytest.skip(NO_NUMBERS[task])

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise _OnWorkers
    monkeypatch.setattr(Cluster, "run_with", refuse)
    stem, names = CALLS[task]
    converted: list[bool] = []
    answers = [_returning(kind, fn, converted) for fn in _defined("solutions", stem, names)]
    taken = _verdicts(monkeypatch, None)
    try:
        getattr(check, task)(*answers)
    except _OnWorkers:
        pytest.skip("the check runs the answer on workers")
    if not converted:
        pytest.skip("the answer returns no float in the notebook")
    assert [(v["task"], v["passed"]) for v in taken] == [(task, True)], taken
