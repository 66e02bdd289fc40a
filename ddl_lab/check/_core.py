"""What every check shares: the failure type, the pass line, running learner code."""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence, TypeVar

from ddl_lab.runtime import WorkerError, WorkerTimeout, shared_cluster
from ddl_lab.runtime import worlds
from ddl_lab.runtime.worlds import Outcome, RankFailure, WorldFailed

from . import _record

DEFAULT_TIMEOUT = 20.0      # seconds a check waits for the learner's code on the workers
Check = TypeVar("Check", bound=Callable[..., None])


class CheckFailed(AssertionError):
    """A graded check did not pass; the message says what is wrong and where. Raising it
    records nothing: the declared check (``task``) records its verdict, once."""

    def _render_traceback_(self) -> list[str]:      # IPython: show the message, not a wall
        return [f"\x1b[31mCheckFailed\x1b[0m: {self}"]


def passed(task: str, detail: str) -> None:
    """Print the pass line of a task."""
    print(f"✔ {task}: passed — {detail}")
    _record.write(task, True, detail)


def fail(message: str) -> None:
    __tracebackhide__ = True
    raise CheckFailed(message)


def stub_message(fn: Callable) -> str:
    name = getattr(fn, "__name__", "your function")
    return (f"{name} is not implemented yet: replace the `raise NotImplementedError` "
            "line with your code, run that cell, then run this check again.")


