"""How a check reads what the learner's function returned, one rule per kind of answer
(CONTRIBUTING.md, "Checks"): ``scalar``, ``whole``, ``pair``; declared constraints ``Real``
and ``Whole`` read by ``answer`` in one wording; ``two_numbers``, ``arrays``; a design task's
``plan``, ``plan_call`` (a plan must be a function of its inputs), ``same_for_all`` and
``drawn`` (issue 26)."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ._core import fail, stub_message
from ._diagnose import describe_value, returned_arrays, returned_none, tolerance

FUNCTION_OF_INPUTS = ("a plan must be a function of its inputs, computed from the budgets and "
                      "targets it is given, not looked up in a table of the prompt's cases")


def scalar(x: Any) -> float | None:
    """One real number (an int, a float, a numpy number, a one-element array or tensor; nan
    and ±inf too) as a float; None for anything else (a bool, a string, a list, many elements)."""
    if x is None or isinstance(x, (bool, np.bool_, str, bytes, list, tuple, dict)):
        return None
    size = getattr(x, "numel", None) or getattr(x, "size", None)
    n = size() if callable(size) else size
    if n not in (None, 1) or str(getattr(x, "dtype", "")) in ("bool", "torch.bool"):
        return None
    try:
        return float(x.reshape(()) if n == 1 and getattr(x, "ndim", 0) else x)
    except (TypeError, ValueError, RuntimeError, AttributeError):
        return None


def whole(x: Any) -> int | None:
    """A scalar that is a whole number, as an int, or None."""
    v = scalar(x)
    return int(v) if v is not None and math.isfinite(v) and v.is_integer() else None


def pair(x: Any) -> tuple[float, float] | None:
    """Two scalars as floats, or None."""
    if getattr(x, "shape", None) is not None and tuple(x.shape) == (2,):
        x = (x[0], x[1])
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        return None
    a, b = scalar(x[0]), scalar(x[1])
    return None if a is None or b is None else (a, b)


@dataclass(frozen=True)
class Real:
    """A one-number answer in an interval (``closed``: "both", "left", "right", "neither"),
    read as a float; ``what`` names it ("the seconds", "the rate")."""
    lo: float = -math.inf
    hi: float = math.inf
    closed: str = "both"
    what: str = "a number"

    def read(self, x: Any) -> float | None:
        v = scalar(x)                   # nan holds in no interval
        return v if v is not None and self.holds(v) else None

    def holds(self, v: float) -> bool:
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        return (v >= self.lo if left else v > self.lo) and (v <= self.hi if right else v < self.hi)

    def __str__(self) -> str:
        left, right = self.closed in ("both", "left"), self.closed in ("both", "right")
        if (self.lo, self.hi) == (-math.inf, math.inf):
            return self.what
        if self.hi == math.inf:
            return f"{self.what} {'≥' if left else '>'} {self.lo:g}"
        if self.lo == -math.inf:
            return f"{self.what} {'≤' if right else '<'} {self.hi:g}"
        return (f"{self.what} in {'[' if left else '('}{self.lo:g}, "
                f"{self.hi:g}{']' if right else ')'}")


@dataclass(frozen=True)
class Whole(Real):
    """A whole-number answer from ``lo`` to ``hi`` (3, 3.0, ``np.int64(3)``, ``tensor(3.)``),
    read as an int."""
    what: str = "a whole number"

    def read(self, x: Any) -> int | None:      # type: ignore[override]
        v = whole(x)
        return v if v is not None and self.holds(v) else None

    def __str__(self) -> str:
        if self.lo == -math.inf or self.hi == math.inf:
            return super().__str__()
        return f"{self.what} from {self.lo:g} to {self.hi:g}"


def answer(got: Any, rule: Real, name: str, call: str, case: Any = None) -> Any:
    """``rule.read(got)``, or the check fails saying what came back (``call`` names the call,
    ``case`` the case): one wording for every one-number answer."""
    value = rule.read(got)
    if value is None:
        where = f" ({case})" if case is not None else ""
        fail(returned_none(got, name, str(rule)) or
             f"{call} returned {describe_value(got)}{where}; return {rule}.")
    return value


def answer_rtol(got: Any) -> float:
    """1e-6, or the tolerance of the learner's dtype if looser (a float32 pair): the raw
    answer's dtype sets it, before ``two_numbers`` makes Python floats of it."""
    return max(1e-6, tolerance(*(got if isinstance(got, (tuple, list)) else [got])))


