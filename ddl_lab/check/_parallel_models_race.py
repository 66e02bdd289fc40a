"""Lesson 02's threaded sum, watched so that its verdict never depends on scheduling luck
(``check/parallel_models.py`` uses it; issue 26, "a race the check cannot observe").

Two forced meetings:

- at the first touch of x (``_Watched``): every thread waits until all have touched x, so a
  shared total read *before* the block's sum (``total[0] += block.sum()``) loses its updates;
  threads that never overlap are seen from their start/join order;
- at the first writes of shared state (a global, a variable of the enclosing function, an
  element or attribute of a shared object): the learner's code is traced opcode by opcode
  (``sys.settrace`` with ``f_trace_opcodes``) and each thread is paused just before such a
  write until every other thread has reached its own write, finished, or waits for a lock
  another thread holds. So ``s = block.sum(); total += s`` without a lock reads the same old
  total in every thread and loses all but one update, every time; a locked accumulation,
  private slots or results joined afterwards come out right.
"""
from __future__ import annotations

import dis
import os
import sys
import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import numpy as np

MEET_TIMEOUT_S = 3.0    # how long the first thread to touch x waits for the others
STORE_TIMEOUT_S = 2.0   # how long a paused write waits for the others (then pauses stop)
STORE_PAUSES = 2        # writes of shared state paused per thread
_SHARED_STORES = {"STORE_GLOBAL": "the global `{}`",
                  "STORE_DEREF": "`{}`, a variable of the enclosing function",
                  "STORE_ATTR": "the attribute `.{}` of a shared object",
                  "STORE_SUBSCR": "an element of a shared container",
                  "STORE_SLICE": "a slice of a shared container"}


class Meeting:
    """Who works on x: the threads that touch it, thread starts and joins; the first touch
    in each thread waits until ``parties`` threads have touched x (or that cannot happen).
    Then each thread's first writes of shared state wait for the others' (``store``)."""

    def __init__(self, parties: int):
        self.parties, self.cond = parties, threading.Condition()
        self.caller = threading.get_ident()
        self.touched: set[int] = set()
        self.started = self.open = self.most_open = 0
        self.joining = self.apart = self.gave_up = False
        self.arrivals: dict[int, int] = {}           # paused writes per thread
        self.done: set[int] = set()
        self.waiting_on: dict[int, "_NotedLock"] = {}
        self.writes: list[str] = []                  # what the paused writes wrote

    def touch(self) -> None:
        me = threading.get_ident()
        with self.cond:
            if me in self.touched:
                return
            self.touched.add(me)
            self.cond.notify_all()
            alone = me == self.caller and self.started < self.parties - 1   # none can come
            met = alone or self.cond.wait_for(
                lambda: len(self.touched) >= self.parties or self.apart
                or (self.joining and self.started < self.parties), MEET_TIMEOUT_S)
            if not met or len(self.touched) < self.parties:
                self.apart = True
                self.cond.notify_all()

    def store(self, what: str) -> None:
        """Pause this thread before a write of shared state until every other thread that
        works on x has reached as many such writes, finished, or waits for a held lock."""
        me = threading.get_ident()
        with self.cond:
            if (self.parties < 2 or self.apart or self.gave_up or me == self.caller
                    or me not in self.touched or len(self.touched) < self.parties
                    or self.arrivals.get(me, 0) >= STORE_PAUSES):
                return
            self.arrivals[me] = k = self.arrivals.get(me, 0) + 1
            self.writes.append(what)
            self.cond.notify_all()
            others = self.touched - {me, self.caller}
            if not self.cond.wait_for(lambda: all(self._settled(q, k) for q in others),
                                      STORE_TIMEOUT_S):
                self.gave_up = True                  # e.g. a lock the check cannot see
                self.cond.notify_all()

    def _settled(self, q: int, k: int) -> bool:
        lock = self.waiting_on.get(q)
        return (self.arrivals.get(q, 0) >= k or q in self.done or
                lock is not None and lock.holder not in (None, q))


