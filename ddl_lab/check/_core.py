"""What every check shares: the failure type, the pass line, running learner code."""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence, TypeVar

from ddl_lab.runtime import worlds
from ddl_lab.runtime.patience import patience
from ddl_lab.runtime.worlds import Outcome, RankFailure, WorldFailed

from . import _record

DEFAULT_TIMEOUT = 20.0 * patience()   # seconds a check waits for the learner's code (workers)
# Set by the grading judge (``tools/grading/judge.py``) to run where the learner's function
# lives, the sandboxed kernel: ``route(body, cases, fn, timeout)`` gives the cases' Outcomes,
# ``beside(procedure, args, kwargs)`` gives ``(True, result)``; None, ``(False, None)``: here.
route: Callable[..., list[Outcome] | None] | None = None
beside: Callable[..., tuple[bool, Any]] | None = None
Check = TypeVar("Check", bound=Callable[..., None])


class CheckFailed(AssertionError):
    """A graded check did not pass; the message says what is wrong and where. Raising it
    records nothing: the declared check (``task``) records its verdict, once, with the
    ``figures`` of a measured run if the check gave any (lesson 15)."""

    figures: dict | None = None

    def _render_traceback_(self) -> list[str]:      # IPython: show the message, not a wall
        return [f"\x1b[31mCheckFailed\x1b[0m: {self}"]


def passed(task: str, detail: str, figures: dict | None = None) -> None:
    print(f"✔ {task}: passed — {detail}")
    _record.write(task, True, detail, figures=figures)


def fail(message: str, figures: dict | None = None) -> None:
    __tracebackhide__ = True
    error = CheckFailed(message)
    error.figures = figures
    raise error


def judge(fault: str | None, case: Any = None, quote: str = "[{}]") -> None:
    """Fail with a judge's ``fault``, quoting ``case`` after it as ``quote`` does, unless it
    is None."""
    __tracebackhide__ = True
    if fault:
        fail(fault if case is None else f"{fault} " + quote.format(case))


def stub_message(fn: Callable) -> str:
    return (f"{name_of(fn)} is not implemented yet: replace the `raise NotImplementedError` "
            "line with your code, run that cell, then run this check again.")


def call_local(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call learner code in this process; a stub or a crash becomes a CheckFailed."""
    __tracebackhide__ = True
    try:
        return fn(*args, **kwargs)
    except NotImplementedError:
        message = stub_message(fn)
    except Exception as e:
        message = f"{name_of(fn)} raised {type(e).__name__}: {e}"
    # raised outside the except block: no __context__ keeps the learner's frames alive
    raise CheckFailed(message)


def run_beside(procedure: Callable, *args: Any, **kwargs: Any) -> Any:
    """``procedure(*args, **kwargs)`` where the learner's code runs (here, or in the sandbox
    when grading): a measurement that watches it from inside its process (threads, locks, a
    meter) and whose verdict rests on the learner's side (README, "Grading a class")."""
    __tracebackhide__ = True
    if beside is not None:
        there, result = beside(procedure, args, kwargs)
        if there:
            return result
    return procedure(*args, **kwargs)


def worded(failure: RankFailure, fn: Callable) -> RankFailure:
    return replace(failure, line=stub_message(fn)) if failure.kind == "stub" else failure


def run_cases(body: Callable, cases: Sequence[tuple[int, tuple]], *, fn: Callable,
              timeout: float | None = None) -> list[Outcome]:
    """``runtime.worlds.run_cases`` for a check: each case on an n-rank world of the warm
    cluster, up to the first that fails; a stub's failure worded for the learner."""
    try:
        outcomes = route and route(body, cases, fn, timeout)
        if outcomes is None:
            outcomes = worlds.run_cases(body, cases, fn=fn, timeout=timeout)
    except WorldFailed as e:
        raise WorldFailed(worded(e.failure, fn)) from None
    return [replace(o, failure=worded(o.failure, fn)) if o.failure else o for o in outcomes]


def on_workers(body: Callable, n: int, *args: Any, fn: Callable | None = None,
               timeout: float | None = None) -> list:
    """The results of ``body(*args)`` on ranks 0…n−1 of an n-rank world; a failure fails the
    check, naming ``fn`` (the learner's function; by default ``body``, the check's own run)."""
    fn = fn or body
    try:
        outcome = run_cases(body, [(n, args)], fn=fn, timeout=timeout)[0]
    except WorldFailed as e:
        outcome = Outcome(n, None, e.failure)
    if outcome.failure is not None:
        failed_on_workers(outcome.failure, fn, n)
    return outcome.results


def failed_on_workers(f: RankFailure, fn: Callable, n: int) -> None:
    """Fail as ``f`` says, in the usual words; an exception with the failing rank's report."""
    __tracebackhide__ = True
    fail(f.message(name_of(fn), n) + (f"\n(full report below)\n\nrank {f.rank} raised "
                                      f"{f.line}\n{f.text}" if f.kind == "raised" else ""))


def name_of(fn: Any, default: str = "your function") -> str:
    """The learner's function as messages name it."""
    return getattr(fn, "__name__", default)


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

    Its verdicts are recorded under its name and lesson (a failure once, by the outermost
    check); a function handed to it that is, or calls, one of those implementations is refused."""
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
                if spec.refuses:
                    from ._diagnose import package_functions, refuse_package_copy
                    banned = package_functions(*spec.refuses)
                    for fn in [*args, *kwargs.values()]:
                        judge(callable(fn) and refuse_package_copy(fn, spec.name, *banned))
                return check(*args, **kwargs)
            except CheckFailed as e:            # the verdict: recorded by the outermost check
                if token is not None:
                    _record.write(spec.name, False, str(e), figures=e.figures)
                raise
            finally:
                _record.leave(token)
        run.task = spec                             # type: ignore[attr-defined]
        return run                                  # type: ignore[return-value]
    return declare