def two_numbers(got: Any, names: tuple[str, str], name: str, case: Any) -> tuple[float, float]:
    """The learner's pair of finite numbers (as ``pair`` reads it), or a CheckFailed saying
    what came back instead (lessons 01 and 02's reasoning tasks)."""
    both = pair(got)
    if both is not None and all(math.isfinite(v) for v in both):
        return both
    if isinstance(got, np.ndarray) and got.shape == (2,):
        got = tuple(got)
    arrays(got, names, name, f" [{case}]")
    fail(f"{name} returned {describe_value(got)}; return two finite numbers "
         f"({', '.join(names)}) [{case}].")


def arrays(out: Any, names: tuple[str, ...], name: str, tail: str = "") -> list[np.ndarray]:
    """The learner's tuple of arrays (``returned_arrays``), or a CheckFailed saying what came
    back instead, ``tail`` after it."""
    parts = returned_arrays(out, names, name)
    if isinstance(parts, str):
        fail(parts + tail)
    return parts


def plan(out: Any, name: str, keys: dict[str, str], where: str = "") -> str | None:
    """Design tasks: the message for a plan that is not a dict holding every key of ``keys``
    (key -> what it means, or ""), else None."""
    if isinstance(out, dict) and set(keys) <= set(out):
        return None
    parts = [f"{k} ({what})" if what else k for k, what in keys.items()]
    listed = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    return returned_none(out, name, f"a dict with {listed}",
                         f"a dict with the keys {listed}{where}.")


def plan_call(fn: Any, args: Sequence[Any] | Mapping[str, Any], name: str, where: str,
              unseen: bool = True) -> Any:
    """Design tasks: ``fn(*args)`` (a mapping's values, in order) on budgets named ``where``;
    the stub fails as not implemented. A crash fails, and for ``unseen`` budgets (the prompt
    never shows them) so does None, saying that a plan must be a function of its inputs — as
    a LookupError (a looked-up table's miss) always does."""
    __tracebackhide__ = True
    values = list(args.values()) if isinstance(args, Mapping) else list(args)
    unshown = f" for {where} — budgets the prompt never showed: {FUNCTION_OF_INPUTS}."
    try:
        out = fn(*values)
    except NotImplementedError:
        message = stub_message(fn)
    except Exception as e:          # a LookupError: a table's miss, wherever it happens
        table = f": {FUNCTION_OF_INPUTS}" if isinstance(e, LookupError) else ""
        message = f"{name} raised {type(e).__name__}: {e}" + (unshown if unseen else
                                                              f" for {where}{table}.")
    else:
        if out is not None or not unseen:
            return out
        message = f"{name} returned None" + unshown
    fail(message)


def same_for_all(plans: list[Any], what: str = "plan", cases: str = "budgets") -> str:
    """The sentence naming a plan that ignores its inputs: the same answer for all ``plans``
    (several) — '' if they differ."""
    if len(plans) < 2 or any(repr(p) != repr(plans[0]) for p in plans[1:]):
        return ""
    return (f" It returned the same {what}, {plans[0]!r:.60}, for all {len(plans)} {cases} it "
            f"was given: {FUNCTION_OF_INPUTS}.")


def drawn(unseen: bool, plans: list[Any]) -> str:
    """The tail of a design task's failure: budgets the prompt never showed, then
    ``same_for_all(plans)``."""
    return (" These budgets were drawn by the check, not shown in the prompt." if unseen
            else "") + same_for_all(plans)
