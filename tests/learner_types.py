"""Right answers in the number types learners return (issue 26, "one rule for numbers").

``in_learner_types(fn, style)`` wraps a solution so that what it returns comes back as a
learner's code might return it: ``"float32"`` — every float (Python, numpy, array, tensor) in
float32 and every whole number as an integral float (10 → 10.0); ``"numpy"`` — Python numbers
as numpy scalars (``np.float64``, ``np.int64``). Integer arrays, bools and strings are left
alone; tuples, lists and dicts are converted item by item; in-place work on inputs is kept.
The wrapper is defined as a notebook cell is (in ``__main__``), so it travels to workers by
value with the function it wraps.
"""
from typing import Callable

from tests.conftest import define_cell

_SOURCE = '''
import functools as _ft
import numpy as _np

def _as(x, style):
    if isinstance(x, dict):
        return {k: _as(v, style) for k, v in x.items()}
    if isinstance(x, (tuple, list)):
        return type(x)(_as(v, style) for v in x)
    if isinstance(x, (bool, _np.bool_)) or x is None or isinstance(x, (str, bytes)):
        return x
    if style == "float32":
        if isinstance(x, (int, _np.integer)):
            return float(x)
        if isinstance(x, (float, _np.floating)):
            return _np.float32(x)
        if isinstance(x, _np.ndarray) and x.dtype.kind == "f":
            return x.astype(_np.float32)
        if type(x).__module__.startswith("torch") and getattr(x, "is_floating_point", None) \\
                and x.is_floating_point():
            import torch
            return x.to(torch.float32)
        return x
    if isinstance(x, bool):
        return x
    if isinstance(x, int):
        return _np.int64(x)
    if isinstance(x, float):
        return _np.float64(x)
    return x

def in_learner_types(fn, style):
    @_ft.wraps(fn)
    def typed(*args, **kwargs):
        return _as(fn(*args, **kwargs), style)
    return typed
'''

STYLES = ("float32", "numpy")


def in_learner_types(fn: Callable, style: str) -> Callable:
    """``fn`` whose results come back in ``style``'s number types (the module's docstring)."""
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, not {style!r}")
    return define_cell(_SOURCE)["in_learner_types"](fn, style)
