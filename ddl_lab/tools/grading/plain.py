"""Plain data between the sandboxed learner side and the judge (``ddl-lab grade``).

Everything the learner side sends the judge is made plain here, on the learner's side, and
read back in the judge by ``decode``, which builds only values of a fixed list of types —
``None``, bools, ints, floats, complex numbers, strings, bytes, lists, tuples, dicts,
numpy arrays and scalars, torch tensors (raw bytes with dtype and shape), and the
dataclasses of ``ddl_lab`` modules whose fields are plain — so nothing the learner wrote
can run while the judge reads it. Anything else arrives as an ``Opaque`` that names its
type: a check compares it with nothing and says what it was.
"""
from __future__ import annotations

import base64
import dataclasses
import importlib
import json
import math
from typing import Any

import numpy as np

MAX_DEPTH = 64


@dataclasses.dataclass(frozen=True)
class State:
    """The attributes of a course object the judge handed the learner's function (a spy
    that counts calls), as they were after the call, for the judge to copy back."""
    type_name: str
    vars: dict


@dataclasses.dataclass(frozen=True)
class Opaque:
    """A learner's value that is not plain data: only its type's name and a short repr."""
    type_name: str
    text: str

    def __repr__(self) -> str:
        return self.text


# ---------------------------------------------------------------- the learner's side

