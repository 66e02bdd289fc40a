"""How a check reads what the learner's function returned: one rule per kind of answer
(CONTRIBUTING.md, "Checks").

- ``scalar(x)``: one real number — a Python int or float, a numpy number, or an array or
  tensor holding exactly one element — as a float (nan and ±inf included: the check judges
  them); None for anything else (a bool, a string, None, a list or tuple, several elements).
- ``whole(x)``: a scalar that is a whole number (3, 3.0, ``np.int64(3)``, ``tensor(3.)``), as
  an int; None otherwise.
- ``pair(x)``: two scalars — a tuple or list of two, or an array or tensor of shape (2,) — as
  two floats; None otherwise.
- ``plan(out, name, keys, where)``: a design task's answer must be a dict holding every key:
  the message saying what came back instead, or None.
- ``call_plan(fn, args, name, where)``: a design task's plan for budgets it draws; a plan
  that raises (a table's KeyError) or returns None for them fails, saying that a plan must be
  a function of its inputs; ``constant(plans)``: the sentence for a plan that came back the
  same for every budget (issue 26, "plans that ignore their inputs").
- ``plan_call(fn, args, name, where, unseen)``: a design task's plan for budgets the check
  drew; a table of the cases it was shown (a LookupError, or None for unseen budgets) is named; ``same_for_all(plans)``: the
  sentence for a plan that returned the same answer whatever its budgets.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._diagnose import describe_value, returned_none

__all__ = ["scalar", "whole", "pair", "plan", "call_plan", "constant", "plan_call", "same_for_all"]

FUNCTION_OF_INPUTS = ("a plan must be a function of its inputs (computed from the budgets "
                      "and targets it is given), not a table of the prompt's cases")


def scalar(x: Any) -> float | None:
    """One real number as a float, or None (the rule above)."""
    if x is None or isinstance(x, (bool, np.bool_, str, bytes, list, tuple, dict)):
        return None
    size = getattr(x, "numel", None) or getattr(x, "size", None)
    n = size() if callable(size) else size
    if n is not None and n != 1:
        return None
    if getattr(x, "dtype", None) is not None and str(x.dtype) in ("bool", "torch.bool"):
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


def plan(out: Any, name: str, keys: dict[str, str], where: str = "") -> str | None:
    """Design tasks: the message for a plan that is not a dict holding every key of ``keys``
    (key -> what it means, or ""), else None."""
    if isinstance(out, dict) and set(keys) <= set(out):
        return None
    parts = [f"{k} ({what})" if what else k for k, what in keys.items()]
    listed = ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]
    return (returned_none(out, name, f"a dict with {listed}") or
            f"{name} returned {describe_value(out)}; return a dict with the keys {listed}{where}.")


def call_plan(fn: Any, args: tuple, name: str, where: str) -> Any:
    """``fn(*args)`` for budgets the check drew (``where`` names them): a stub, an exception
    or None fails, naming the budgets and that a plan must be a function of its inputs."""
    __tracebackhide__ = True
    from ._core import fail, stub_message
    try:
        out = fn(*args)
    except NotImplementedError:
        message = stub_message(fn)
    except Exception as e:
        message = (f"{name} raised {type(e).__name__}: {e} for {where}, budgets the prompt "
                   f"never showed: {FUNCTION_OF_INPUTS}.")
    else:
        if out is not None:
            return out
        message = f"{name} returned None for {where}: {FUNCTION_OF_INPUTS}."
    fail(message)


def constant(plans: list[Any]) -> str:
    """" It returned the same plan … for every budget: …" when all ``plans`` are equal (and
    there are several), else ""."""
    if len(plans) < 2 or any(repr(p) != repr(plans[0]) for p in plans[1:]):
        return ""
    return (f" It returned the same plan, {plans[0]}, for all {len(plans)} budgets it was "
            f"given: {FUNCTION_OF_INPUTS}.")


def plan_call(fn: Any, args: dict[str, Any], name: str, where: str = "",
              unseen: bool = False) -> Any:
    """Design tasks: the plan for budgets the check drew (``args``, in order). A plan that
    raises a LookupError for them, or returns None for ``unseen`` ones (a table of the cases
    it was shown), fails, saying that a plan must be a function of its inputs; the stub and
    other crashes as ``call_local``."""
    __tracebackhide__ = True
    from ._core import fail, stub_message
    shown = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                      for k, v in args.items())
    looked_up = (" — for budgets it had not been shown. A plan must be a function of its "
                 "inputs, computed from them, not looked up in a table of the cases it was "
                 f"tried on{where}.")
    try:
        out = fn(*args.values())
        if out is not None or not unseen:
            return out
        message = f"{name}({shown}) returned None{looked_up}"
    except NotImplementedError:
        message = stub_message(fn)
    except LookupError as e:
        message = f"{name}({shown}) raised {type(e).__name__}: {e}{looked_up}"
    except Exception as e:
        message = f"{name} raised {type(e).__name__}: {e}{where}"
    fail(message)


def same_for_all(plans: list[Any], what: str = "plan") -> str:
    """The sentence naming a plan that ignores its inputs ('' if the plans differ)."""
    if len(plans) < 2 or any(p != plans[0] for p in plans[1:]):
        return ""
    return (f" It returned the same {what}, {plans[0]!r}, for all {len(plans)} budgets it was "
            "given: a plan must be a function of its inputs.")
