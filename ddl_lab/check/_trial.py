"""The one case loop every check uses (CONTRIBUTING.md, "Checks"): ``Trial``."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable

from ddl_lab.runtime.worlds import Outcome, RankFailure, WorldFailed

from ._answers import plan_call
from ._core import CheckFailed, call_local, fail, judge, name_of, passed, run_cases
from ._diagnose import Cases


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

    def call(self, case: Any, *args: Any, where: str | None = None) -> Any:
        """The learner's function on ``args`` here; a crash or the stub fails. An unseen case
        of a design task (``plan=True``) asks a plan (``_answers.plan_call``) named ``where``."""
        __tracebackhide__ = True
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

    def each(self, one: Callable[[Any], None], hint: Callable[[Any], str] = lambda case: ""
             ) -> None:
        """``one(case)`` for every case; a failure is quoted with ``[case]`` and ``hint(case)``;
        the cases passed go to ``right``."""
        for case in self:
            try:
                one(case)
            except CheckFailed as e:
                raise CheckFailed(f"{e} [{case}]{hint(case)}") from None
            self.right.append(case)

    def judge(self, fault: str | None, case: Any = None, quote: str = "[{}]") -> None:
        judge(fault, case, quote)

    def passed(self, detail: str) -> None:
        passed(self.task, detail)
