"""The bytes a learner's code keeps between calls, wherever it keeps them (lesson 10's ZeRO-2
check, ``check.memory``)."""
from __future__ import annotations

import functools
import types
from typing import Any

import numpy as np


def held_bytes(roots: list[tuple[str, Any]], exclude: set[int]) -> tuple[int, list[tuple]]:
    """Bytes of the distinct tensor storages and arrays reachable from ``roots`` (named
    objects: the learner's ``state``, its function) but not in ``exclude``, and what holds
    them, (bytes, elements, where, in an optimizer's state), largest first. Followed:
    containers, optimizers, ``.grad``, attributes (``__dict__``, ``__slots__``), closures and
    defaults — not modules, classes or globals. Views of one storage count once."""
    import torch
    seen, seen_ids, held = set(exclude), set(), []
    stack = [(x, where, False) for where, x in roots]
    while stack:
        x, where, in_opt = stack.pop()
        if isinstance(x, (torch.Tensor, np.ndarray)):
            base = x
            while isinstance(base, np.ndarray) and isinstance(base.base, np.ndarray):
                base = base.base
            key, size = ((x.untyped_storage().data_ptr(), x.untyped_storage().nbytes())
                         if isinstance(x, torch.Tensor) else (("numpy", id(base)), base.nbytes))
            if key not in seen and x.size and size:
                seen.add(key)
                held.append((size, int(np.prod(x.shape)), where, in_opt))
            if isinstance(x, torch.Tensor) and x.grad is not None:
                stack.append((x.grad, f"{where}.grad", in_opt))
            continue
        if id(x) in seen_ids or isinstance(x, (str, bytes, int, float, complex, bool,
                                               type, types.ModuleType)) or x is None:
            continue
        seen_ids.add(id(x))
        if isinstance(x, dict):
            stack.extend((v, f"{where}[{k!r}]", in_opt) for k, v in x.items())
        elif isinstance(x, (list, tuple, set, frozenset)):
            stack.extend((v, f"{where}[{i}]", in_opt) for i, v in enumerate(x))
        elif isinstance(x, torch.optim.Optimizer):
            stack.extend((v, f"{where}.state[…]", True) for v in x.state.values())
            stack.extend((p, f"{where}'s parameters", in_opt)
                         for group in x.param_groups for p in group["params"])
        elif isinstance(x, (types.FunctionType, types.MethodType, functools.partial)):
            fn = getattr(x, "__func__", x)
            inside = [getattr(x, "__self__", None), getattr(x, "args", None),
                      getattr(x, "keywords", None), getattr(fn, "__defaults__", None),
                      getattr(fn, "__kwdefaults__", None), getattr(fn, "__dict__", None)]
            inside += [c.cell_contents for c in getattr(fn, "__closure__", None) or ()
                       if c.cell_contents is not c]
            stack.extend((v, where, in_opt) for v in inside if v is not None)
        else:
            attrs = dict(getattr(x, "__dict__", {}))
            for slot in getattr(type(x), "__slots__", ()):
                if isinstance(slot, str) and hasattr(x, slot):
                    attrs[slot] = getattr(x, slot)
            stack.extend((v, f"{where}.{k}", in_opt) for k, v in attrs.items())
    return sum(h[0] for h in held), sorted(held, key=lambda h: -h[0])
