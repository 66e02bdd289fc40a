"""How tasks and results travel between the notebook and the workers (lesson 00).

- Notebook code (``__main__``) travels by value with dill (``recurse=True``), so a
  cell's helpers and imports come along; every importable module travels by name.
- Tensors in shared memory (``tensor.share_memory_()``, ``model.share_memory()``)
  travel the way ``torch.multiprocessing`` hands them over: the workers map the *same*
  memory (lesson 03's Hogwild trains the notebook's model). Other tensors are copied.
- In a worker, the cell functions and classes a task brought along are installed in
  ``__main__``, so pickle-by-reference (``torch.distributed.rpc``) finds them.
"""
from __future__ import annotations

import importlib
import io
import linecache
import sys
import threading
import types
from typing import Any, Callable

import dill

_PLAIN = frozenset({int, float, complex, str, bytes, bool, type(None), tuple, list, dict, set})


class Pickler(dill.Pickler):
    """dill, except that every importable module travels by name (dill copies modules
    outside sys.prefix by value, e.g. an editable ``ddl_lab`` a cell refers to) and
    tensors in shared memory travel as handles to that memory."""
    dispatch = dill.Pickler.dispatch.copy()

    def __init__(self, file: io.BytesIO):
        super().__init__(file, recurse=True)
        self.shared = 0                    # shared storages handed over
        self.files: set[str] = set()       # source files of the notebook functions

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) in _PLAIN:
            return NotImplemented
        if isinstance(obj, types.FunctionType):
            if obj.__module__ == "__main__":
                self.files.add(obj.__code__.co_filename)
            return NotImplemented
        torch = sys.modules.get("torch")
        if torch is None or not isinstance(obj, (torch.Tensor, torch.UntypedStorage,
                                                 torch.storage.TypedStorage)):
            return NotImplemented
        return _reduce_shared(self, torch, obj)


def _reduce_shared(pickler: Pickler, torch: Any, obj: Any) -> Any:
    """torch.multiprocessing's reduction for CPU tensors/storages in shared memory."""
    from torch.multiprocessing import reductions
    if isinstance(obj, torch.Tensor):
        if (obj.device.type == "cpu" and obj.layout == torch.strided and not obj.is_nested
                and obj.is_shared()):
            return reductions.reduce_tensor(obj)
    elif type(obj) is torch.storage.TypedStorage:
        if obj._untyped_storage.is_shared():
            return reductions.reduce_typed_storage(obj)
    elif isinstance(obj, torch.UntypedStorage) and obj.device.type == "cpu" and obj.is_shared():
        pickler.shared += 1
        return reductions.reduce_storage(obj)
    return NotImplemented


def _save_module(pickler: dill.Pickler, module: types.ModuleType) -> None:
    if module.__name__ == "__main__" or module.__name__.startswith("__runtime__"):
        dill._dill.save_module(pickler, module)
    else:
        pickler.save_reduce(importlib.import_module, (module.__name__,), obj=module)


Pickler.dispatch[types.ModuleType] = _save_module

_dill_globalvars = dill.detect.globalvars
_visiting = threading.local()


def _globalvars(func: Any, recurse: bool = True, builtin: bool = False) -> dict:
    """dill's ``detect.globalvars`` without its endless loops (dill 0.4 follows function
    references with no memory, so two cell functions that call each other, or a cell
    that names ``dist.all_reduce`` — a wrapper whose globals lead back to it — raised
    RecursionError): each function is followed once, and a library's functions, which
    travel by name with no globals of their own, are not followed at all."""
    seen = getattr(_visiting, "ids", None)
    if seen is None:
        seen = _visiting.ids = set()
    if seen and (id(func) in seen or (isinstance(func, types.FunctionType)
                                      and func.__module__ != "__main__")):
        return {}
    seen.add(id(func))
    try:
        return _dill_globalvars(func, recurse, builtin)
    finally:
        seen.discard(id(func))


dill.detect.globalvars = _globalvars        # dill's save_function looks it up per call


def _dump(obj: Any) -> tuple[bytes, Pickler]:
    buf = io.BytesIO()
    pickler = Pickler(buf)
    pickler.dump(obj)
    return buf.getvalue(), pickler


def dumps(obj: Any) -> bytes:
    """Pickle for the workers: by value for notebook code, by name for modules, shared
    memory as shared memory (a handle that can be loaded once)."""
    return _dump(obj)[0]


loads = dill.loads


def pickle_task(fn: Callable, args: tuple, kwargs: dict, ranks: int) -> tuple[list[bytes], dict]:
    """One payload per rank (a shared-memory handle is loaded once, so each rank gets its
    own) and the notebook cells' source lines, naming the piece that cannot travel."""
    if not callable(fn):
        raise TypeError(f"run() needs a function to run on every rank, got {type(fn).__name__}")
    task = (fn, args, kwargs)
    try:
        data, pickler = _dump(task)
    except Exception:
        _name_the_culprit(fn, args, kwargs)
        raise
    payloads = [data] + [dumps(task) if pickler.shared else data for _ in range(ranks - 1)]
    sources = {f: linecache.cache[f] for f in pickler.files if f in linecache.cache}
    return payloads, sources


def _name_the_culprit(fn: Callable, args: tuple, kwargs: dict) -> None:
    pieces = [("the function " + getattr(fn, "__name__", repr(fn)), fn)]
    pieces += [(f"argument {i} ({type(a).__name__})", a) for i, a in enumerate(args)]
    pieces += [(f"keyword argument {k!r} ({type(v).__name__})", v) for k, v in kwargs.items()]
    for name, obj in pieces:
        try:
            dumps(obj)
        except Exception as e:
            raise TypeError(f"{name} cannot be sent to the workers: it does not pickle "
                            f"({type(e).__name__}: {e}). Pass something picklable, or "
                            "create it inside the function.") from None


def install_in_main(fn: Callable, args: tuple, kwargs: dict) -> None:
    """Worker side: put the notebook functions and classes a task brought (``fn``, its
    arguments and what they refer to) into ``__main__`` under their names, so pickling
    them by reference works (``torch.distributed.rpc``)."""
    main = sys.modules["__main__"]
    seen: set[int] = set()
    todo = [fn, *args, *kwargs.values()]
    while todo:
        obj = todo.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, (staticmethod, classmethod)):
            todo.append(obj.__func__)
        elif isinstance(obj, (types.FunctionType, type)):
            if getattr(obj, "__module__", None) != "__main__":
                continue
            if "." not in obj.__qualname__:
                setattr(main, obj.__qualname__, obj)
            if isinstance(obj, type):
                todo.extend(vars(obj).values())
            else:
                todo.extend(obj.__globals__.values())
                todo.extend(c.cell_contents for c in obj.__closure__ or () if _filled(c))
        elif type(obj).__module__ == "__main__":
            todo.append(type(obj))
        elif isinstance(getattr(obj, "__dict__", None), dict) and "__wrapped__" in obj.__dict__:
            todo.append(obj.__dict__["__wrapped__"])       # rank_size(fn), functools.wraps


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True
