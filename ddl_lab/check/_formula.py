"""Reasoning tasks whose answer is one number, a function of the problem's parameters
(lessons 04–06): a ``Trial``'s cases, the learner's value against the right one, and the
likely mistake named by the formula that gives the learner's value."""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

from . import _answers as answers
from ._core import fail
from ._trial import Trial
from ._diagnose import apart, only_right_for, tolerance

Formula = Callable[..., Any]


def matches(value: float, expected: Any, rel: float = 1e-6) -> bool:
    return expected is not None and math.isclose(value, float(expected), rel_tol=rel,
                                                 abs_tol=1e-18)


def formula_cases(trial: Trial, args: Sequence[str], want: Formula,
                  mistakes: dict[str, Formula], what: str, hint: str, unit: str = " s",
                  vary: str = "n", guess: Callable[[float, list], str | None] | None = None,
                  zero_division: str | None = None) -> None:
    """Fail at the first case of ``trial`` where the learner's function on ``case[args]`` is
    not ``want(*case[args])``, naming the first of ``mistakes`` (message → the formula a
    learner making it would write, or None) that gives its value, else ``guess(value,
    values)``, else ``hint`` (these two with the cases right for another ``vary``). ``what``
    names the answer; ``zero_division`` words a division by zero."""
    name = trial.name
    right: list[str] = []
    for case in trial:
        values = [case.params[a] for a in args]
        texts = (f"{v:.3g}" if isinstance(v, float) else str(v) for v in values)
        call = f"{name}({', '.join(f'{a}={v}' for a, v in zip(args, texts))})"
        if zero_division is not None:
            try:
                got = trial.fn(*values)
            except ZeroDivisionError:
                fail(f"{call} divided by zero ({case}): {zero_division}")
            except Exception:
                got = trial.call(case, *values)
        else:
            got = trial.call(case, *values)
        value = answers.answer(got, answers.Real(closed="neither", what=what), name, call, case)
        expected = float(want(*values))
        rel = max(1e-6, tolerance(got))            # a float32 answer: float32's tolerance
        here = f"{vary} = {case.params[vary]}"
        if matches(value, expected, rel):
            right.append(here)
            continue
        others = only_right_for(sorted(set(right) - {here}), here, vary)
        why = next((msg for msg, f in mistakes.items() if matches(value, f(*values), rel)), None)
        if why is None and guess is not None and (why := guess(value, values)):
            why += others
        why = why or hint + others
        shown, wanted = apart(value, expected)
        fail(f"{call} returned {shown}{unit}, expected {wanted}{unit} ({case}): "
             + (why if why[-1] in ".?!" else why + "."))
