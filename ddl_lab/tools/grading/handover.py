"""The learner's kernel hands a check's arguments to the judge (``ddl-lab grade``).

In the graded run, each pristine check cell ``check.<task>(my_fn, …)`` is run in the
learner's kernel as ``handover.take("<task>", my_fn, …)`` followed by ``handover.save(path)``:
the arguments (the learner's functions, with the helpers, classes and globals they use) are
pickled by value with dill (``runtime/pickling.py``, modules by name) into ``path``. The
judge (``judge.py``), a process where no learner cell ever ran, loads them and runs the
pristine check on them. Nothing here is trusted: whatever the kernel writes is only ever
the learner's own code, judged by the judge.

``judged(task, …)`` does the whole round trip from a kernel: nbgrader's autograder tests
call it (hidden tests of the export, ``nbgrader.py``), so they reach their verdicts in a
judge as ``ddl-lab grade`` does.
"""
from __future__ import annotations

import io
import shutil
import tempfile
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


def judged(task: str, *args: Any, **kwargs: Any) -> None:
    """``check.<task>(*args, **kwargs)`` run in a judge: an AssertionError with the
    check's message unless it passed there."""
    from .judge import Judge
    folder = Path(tempfile.mkdtemp(prefix="ddl-lab-judged-"))
    try:
        take(task, *args, **kwargs)
        save(str(folder / "payload.bin"))
        judge = Judge(None, folder / "judge.log")
        try:
            answer = judge.judge_all([(folder / "payload.bin", 0, task)], 600.0)[task]
        finally:
            judge.stop()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if answer.get("outcome") != "passed":
        raise AssertionError(f"judged: {answer.get('message', '')}")
    print(f"✔ {task}: judged — passed")
