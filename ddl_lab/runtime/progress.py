"""Progress reports from the workers to the notebook (any lesson; the experiment panel)."""
from __future__ import annotations

import time
from typing import Any, Callable

SINKS: list[Callable[[int, int, int], None]] = []   # parent side: (rank, done, total)
WORKER: dict[str, Any] = {}                         # worker side: conn, send lock, last report
_EVERY_S = 0.1                                      # at most 10 reports a second


class on_progress:
    """Parent side: ``with on_progress(fn):`` calls ``fn(rank, done, total)`` whenever a
    worker reports ``progress(done, total)`` during a run (the experiment panel's bar)."""

    def __init__(self, fn: Callable[[int, int, int], None]):
        self.fn = fn

    def __enter__(self) -> "on_progress":
        SINKS.append(self.fn)
        return self

    def __exit__(self, *exc: object) -> None:
        SINKS.remove(self.fn)


def progress(done: int, total: int) -> None:
    """Worker side: report that ``done`` of ``total`` steps are finished (any lesson).

    Reports are throttled to ten a second (the last step always goes through); outside a
    Cluster worker (under torchrun, say) this does nothing.
    """
    if "conn" not in WORKER:
        return
    now = time.monotonic()
    if done < total and now - WORKER["last"] < _EVERY_S:
        return
    WORKER["last"] = now
    with WORKER["lock"]:
        WORKER["conn"].send(("progress", int(done), int(total)))
