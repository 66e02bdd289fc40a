"""The structured record of verdicts that ``ddl-lab grade`` reads (``ddl_lab/tools/grading``).

When the environment variable ``DDL_LAB_GRADE_RECORD`` names a file, every verdict a check
reaches is appended to it as one JSON line ``{"task", "passed", "message", "pid"}``, plus
``"score"`` (the fraction of the task earned) when a check with parts reports partial
credit. Otherwise nothing is written. Printed text is never graded: a learner who prints
"✔ passed" writes no record.
"""
from __future__ import annotations

import json
import os
import sys

ENV = "DDL_LAB_GRADE_RECORD"
MAX_MESSAGE = 4000          # characters of a message kept in the record


def write(task: str | None, passed: bool, message: str, score: float | None = None) -> None:
    """Append one verdict to the record file, if grading asked for one; never raises."""
    path = os.environ.get(ENV)
    if not path:
        return
    entry = {"task": task, "passed": bool(passed), "message": str(message)[:MAX_MESSAGE],
             "pid": os.getpid()}
    if score is not None:
        entry["score"] = min(1.0, max(0.0, float(score)))
    line = (json.dumps(entry, ensure_ascii=False) + "\n").encode()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)              # one write on an O_APPEND file: lines never mix
        finally:
            os.close(fd)
    except OSError:
        pass


def failed(message: str) -> None:
    """Record a failure of the check now running (named from the call stack)."""
    write(current_task(), False, message)


def partial(done: int, total: int, message: str, task: str | None = None) -> None:
    """For a check with parts: ``done`` of ``total`` parts passed (partial credit)."""
    write(task or current_task(), False, message, score=done / total if total else 0.0)


def current_task() -> str | None:
    """The graded check running now: the outermost public function of a check module
    (``ddl_lab.check.<slug>``, listed in its ``__all__``) on the call stack."""
    task = None
    frame = sys._getframe(1)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if module.startswith("ddl_lab.check.") \
                and frame.f_code.co_name in frame.f_globals.get("__all__", ()):
            task = frame.f_code.co_name
        frame = frame.f_back
    return task
