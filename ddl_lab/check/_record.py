"""The records of verdicts, ``{"task", "passed", "message", "pid"}`` (and ``"score"``:
partial credit; ``"figures"``: a measured run's numbers, for lesson 15's leaderboard): to the
grading judge's ``sink`` (``grade_with``, with the instructor's seed), else to the learner's progress (``ddl-lab progress``, lesson 00) in
``.ddl_lab/progress.jsonl`` or ``DDL_LAB_PROGRESS``. Printed text is never graded."""
from __future__ import annotations

import json
import os
import time
from contextvars import ContextVar, Token
from pathlib import Path
from typing import Callable

PROGRESS_ENV = "DDL_LAB_PROGRESS"
MAX_MESSAGE = 4000          # characters of a message kept in the record
SINK: Callable[[dict], None] | None = None      # the grading judge's own recorder
RUNNING: ContextVar[tuple[str, str] | None] = ContextVar("ddl_lab_check", default=None)


def write(task: str | None, passed: bool, message: str, score: float | None = None,
          figures: dict | None = None) -> None:
    """Hand one verdict to the grading judge's sink, if grading, else append it to the
    learner's progress; never raises. ``figures``: what a measured run achieved (JSON
    numbers, lesson 15's leaderboard)."""
    entry = {"task": task, "passed": bool(passed), "message": str(message)[:MAX_MESSAGE],
             "pid": os.getpid()}
    if score is not None:
        entry["score"] = min(1.0, max(0.0, float(score)))
    if figures is not None:
        entry["figures"] = figures
    if SINK is not None:
        SINK(entry)
        return
    target = progress_path()
    if target is None or task is None:
        return
    entry.update(lesson=(RUNNING.get() or (None, None))[1], time=round(time.time(), 3))
    line = (json.dumps(entry, ensure_ascii=False) + "\n").encode()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line)              # one write on an O_APPEND file: lines never mix
        finally:
            os.close(fd)
    except OSError:
        pass


def progress_path() -> Path | None:
    """Where the learner's verdicts go (lesson 00), or None (``DDL_LAB_PROGRESS=off``)."""
    named = os.environ.get(PROGRESS_ENV)
    if named == "off":
        return None
    if named:
        return Path(named)
    course = Path(__file__).resolve().parents[2]
    if (course / "lessons").is_dir() and os.access(course, os.W_OK):
        return course / ".ddl_lab" / "progress.jsonl"
    return Path.home() / ".ddl_lab" / "progress.jsonl"


def grade_with(sink: Callable[[dict], None], seed: int | None) -> None:
    """The grading judge's seam: every verdict of this process goes to ``sink`` from now on,
    and ``Cases`` mixes ``seed`` (None: none) into every draw (``ddl-lab grade --seed``)."""
    global SINK
    from . import _diagnose
    SINK = sink
    _diagnose.GRADING_SEED = seed


def current_task() -> str | None:
    """The graded check running now (its declaration, ``check._core.task``), or None."""
    return (RUNNING.get() or (None, None))[0]


def enter(task: str, lesson: str) -> Token | None:
    """A declared check starts: it is the running task unless another one called it (the
    outermost check is the one graded); the token for ``leave``."""
    return None if RUNNING.get() else RUNNING.set((task, lesson))


def leave(token: Token | None) -> None:
    if token is not None:
        RUNNING.reset(token)