class Watched(np.ndarray):
    """x as the learner gets it: its slices too tell the meeting when a thread uses them."""
    meeting: Meeting | None = None

    def __array_finalize__(self, obj: Any) -> None:
        self.meeting = getattr(obj, "meeting", None)

    def _arrive(self) -> None:
        if self.meeting is not None:
            self.meeting.touch()

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        self._arrive()
        plain = [np.asarray(i) if isinstance(i, Watched) else i for i in inputs]
        if "out" in kwargs:
            kwargs["out"] = tuple(np.asarray(o) if isinstance(o, Watched) else o
                                  for o in kwargs["out"])
        return getattr(ufunc, method)(*plain, **kwargs)

    def __iter__(self) -> Iterator[Any]:
        self._arrive()
        return iter(np.asarray(self).tolist())


class _NotedLock:
    """``threading.Lock()`` while the check runs: a real lock that tells the meeting who
    holds it and who waits for it (a thread waiting for a held lock cannot reach a write)."""

    def __init__(self, meeting: Meeting, inner: Any):
        self._m, self._inner, self.holder = meeting, inner, None

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        me, got = threading.get_ident(), False
        with self._m.cond:
            self._m.waiting_on[me] = self
            self._m.cond.notify_all()
        try:
            got = self._inner.acquire(blocking, timeout)
        finally:
            with self._m.cond:
                self._m.waiting_on.pop(me, None)
                if got:
                    self.holder = me
                self._m.cond.notify_all()
        return got

    def release(self) -> None:
        with self._m.cond:
            self.holder = None
            self._inner.release()
            self._m.cond.notify_all()

    def locked(self) -> bool:
        return self._inner.locked()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


_LIBRARY = tuple({os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
                 | {os.path.dirname(os.path.dirname(os.path.realpath(__file__)))})
_STORES: dict[Any, dict[int, str] | None] = {}


def _shared_writes(code: Any) -> dict[int, str] | None:
    """Offsets of the writes of shared state in the learner's ``code`` (None: not the
    learner's — the standard library, site-packages, ddl_lab)."""
    if code not in _STORES:
        mine = not (code.co_filename.startswith("<frozen") or
                    os.path.realpath(code.co_filename).startswith(_LIBRARY))
        _STORES[code] = {i.offset: _SHARED_STORES[i.opname].format(i.argval)
                         for i in dis.get_instructions(code)
                         if i.opname in _SHARED_STORES} if mine else None
    return _STORES[code]


def _tracer(meeting: Meeting) -> Callable:
    def opcodes(frame: Any, event: str, arg: Any) -> Callable:
        if event == "opcode":
            what = _shared_writes(frame.f_code).get(frame.f_lasti)
            if what:
                meeting.store(what)
        return opcodes

    def calls(frame: Any, event: str, arg: Any) -> Callable | None:
        if event != "call" or not _shared_writes(frame.f_code):
            return None
        frame.f_trace_opcodes = True
        return opcodes
    return calls


@contextmanager
def watch_threads(meeting: Meeting) -> Iterator[None]:
    """While the learner's function runs: count thread starts, the most threads started but
    not yet joined at once, and finished threads; trace the threads' writes of shared state
    (``Meeting.store``); hand out noted locks for ``threading.Lock()``."""
    start, join, lock = threading.Thread.start, threading.Thread.join, threading.Lock
    previous = threading.gettrace()

    def counted_start(self: threading.Thread) -> None:
        run = self.run

        def noted_run() -> None:
            try:
                run()
            finally:
                with meeting.cond:
                    meeting.done.add(threading.get_ident())
                    meeting.cond.notify_all()
        self.run = noted_run                                     # type: ignore[method-assign]
        with meeting.cond:
            meeting.started += 1
            meeting.open += 1
            meeting.most_open = max(meeting.most_open, meeting.open)
        start(self)

    def counted_join(self: threading.Thread, timeout: float | None = None) -> None:
        with meeting.cond:
            meeting.joining = True
            meeting.cond.notify_all()
        join(self, timeout)
        with meeting.cond:
            meeting.open -= 0 if self.is_alive() else 1

    threading.Thread.start, threading.Thread.join = counted_start, counted_join  # type: ignore
    threading.Lock = lambda: _NotedLock(meeting, lock())                        # type: ignore
    threading.settrace(_tracer(meeting))
    try:
        yield
    finally:
        threading.settrace(previous)                                            # type: ignore
        threading.Thread.start, threading.Thread.join = start, join             # type: ignore
        threading.Lock = lock                                                    # type: ignore
