"""Fingerprints of the check machinery, taken before and after each judged task (``ddl-lab
grade``'s judge, ``judge.py``).

A fingerprint maps every function, class, method and module a check relies on to what it
is: the functions and classes of ``ddl_lab.check`` (its lesson modules, ``_core``,
``_record``, ``_diagnose`` …) and of the runtime the checks run learner code with
(``ddl_lab.runtime``: the workers, worlds, the wiretap), ``torch.distributed``'s functions,
the process-group classes whose methods the checks instrument, and ``builtins``. ``exact``
fingerprints name objects by identity as well (the judge compares itself with itself);
without it they hold only what two processes share — code, qualified names — so a worker
can be compared with the judge. ``changes(before, after)`` says what differs, in words.
"""
from __future__ import annotations

import builtins
import hashlib
import importlib
import pkgutil
import sys
import types
import warnings
from typing import Any

PACKAGES = ("ddl_lab.check", "ddl_lab.runtime")
MODULES = ("torch.distributed", "torch.distributed.distributed_c10d", "builtins")
CLASSES = ("torch._C._distributed_c10d.ProcessGroup", "torch._C._distributed_c10d.Backend",
           "torch._C._distributed_c10d.ProcessGroupGloo", "torch._C._distributed_c10d.Work")
_CONSTANTS = (int, float, str, bytes, bool, type(None))


def watched_modules(load: bool = True) -> list[types.ModuleType]:
    """The modules a fingerprint covers (imported first unless ``load`` is False)."""
    names = list(MODULES)
    if load:
        importlib.import_module("ddl_lab.check")    # every check module (``_core.TASKS``)
        runtime = importlib.import_module("ddl_lab.runtime")
        for info in pkgutil.iter_modules(runtime.__path__):
            importlib.import_module(f"ddl_lab.runtime.{info.name}")
    names += sorted(n for n in sys.modules if n.startswith(tuple(p + "." for p in PACKAGES))
                    or n in PACKAGES)
    return [sys.modules[n] for n in names if n in sys.modules]


def _classes() -> list[type]:
    found = []
    for dotted in CLASSES:
        obj: Any = sys.modules.get("torch")
        for part in dotted.split(".")[1:]:
            obj = getattr(obj, part, None)
        if isinstance(obj, type):
            found.append(obj)
    return found


def _code(code: types.CodeType) -> str:
    """A hash of what ``code`` does, the same in every process (marshal's is not)."""
    consts = tuple(_code(c) if isinstance(c, types.CodeType) else repr(c)
                   for c in code.co_consts)
    text = repr((code.co_code, consts, code.co_names, code.co_varnames, code.co_freevars,
                 code.co_qualname))
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def describe(obj: Any, exact: bool) -> str:
    """What ``obj`` is, as a short string that changes when it is replaced or edited."""
    ident = f"@{id(obj):x}" if exact else ""
    if isinstance(obj, (staticmethod, classmethod)):
        return f"{type(obj).__name__}({describe(obj.__func__, exact)})"
    if isinstance(obj, property):
        return "property(" + ",".join(describe(f, exact) for f in
                                      (obj.fget, obj.fset, obj.fdel)) + ")"
    if isinstance(obj, types.FunctionType):
        extra = ""
        if exact:
            cells = [id(_content(c)) for c in obj.__closure__ or ()]
            extra = (f"@{id(obj.__code__):x} g{id(obj.__globals__):x} c{cells} "
                     f"d{[id(d) for d in obj.__defaults__ or ()]}")
        wrapped = obj.__dict__.get("__wrapped__")
        inner = f" wraps {describe(wrapped, exact)}" if wrapped is not None and \
            wrapped is not obj else ""
        return f"function {obj.__module__}.{obj.__qualname__} {_code(obj.__code__)}{ident}" \
               f"{extra}{inner}"
    if isinstance(obj, types.ModuleType):
        return f"module {obj.__name__}{ident}"
    if isinstance(obj, type):
        return f"class {obj.__module__}.{obj.__qualname__}{ident}"
    if isinstance(obj, _CONSTANTS):
        return f"{type(obj).__name__} {obj!r}"[:200]
    kind = type(obj).__name__
    name = getattr(obj, "__qualname__", getattr(obj, "__name__", ""))
    return f"{kind} {name}{ident}"


def _content(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:
        return None


def _watched(value: Any, constants: bool) -> bool:
    """Functions, classes, modules, descriptors; constants (``DEFAULT_TIMEOUT``) where
    ``constants`` (the course's own modules, in the judge: a worker's torch sets some)."""
    return callable(value) or isinstance(value, (types.ModuleType, staticmethod, classmethod,
                                                 property)) \
        or (constants and isinstance(value, _CONSTANTS))


def fingerprint(exact: bool = True, load: bool = True) -> dict[str, str]:
    """``{"module.name": what it is}`` for every watched attribute of the watched modules,
    and ``{"Class.attr": …}`` for the watched classes and the classes those modules define."""
    with warnings.catch_warnings():         # torch's deprecated names warn when touched
        warnings.simplefilter("ignore")
        return _fingerprint(exact, load)


def _fingerprint(exact: bool, load: bool) -> dict[str, str]:
    out: dict[str, str] = {}
    modules = watched_modules(load)
    classes = _classes()
    for module in modules:
        constants = exact and module.__name__.startswith("ddl_lab")
        for name, value in list(vars(module).items()):
            if name.startswith("__") and name not in ("__import__", "__build_class__"):
                continue
            if not _watched(value, constants):
                continue
            out[f"{module.__name__}.{name}"] = describe(value, exact)
            if isinstance(value, type) and value.__module__ == module.__name__ \
                    and module is not builtins:
                classes.append(value)
    for cls in classes:
        for name, value in list(vars(cls).items()):
            if _watched(value, exact) and not (name.startswith("__") and name.endswith("__")
                                        and not callable(value)):
                out[f"{cls.__module__}.{cls.__qualname__}.{name}"] = describe(value, exact)
        out[f"{cls.__module__}.{cls.__qualname__}.__bases__"] = \
            ",".join(describe(b, exact) for b in cls.__bases__)
    return out


def changes(before: dict[str, str], after: dict[str, str], limit: int = 5) -> list[str]:
    """What differs from ``before`` to ``after``, in words (at most ``limit`` items, then a
    count)."""
    said = []
    for key in sorted(before.keys() | after.keys()):
        was, now = before.get(key), after.get(key)
        if was == now:
            continue
        if now is None:
            said.append(f"{key} was deleted")
        elif was is None:
            if not now.startswith("module "):       # a submodule imported since is no change
                said.append(f"{key} was added")
        else:
            said.append(f"{key} was replaced or changed")
    if len(said) > limit:
        said = said[:limit] + [f"and {len(said) - limit} more"]
    return said


def on_worker() -> dict[str, str]:
    """A worker's fingerprint, comparable with the judge's ``fingerprint(exact=False)``:
    only the modules the worker has loaded."""
    return fingerprint(exact=False, load=False)
