"""The learner's kernel hands a check's arguments to the judge (``ddl-lab grade``).

In the graded run, each pristine check cell ``check.<task>(my_fn, …)`` is run in the
learner's kernel as ``handover.take("<task>", my_fn, …)`` followed by ``handover.save(path)``:
the arguments (the learner's functions, with the helpers, classes and globals they use) are
pickled by value with dill (``runtime/pickling.py``, modules by name) into ``path``. The
judge (``judge.py``), a process where no learner cell ever ran, loads them and runs the
pristine check on them. Nothing here is trusted: whatever the kernel writes is only ever
the learner's own code, judged by the judge.
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from ddl_lab.runtime.pickling import Pickler

_TAKEN: list[tuple[str, tuple, dict]] = []


class ByValue(Pickler):
    """The workers' pickler without shared-memory handles: tensors are copied, as the
    kernel is gone by the time the judge loads them."""

    def reducer_override(self, obj: Any) -> Any:
        return NotImplemented


def take(task: str, *args: Any, **kwargs: Any) -> None:
    """What ``check.<task>(*args, **kwargs)`` would have been called with."""
    _TAKEN.append((task, args, kwargs))


def save(path: str) -> None:
    """Pickle every call taken since the last save into ``path``."""
    calls = list(_TAKEN)
    _TAKEN.clear()
    buf = io.BytesIO()
    ByValue(buf).dump(calls)
    Path(path).write_bytes(buf.getvalue())


def load(data: bytes) -> list[tuple[str, tuple, dict]]:
    """The judge's side: the calls, as the kernel took them."""
    import dill
    return dill.loads(data)
