"""What a learner's function can name: the course's functions its code reaches (globals,
closures, defaults, modules it imports) — for the refusal of the package's own answer
(``check/_diagnose.refuse_package_copy``), made where the function lives (in the sandbox
when grading, ``tools/grading/handover.py``)."""
from __future__ import annotations

import types
import warnings
from typing import Any, Iterator


def course_names(fn: Any) -> list[tuple[str, str]]:
    """(module, qualname) of every ``ddl_lab`` object ``fn`` reaches, in the order found."""
    found: dict[tuple[str, str], None] = {}
    for obj in _reachable(fn):
        name = ident(obj)
        if name:
            found.setdefault(name)
    return list(found)


def ident(obj: Any) -> tuple[str, str] | None:
    mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    return (mod, qual) if isinstance(mod, str) and mod.startswith("ddl_lab") and qual else None


def _reachable(fn: Any, depth: int = 3) -> Iterator[Any]:
    """``fn`` and the objects its code can name: globals, closure cells, defaults, module
    attributes (``module.name``), bound methods, partials — a few levels deep."""
    seen: set[int] = set()
    todo = [(fn, 0)]
    while todo:
        obj, d = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        if d >= depth:
            continue
        inner = [getattr(obj, a, None) for a in ("func", "__func__", "__wrapped__", "__call__")]
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType) and not str(
                getattr(obj, "__module__", "") or "").startswith("ddl_lab"):
            names = _code_names(code)
            glb = getattr(obj, "__globals__", {})
            cells = {v: c.cell_contents for v, c in zip(code.co_freevars, obj.__closure__ or ())
                     if _filled(c)}
            mods = [m for m in [glb.get(n) for n in names] + list(cells.values())
                    if isinstance(m, types.ModuleType)]
            mods += [_module(n) for n in names if n.startswith("ddl_lab.")]   # local imports
            mods += [_attr(m, n) for m in list(mods) for n in names         # their submodules
                     if isinstance(_attr(m, n), types.ModuleType)]
            inner += [glb.get(n) for n in names]
            inner += [_attr(m, n) for m in mods for n in names]
            inner += list(cells.values())
            inner += list(obj.__defaults__ or ())
        todo += [(o, d + 1) for o in inner if o is not None]


def _attr(module: Any, name: str) -> Any:
    """``module.name`` or None, quietly (numpy warns on names such as ``np.bytes``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return getattr(module, name, None)


def _module(name: str) -> Any:
    """The ddl_lab module a function imports inside its body (``from ddl_lab.x import f``)."""
    import importlib
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents
        return True
    except ValueError:
        return False