def encode(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-able plain data (called on the learner's side; never raises)."""
    try:
        return _encode(value, depth)
    except Exception as e:          # noqa: BLE001 — a value that lies about itself
        return {"__opaque__": _type_name(value), "text": f"<{type(e).__name__} while reading>"}


def _encode(value: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        return {"__opaque__": "deeply nested value", "text": "…"}
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if abs(value) < 2 ** 53 else {"__int__": str(value)}
    if kind is float:
        return value if math.isfinite(value) else {"__float__": repr(value)}
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor):
        return _tensor(torch, value)
    if isinstance(value, np.ndarray):
        return _array(np.array(value, copy=True, subok=False))
    if isinstance(value, np.generic) and value.dtype.kind in "biufc":
        return {"__npscalar__": _array(np.array(value, subok=False))}
    if isinstance(value, (bool, int, float, str)):      # subclasses: their plain value
        return _encode({bool: bool, int: int, float: float, str: str}[
            next(t for t in (bool, int, float, str) if isinstance(value, t))](value), depth)
    if isinstance(value, complex):
        return {"__complex__": [float(value.real), float(value.imag)]}
    if isinstance(value, (bytes, bytearray)):
        return {"__bytes__": base64.b64encode(bytes(value)).decode()}
    if isinstance(value, (list, tuple)):
        items = [_encode(v, depth + 1) for v in list.__iter__(value)] if isinstance(
            value, list) else [_encode(v, depth + 1) for v in tuple.__iter__(value)]
        return items if isinstance(value, list) else {"__tuple__": items}
    if isinstance(value, dict):
        return {"__dict__": [[_encode(k, depth + 1), _encode(v, depth + 1)]
                             for k, v in dict.items(value)]}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        cls = type(value)
        return {"__dataclass__": f"{cls.__module__}:{cls.__qualname__}",
                "fields": {f.name: _encode(getattr(value, f.name), depth + 1)
                           for f in dataclasses.fields(value)}}
    if torch is not None and isinstance(value, torch.Size):
        return {"__tuple__": [int(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        return {"__set__": [_encode(v, depth + 1) for v in value]}
    if str(getattr(kind, "__module__", "")).startswith("ddl_lab") and hasattr(value, "__dict__"):
        return {"__state__": _type_name(value), "vars": {
            k: _encode(v, depth + 1) for k, v in dict.items(object.__getattribute__(
                value, "__dict__")) if type(k) is str}}
    return {"__opaque__": _type_name(value), "text": _short_repr(value)}


def _tensor(torch: Any, t: Any) -> dict:
    grad = bool(torch.Tensor.requires_grad.__get__(t))
    t = torch.Tensor.detach(t).cpu()
    if t.layout != torch.strided:
        t = t.to_dense()
    t = torch.Tensor.contiguous(torch.Tensor.clone(t)).as_subclass(torch.Tensor)
    dtype = str(t.dtype).replace("torch.", "")
    raw = t.reshape(-1).view(torch.uint8) if t.numel() else t
    data = bytes(raw.numpy().tobytes()) if t.numel() else b""
    return {"__tensor__": dtype, "shape": list(t.shape),
            "grad": grad, "data": base64.b64encode(data).decode()}


def _array(a: np.ndarray) -> dict:
    if a.dtype.kind not in "biufc":
        return {"__opaque__": f"{a.dtype} array", "text": _short_repr(a)}
    a = a.copy(order="C")
    return {"__array__": a.dtype.str, "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode()}


def _type_name(value: Any) -> str:
    try:
        cls = type(value)
        return f"{cls.__module__}.{cls.__qualname__}"
    except Exception:               # noqa: BLE001
        return "object"


def _short_repr(value: Any) -> str:
    try:
        return repr(value)[:200]
    except Exception:               # noqa: BLE001
        return f"<{_type_name(value)}>"


def _torch() -> Any:
    import sys
    return sys.modules.get("torch")


def dumps(value: Any) -> str:
    return json.dumps(encode(value), allow_nan=False)


# ---------------------------------------------------------------- the judge's side

class NotPlain(ValueError):
    """What the learner side sent is not plain data of the agreed form."""


def loads(text: str | bytes) -> Any:
    return decode(json.loads(text))


def decode(data: Any, depth: int = 0) -> Any:
    """The value ``encode`` made (in the judge: builds plain types only)."""
    if depth > MAX_DEPTH + 2:
        raise NotPlain("nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        return data
    if type(data) is list:
        return [decode(v, depth + 1) for v in data]
    if type(data) is not dict or len(data) == 0:
        raise NotPlain(f"unexpected {type(data).__name__}")
    tag = next(iter(data))
    if tag == "__int__":
        return int(str(data[tag]))
    if tag == "__float__":
        return float(str(data[tag]))
    if tag == "__complex__":
        re, im = data[tag]
        return complex(float(re), float(im))
    if tag == "__bytes__":
        return base64.b64decode(str(data[tag]))
    if tag == "__tuple__":
        return tuple(decode(v, depth + 1) for v in _list(data[tag]))
    if tag == "__set__":
        return {decode(v, depth + 1) for v in _list(data[tag])}
    if tag == "__dict__":
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in _list(data[tag])}
    if tag == "__array__":
        return _array_of(data)
    if tag == "__npscalar__":
        return _array_of(data[tag])[()]
    if tag == "__tensor__":
        return _tensor_of(data)
    if tag == "__dataclass__":
        return _dataclass_of(data, depth)
    if tag == "__state__":
        return State(str(data[tag]), {str(k): decode(v, depth + 1)
                                      for k, v in dict(data.get("vars") or {}).items()})
    if tag == "__opaque__":
        return Opaque(str(data[tag]), str(data.get("text", ""))[:200])
    raise NotPlain(f"unknown tag {tag!r}")


def _list(v: Any) -> list:
    if type(v) is not list:
        raise NotPlain("expected a list")
    return v


def _array_of(data: dict) -> np.ndarray:
    dtype = np.dtype(str(data["__array__"]))
    if dtype.kind not in "biufc":
        raise NotPlain(f"array of {dtype}")
    shape = tuple(int(s) for s in _list(data["shape"]))
    return np.frombuffer(base64.b64decode(str(data["data"])), dtype=dtype).reshape(shape).copy()


def _tensor_of(data: dict) -> Any:
    import torch
    dtype = getattr(torch, str(data["__tensor__"]), None)
    if not isinstance(dtype, torch.dtype):
        raise NotPlain(f"tensor of {data['__tensor__']}")
    shape = [int(s) for s in _list(data["shape"])]
    raw = bytearray(base64.b64decode(str(data["data"])))
    if not raw:
        t = torch.empty(shape, dtype=dtype)
    else:
        t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape).clone()
    return t.requires_grad_(True) if data.get("grad") is True and t.is_floating_point() else t


def _dataclass_of(data: dict, depth: int) -> Any:
    module, _, qual = str(data["__dataclass__"]).partition(":")
    fields = {str(k): decode(v, depth + 1) for k, v in dict(data.get("fields") or {}).items()}
    if module == "ddl_lab" or module.startswith("ddl_lab."):
        try:
            cls: Any = importlib.import_module(module)
            for part in qual.split("."):
                cls = getattr(cls, part)
            if dataclasses.is_dataclass(cls) and isinstance(cls, type):
                return cls(**fields)
        except Exception:           # noqa: BLE001 — a name or fields that do not fit
            pass
    return Opaque(f"{module}.{qual}", f"{qual}({fields!r})"[:200])
