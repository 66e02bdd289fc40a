"""The one case loop every check uses (CONTRIBUTING.md, "Checks"): ``Trial``; and
``formula_cases``, its loop for a one-number answer that is a formula of the case (04–06)."""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Callable

from ddl_lab.runtime.worlds import Outcome, RankFailure, WorldFailed

from ._answers import Real, answer, plan_call
from ._core import call_local, fail, judge, name_of, passed, run_cases
from ._diagnose import Cases, apart, only_right_for, tolerance


class Trial(Sequence):
    """A check's one case loop (CONTRIBUTING.md, "Checks"): the seeded cases (the ``fixed``
    ones the prompt shows, then ``draws`` it does not), the learner's function called here
    (``call``) or on n-rank worlds of the warm cluster (``run``, ``world``), failures that
    name the case, the pass line. A check loops around a judge of (result, case)::

        trial = Trial("ring_cost", my_ring_cost, seed, FIXED, draws=6, draw=_draw)
        for case in trial:
            trial.judge(fault(trial.call(case, *case.params.values()), case))
        trial.passed("matches 2(n−1)·α + 2(n−1)/n·S·β")

    The verdict is recorded once, where the declared check (``task``) ends."""

    def __init__(self, task: str, fn: Callable, seed: int = 0, fixed: Sequence[dict] = (),
                 draws: int = 0, draw: Callable | None = None, *, name: str = "your function",
                 plan: bool = False, timeout: float | None = None,
                 word: Callable[[RankFailure, Any], str] | None = None) -> None:
        self.task, self.fn, self.timeout = task, fn, timeout
        self.name = name_of(fn, name)
        self.shown, self.plan = len(fixed), plan
        self.right: list = []               # the cases passed so far, for "right only for …"
        self.cases = list(Cases(task, seed, fixed, draws=draws, draw=draw))
        self._word = word

    def __len__(self) -> int:
        return len(self.cases)

    def __getitem__(self, i: Any) -> Any:
        return self.cases[i]

    def unseen(self, case: Any) -> bool:
        """True for a drawn case: one the prompt never shows."""
        return case.index >= self.shown

    def call(self, case: Any, *args: Any, where: str | None = None,
             zero_division: str | None = None) -> Any:
        """The learner's function on ``args`` here; a crash or the stub fails, a division by
        zero as ``zero_division`` says if given. An unseen case of a design task
        (``plan=True``) asks a plan (``_answers.plan_call``) named ``where``."""
        __tracebackhide__ = True
        if zero_division is not None:
            try:
                return self.fn(*args)
            except ZeroDivisionError:
                fail(zero_division)
            except Exception:
                pass                    # worded below, as any crash
        if not (self.plan and self.unseen(case)):
            return call_local(self.fn, *args)
        return plan_call(self.fn, args, self.name, where or str(case))

    def run(self, body: Callable, worlds: Sequence[tuple[int, tuple]]) -> list[Outcome]:
        """``body(*args)`` for each ``(n, args)`` on an n-rank world, up to the first that
        fails (its Outcome says how); a failure outside the cases fails the check."""
        try:
            return run_cases(body, worlds, fn=self.fn, timeout=self.timeout)
        except WorldFailed as e:
            fail(self.word(e.failure, None))

    def world(self, body: Callable, n: int, *args: Any, case: Any = None) -> list:
        """One world: the results of ranks 0…n−1; a failure fails the check, worded."""
        return self.results(self.run(body, [(n, args)])[0], case)

    def results(self, outcome: Outcome, case: Any) -> list:
        """The ranks' results of ``case``'s world, or the check fails as its failure."""
        if outcome.failure is not None:
            fail(self.word(outcome.failure, case, outcome.n))
        return outcome.results

    def word(self, failure: RankFailure, case: Any, n: int = 0) -> str:
        """A failure on the workers as the check words it (``word=``; a stub's is its line),
        by default the usual sentence for ``case``'s world size (else ``n``)."""
        if self._word is not None and failure.kind != "stub":
            return self._word(failure, case)
        return failure.message(self.name, case.params["n"] if case is not None else n)

    def judge(self, fault: str | None, case: Any = None, quote: str = "[{}]") -> None:
        judge(fault, case, quote)

    def passed(self, detail: str) -> None:
        passed(self.task, detail)


Formula = Callable[..., Any]


def matches(value: float, expected: Any, rel: float = 1e-6) -> bool:
    return expected is not None and math.isclose(value, float(expected), rel_tol=rel, abs_tol=1e-18)


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
        got = trial.call(case, *values, zero_division=zero_division and
                         f"{call} divided by zero ({case}): {zero_division}")
        value = answer(got, Real(closed="neither", what=what), name, call, case)
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
