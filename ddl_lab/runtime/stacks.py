"""Where a rank is right now, in one line (lesson 00: a deadlock vs slow work).

A watcher thread in each worker answers the parent's ``"where"`` with the main
thread's current stack, boiled down to the innermost line of the learner's own code
and the library call it is in, e.g.::

    waiting in dist.recv — deadlock(), cell line 4: dist.recv(buf, src=1)
    computing — train(), cell line 12: loss = model(x)
"""
from __future__ import annotations

import linecache
import os
import re
import sys
import sysconfig
import threading
import types
from typing import NamedTuple

# innermost frame in one of these: the rank waits for another process (or thread)
_WAITS = ("torch.distributed", "threading", "queue", "multiprocess", "multiprocessing",
          "selectors", "socket", "concurrent", "asyncio")
_LIBRARY = frozenset({"ddl_lab", "dill", "multiprocess", "torch", "numpy"})
_PREFIXES = tuple({os.path.realpath(p) + os.sep for p in
                   (sys.prefix, sys.base_prefix, sys.exec_prefix,
                    *sysconfig.get_paths().values())})
_CELL = re.compile(r"(ipykernel_\d+[/\\]\d+\.py$)|(^<ipython-input-(\d+)-)")
_RUNTIME = os.path.dirname(os.path.abspath(__file__)) + os.sep


class Where(NamedTuple):
    """One rank's position: ``text`` to show; ``waiting`` True in a communication wait,
    False while computing, None when unknown."""
    text: str
    waiting: bool | None


def main_thread_where() -> Where:
    """Worker side: where the main thread (the one running the task) is now."""
    frame = sys._current_frames().get(threading.main_thread().ident)
    return describe(frame) if frame is not None else Where("no stack", None)


def describe(frame: types.FrameType | None) -> Where:
    """The innermost user line and the library call it is in (or 'idle')."""
    stack = []
    while frame is not None:
        stack.append(frame)
        frame = frame.f_back
    stack.reverse()                                   # outermost first
    task = [i for i, f in enumerate(stack) if f.f_code.co_filename.startswith(_RUNTIME)]
    if task:
        stack = stack[task[-1] + 1:]                  # below the runtime's own frames
    if not stack:
        return Where("idle", None)
    users = [f for f in stack if not _is_library(f)]
    inner = stack[-1]
    waiting = _module(inner).startswith(_WAITS)
    state = f"waiting in {_call_name(inner)}" if waiting else (
        "computing" if not users or users[-1] is inner else f"computing in {_call_name(inner)}")
    at = users[-1] if users else inner
    return Where(f"{state} — {_frame_line(at)}", waiting)


def _frame_line(f: types.FrameType) -> str:
    code = f.f_code
    name = getattr(code, "co_qualname", code.co_name)
    place = _place(code.co_filename, f.f_lineno)
    src = linecache.getline(code.co_filename, f.f_lineno, f.f_globals).strip()
    return f"{name}(), {place}" + (f": {src[:100]}" if src else "")


def _place(filename: str, line: int) -> str:
    if _CELL.search(filename) or filename == "<string>":
        return f"cell line {line}"
    return f"{os.path.basename(filename)} line {line}"


def _module(f: types.FrameType) -> str:
    return str(f.f_globals.get("__name__", ""))


def _call_name(f: types.FrameType) -> str:
    module, code = _module(f), f.f_code
    name = getattr(code, "co_qualname", code.co_name)
    if module == "torch.distributed.distributed_c10d":
        return f"dist.{name}"
    return f"{module}.{name}" if module else name


def _is_library(f: types.FrameType) -> bool:
    top = _module(f).partition(".")[0]
    if top in _LIBRARY or top in sys.stdlib_module_names:
        return True
    return os.path.realpath(f.f_code.co_filename).startswith(_PREFIXES)
