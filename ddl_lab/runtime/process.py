"""The processes the course starts (lessons 00, 02, 07): one spawn context, one way to end
with the parent, one wording for how a process ended.

The runtime's workers, lesson 02's processes and lesson 07's parameter-server roles all
come from here, so a killed kernel leaves none of them behind.
"""
from __future__ import annotations

import os
import signal
import threading
from typing import Callable

import multiprocess as mp

__all__ = ["SPAWN", "exit_text", "end_with_parent", "child_setup"]

SPAWN = mp.get_context("spawn")     # never the platform's default start method
_POLL_S = 0.5


def exit_text(code: int | None) -> str:
    """'exit code -9 (SIGKILL)': how a process ended, in words."""
    if code is not None and code < 0:
        try:
            return f"exit code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"exit code {code}"


def end_with_parent(parent: int, cleanup: Callable[[], None] | None = None) -> None:
    """Start a daemon thread that ends this process (after ``cleanup``) once ``parent``
    is gone: a notebook kernel that is killed leaves no process behind."""
    def watch() -> None:
        stop = threading.Event()
        while os.getppid() == parent:
            stop.wait(_POLL_S)
        if cleanup is not None:
            cleanup()
        os._exit(0)
    threading.Thread(target=watch, daemon=True, name="ddl_lab-watch-parent").start()


def child_setup(parent: int) -> None:
    """What a course process does first: leave Ctrl-C to the parent, end with the parent,
    and use one BLAS thread (several processes share the laptop's cores)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with_parent(parent)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
    except ImportError:
        pass