def call_local(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call learner code in this process; a stub or a crash becomes a CheckFailed."""
    __tracebackhide__ = True
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        message = stub_message(fn)
    except Exception as e:
        name = getattr(fn, "__name__", "your function")
        message = f"{name} raised {type(e).__name__}: {e}"
    # raised outside the except block: no __context__ keeps the learner's frames alive
    raise CheckFailed(message)


def run_on_workers(fn: Callable, world_size: int, *args: Any, timeout: float | None = None,
                   learner_fn: Callable | None = None, **kwargs: Any) -> list:
    """Run ``fn`` on a shared cluster of ``world_size`` real workers for a check.

    A stub, an exception, a dead rank or a deadlock becomes a CheckFailed naming the
    rank(s); ``learner_fn`` is the function whose name the message uses.
    """
    __tracebackhide__ = True
    who = learner_fn or fn
    name = getattr(who, "__name__", "your function")
    timeout = timeout or DEFAULT_TIMEOUT
    cluster = shared_cluster(world_size)
    try:
        return cluster.run_with(fn, args, kwargs, timeout=timeout)
    except WorkerTimeout as e:
        ranks = sorted(e.failures)
        slow = bool(e.busy)
        verdict = ("still computing — a loop that never ends, or far more work than the "
                   "task needs" if slow else
                   "probably a deadlock (a recv with no matching send, two ranks both "
                   "waiting to receive first, or a collective not every rank called)")
        where = "".join(f"\n  rank {r}: {e.failures[r].removeprefix('did not answer: ')}"
                        for r in ranks)
        raise CheckFailed(
            f"{name} timed out after {timeout:g} s on {world_size} ranks: rank(s) {ranks} "
            f"never finished — {verdict}. Where each was:{where}") from None
    except WorkerError as e:
        raise worker_failure(e, who, f"on rank {{}} of {world_size}", report=True) from None


def worker_failure(e: WorkerError, fn: Callable, where: str = "on rank {}",
                   report: bool = False) -> CheckFailed:
    """A CheckFailed for learner code that failed on workers: the stub, or the first failing
    worker (``where`` names it, e.g. "in process {} of 2") with its exception's last line."""
    if e.not_implemented:
        return CheckFailed(stub_message(fn))
    first = min(e.failures)
    last_line = e.failures[first].strip().splitlines()[-1] if e.failures[first] else ""
    name = getattr(fn, "__name__", "your function")
    message = f"{name} failed {where.format(first)}: {last_line}"
    return CheckFailed(message + (f"\n(full report below)\n\n{e}" if report else ""))


def worded(failure: RankFailure, fn: Callable) -> RankFailure:
    """``failure`` as a check words it: a stub's line is ``stub_message(fn)``."""
    return replace(failure, line=stub_message(fn)) if failure.kind == "stub" else failure


def run_cases(body: Callable, cases: Sequence[tuple[int, tuple]], *, fn: Callable,
              timeout: float | None = None) -> list[Outcome]:
    """``runtime.worlds.run_cases`` for a check: each case on an n-rank world of the warm
    cluster, up to the first that fails; a stub's failure worded for the learner."""
    try:
        outcomes = worlds.run_cases(body, cases, fn=fn, timeout=timeout)
    except WorldFailed as e:
        raise WorldFailed(worded(e.failure, fn)) from None
    return [replace(o, failure=worded(o.failure, fn)) if o.failure else o for o in outcomes]


def run_in_world(body: Callable, n: int, *args: Any, fn: Callable,
                 timeout: float | None = None) -> list:
    """One case on an n-rank world: the results of ranks 0…n−1; a failure raises
    ``WorldFailed`` (a stub's worded for the learner)."""
    try:
        return worlds.run_in_world(body, n, *args, fn=fn, timeout=timeout)
    except WorldFailed as e:
        raise WorldFailed(worded(e.failure, fn)) from None


def name_of(fn: Any, default: str = "your function") -> str:
    """The learner's function as messages name it."""
    return getattr(fn, "__name__", default)


class Trial:
    """A check's one case loop (CONTRIBUTING.md, "Checks"). It draws the seeded cases — the
    fixed ones the prompt shows, then ``draws`` drawn ones it does not (``_diagnose.Cases``)
    — calls the learner's function on them here (``call``: a plan for an unseen case, as
    ``_answers.plan_call`` asks it) or on n-rank worlds of the one warm cluster (``run``,
    ``world``), fails naming the case, and says the pass line. A check is a loop around a
    judge of (result, case) that returns a fault or None::

        trial = Trial("ring_cost", my_ring_cost, seed, FIXED, draws=6, draw=_draw)
        for case in trial:
            trial.judge(fault(trial.call(case, *case.params.values()), case))
        trial.passed("matches 2(n−1)·α + 2(n−1)/n·S·β")

    The verdict is recorded once, where the declared check (``task``) ends."""

    def __init__(self, task: str, fn: Callable, seed: int = 0, fixed: Sequence[dict] = (),
                 draws: int = 0, draw: Callable | None = None, *, name: str = "your function",
                 plan: bool = False, timeout: float | None = None,
                 word: Callable[[RankFailure, Any], str] | None = None) -> None:
        from ._diagnose import Cases
        self.task, self.fn, self.timeout = task, fn, timeout
        self.name = name_of(fn, name)
        self.shown, self.plan = len(fixed), plan
        self.right: list = []               # the cases passed so far, for "right only for …"
        self.cases = list(Cases(task, seed, fixed, draws=draws, draw=draw))
        self._word = word

    def __iter__(self) -> Iterator[Any]:
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    def unseen(self, case: Any) -> bool:
        """True for a drawn case: one the prompt never shows."""
        return case.index >= self.shown

    def call(self, case: Any, *args: Any, where: str | None = None) -> Any:
        """The learner's function on ``args`` in this process: a crash or the stub fails. A
        design task's (``plan=True``) answer to an unseen case is a plan's
        (``_answers.plan_call``), and ``where`` (the call, by default the case) names it."""
        __tracebackhide__ = True
        if not (self.plan and self.unseen(case)):
            return call_local(self.fn, *args)
        from ._answers import plan_call
        return plan_call(self.fn, args, self.name, where or str(case))

    def run(self, body: Callable, worlds: Sequence[tuple[int, tuple]]) -> list[Outcome]:
        """``body(*args)`` for each ``(n, args)`` on an n-rank world of the warm cluster, up
        to the first that fails (its Outcome says how); a failure outside the cases fails
        the check at once."""
        __tracebackhide__ = True
        try:
            return run_cases(body, worlds, fn=self.fn, timeout=self.timeout)
        except WorldFailed as e:
            fail(self.word(e.failure, None))

    def world(self, body: Callable, n: int, *args: Any, case: Any = None) -> list:
        """One world: the results of ranks 0…n−1; a failure fails the check, worded."""
        __tracebackhide__ = True
        return self.results(self.run(body, [(n, args)])[0], case)

    def results(self, outcome: Outcome, case: Any) -> list:
        """The ranks' results of ``case``'s world, or the check fails as its failure."""
        __tracebackhide__ = True
        if outcome.failure is not None:
            fail(self.word(outcome.failure, case, outcome.n))
        return outcome.results

    def word(self, failure: RankFailure, case: Any, n: int = 0) -> str:
        """A failure on the workers as the check words it (``word=``), by default the usual
        sentence for ``case``'s world size (else ``n``)."""
        if self._word is not None:
            return self._word(failure, case)
        return failure.message(self.name, case.params["n"] if case is not None else n)

    def each(self, one: Callable[[Any], None], hint: Callable[[Any], str] = lambda case: ""
             ) -> None:
        """``one(case)`` for every case (it fails as a judge does); a failure is quoted with
        its case, ``[case]``, and ``hint(case)``; the cases passed go to ``right``."""
        __tracebackhide__ = True
        for case in self:
            try:
                one(case)
            except CheckFailed as e:
                raise CheckFailed(f"{e} [{case}]{hint(case)}") from None
            self.right.append(case)

    def judge(self, fault: str | None) -> None:
        """Fail with ``fault``, a judge's message, unless it is None."""
        __tracebackhide__ = True
        if fault:
            fail(fault)

    def passed(self, detail: str) -> None:
        passed(self.task, detail)


@dataclass(frozen=True)
class Task:
    """A graded task as its check declares it: the task's name (the check's), the lesson's
    slug, and the package's own implementations it refuses (a package, then names)."""
    name: str
    lesson: str
    refuses: tuple[str, ...] = ()


TASKS: dict[str, Task] = {}


def task(lesson: str, refuses: tuple[str, ...] = ()) -> Callable[[Check], Check]:
    """Declare a graded check (CONTRIBUTING.md, "Checks"): ``@task("ring_allreduce",
    refuses=("ddl_lab.ring_allreduce", "ring_allreduce"))`` above ``def ring_allreduce``.

    While it runs, its verdicts are recorded under its name and lesson (a failure once, as it
    leaves the outermost check); every function the learner hands it is first refused if it
    is, or calls, one of the named implementations."""
    def declare(check: Check) -> Check:
        spec = Task(check.__name__, lesson, tuple(refuses))
        if spec.name in TASKS:
            raise ImportError(f"task {spec.name!r} is declared twice: rename one")
        TASKS[spec.name] = spec

        @functools.wraps(check)
        def run(*args: Any, **kwargs: Any) -> None:
            __tracebackhide__ = True
            token = _record.enter(spec.name, spec.lesson)
            try:
                _refuse_answers(spec, [*args, *kwargs.values()])
                return check(*args, **kwargs)
            except CheckFailed as e:            # the verdict: recorded by the outermost check
                if token is not None:
                    _record.failed(str(e))
                raise
            finally:
                _record.leave(token)
        run.task = spec                             # type: ignore[attr-defined]
        return run                                  # type: ignore[return-value]
    return declare


def _refuse_answers(spec: Task, given: list[Any]) -> None:
    __tracebackhide__ = True
    if not spec.refuses:
        return
    from ._diagnose import package_functions, refuse_package_copy
    banned = package_functions(spec.refuses[0], *spec.refuses[1:])
    for fn in given:
        message = callable(fn) and refuse_package_copy(fn, spec.name, *banned)
        if message:
            fail(message)
