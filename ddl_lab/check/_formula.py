"""Reasoning tasks whose answer is one number, a function of the problem's parameters
(lessons 04–06): several seeded cases per call, the learner's value against the right one,
and the likely mistake named by the formula that gives the learner's value. The design tasks
of lessons 04–06 ask their plans for budgets the prompt never shows with ``_answers``'s
``plan_call`` and ``same_for_all``, as every design task does."""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from . import _answers as answers
from ._core import call_local, fail
from ._diagnose import Cases, describe_value, only_right_for, returned_none, tolerance

Formula = Callable[..., Any]


def matches(value: float, expected: Any, rel: float = 1e-6) -> bool:
    return expected is not None and math.isclose(value, float(expected), rel_tol=rel,
                                                 abs_tol=1e-18)


def formula_cases(fn: Callable, cases: Cases, args: Sequence[str], want: Formula,
                  mistakes: dict[str, Formula], what: str, hint: str, unit: str = " s",
                  vary: str = "n") -> int:
    """Call ``fn(*case[args])`` for every case and fail at the first value that is not
    ``want(*case[args])``, naming the first of ``mistakes`` (message → the formula a learner
    making it would write; None where it does not apply) that gives the learner's value, or
    else ``hint`` and the cases that were right for another ``vary``. ``what`` names the
    answer (for a function that returns something else). Returns how many cases passed."""
    name = getattr(fn, "__name__", "your function")
    right: list[str] = []
    for case in cases:
        values = [case.params[a] for a in args]
        call = f"{name}({', '.join(f'{a}={_show(v)}' for a, v in zip(args, values))})"
        got = call_local(fn, *values)
        value = answers.scalar(got)
        if value is None or not math.isfinite(value):
            fail(returned_none(got, name, what) or
                 f"{call} returned {describe_value(got)} ({case}); return {what}.")
        expected = float(want(*values))
        rel = max(1e-6, tolerance(got))            # a float32 answer: float32's tolerance
        if matches(value, expected, rel):
            right.append(f"{vary} = {case.params[vary]}")
            continue
        why = next((msg for msg, f in mistakes.items() if matches(value, f(*values), rel)), None)
        if why is None:
            here = f"{vary} = {case.params[vary]}"
            why = hint + only_right_for(sorted(set(right) - {here}), here, vary)
        fail(f"{call} returned {value:.6g}{unit}, expected {expected:.6g}{unit} ({case}): {why}")
    return len(right)


def _show(v: Any) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


