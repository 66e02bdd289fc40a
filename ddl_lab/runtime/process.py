"""The processes the course starts (lessons 00, 02, 07): one spawn context, one way to end
with the parent, one way to stop, one wording for how a process ended, one reply for an
exception.

The runtime's workers, lesson 02's processes and lesson 07's parameter-server roles are
each a ``Child``: a spawned process (never the platform's default start method) that
runs ``target(conn, *args)`` with ``conn`` its end of a duplex pipe, leaves Ctrl-C to the
parent and ends when the parent does, so a killed kernel leaves none of them behind.
``stop_all`` ends a group of them within a bound (terminate, join, kill, join). A child
that runs a task answers with ``answer``: ``("ok", result)`` or ``("err", Raised)``.
Everything that travels by value (tasks, results) is pickled by ``runtime.pickling``.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
import traceback
from dataclasses import dataclass
from types import FunctionType
from typing import Any, Callable, Iterable

import multiprocess as mp
from multiprocess.connection import Connection

from .errors import caused_by
from .pickling import dumps, loads

__all__ = ["SPAWN", "Child", "ByValue", "Raised", "answer", "join_all", "stop_all",
           "exit_text"]

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


def _end_with_parent(parent: int, lifeline: Connection,
                     cleanup: Callable[[], None] | None = None) -> None:
    """Start a daemon thread that ends this process (after ``cleanup``) once ``parent``
    is gone, seen at once as the end of ``lifeline`` (a pipe only the parent writes to,
    and never does): a notebook kernel that is killed leaves no process behind."""
    def watch() -> None:
        while os.getppid() == parent and not lifeline.poll(_POLL_S):
            pass
        if cleanup is not None:
            cleanup()
        os._exit(0)
    threading.Thread(target=watch, daemon=True, name="ddl_lab-watch-parent").start()


@dataclass(frozen=True)
class Raised:
    """A child's exception as the parent receives it: the type's name, the message, the
    traceback text (without the frame that caught it), and whether it came from a
    NotImplementedError (an exercise's stub)."""

    type: str
    message: str
    traceback: str
    not_implemented: bool = False

    @classmethod
    def of(cls, e: BaseException) -> "Raised":
        tb = e.__traceback__.tb_next if e.__traceback__ else None
        return cls(type(e).__name__, str(e),
                   "".join(traceback.format_exception(type(e), e, tb)),
                   caused_by(e, NotImplementedError))

    @property
    def summary(self) -> str:
        """'ValueError: bad rank' (as a traceback's last line says it)."""
        return f"{self.type}: {self.message}" if self.message else self.type


class ByValue:
    """An object pickled by ``runtime.pickling`` (a notebook cell's function travels by
    value with what it refers to), loaded in the child by ``answer``."""

    def __init__(self, obj: Any):
        self.payload = dumps(obj)

    @staticmethod
    def functions(obj: Any) -> Any:
        """``obj`` as a ``ByValue`` if it is a function, else as it is (it travels with
        the spawn: locks, barriers and shared values can only travel that way)."""
        return ByValue(obj) if isinstance(obj, FunctionType) else obj

    def load(self) -> Any:
        return loads(self.payload)


def _opened(obj: Any) -> Any:
    return obj.load() if isinstance(obj, ByValue) else obj


def answer(fn: Any, *first: Any, args: Any = (), kwargs: Any = None) -> tuple:
    """In a child: call ``fn(*first, *args, **kwargs)`` and say how it went, as
    ``("ok", result pickled)`` or ``("err", Raised)``. ``fn``, ``args``, ``kwargs`` and
    the items of ``args`` and ``kwargs`` may be ``ByValue``: they are loaded here, so a
    task that cannot be loaded is an error reply too."""
    try:
        fn, args, kwargs = _opened(fn), _opened(args), _opened(kwargs) or {}
        args = [_opened(a) for a in args]
        kwargs = {k: _opened(v) for k, v in kwargs.items()}
        return ("ok", dumps(fn(*first, *args, **kwargs)))
    except BaseException as e:
        return ("err", Raised.of(e))


def _child_main(parent: int, lifeline: Connection, authkey: bytes, threads: int | None,
                at_parent_exit: Callable[[], None] | None, target: Callable,
                conn: Connection, args: tuple, kwargs: dict) -> None:
    """What a course process does first: leave Ctrl-C to the parent, end with the parent,
    take the parent's key (torch.multiprocessing hands shared memory over a socket that
    checks it), and, if asked, use ``threads`` BLAS threads (several processes share the
    laptop's cores)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    multiprocessing.current_process().authkey = authkey
    _end_with_parent(parent, lifeline, at_parent_exit)
    if threads is not None:
        try:
            from threadpoolctl import threadpool_limits
            threadpool_limits(threads)
        except ImportError:
            pass
    try:
        target(conn, *args, **kwargs)
    finally:                        # it may have ended first, seeing its pipe close
        if at_parent_exit is not None and lifeline.poll(0):
            at_parent_exit()


class Child:
    """One spawned process of the course and the parent's end of its pipe."""

    def __init__(self, process: Any, conn: Connection, lifeline: Connection):
        self.process, self.conn, self._lifeline = process, conn, lifeline

    @classmethod
    def start(cls, target: Callable, args: tuple = (), kwargs: dict | None = None, *,
              name: str = "ddl_lab-child", threads: int | None = None,
              at_parent_exit: Callable[[], None] | None = None) -> "Child":
        """Spawn a process that runs ``target(conn, *args, **kwargs)``; ``target`` and the
        arguments travel with the spawn. ``at_parent_exit`` runs in the child if the
        parent dies first (it must pickle)."""
        mine, theirs = SPAWN.Pipe(duplex=True)
        life_end, lifeline = SPAWN.Pipe(duplex=False)      # the child reads, the parent holds
        key = bytes(multiprocessing.current_process().authkey)
        process = SPAWN.Process(target=_child_main, daemon=True, name=name,
                                args=(os.getpid(), life_end, key, threads, at_parent_exit,
                                      target, theirs, tuple(args), dict(kwargs or {})))
        process.start()
        theirs.close()
        life_end.close()
        return cls(process, mine, lifeline)

    @property
    def pid(self) -> int | None:
        return self.process.pid

    @property
    def sentinel(self) -> int:
        return self.process.sentinel

    @property
    def exitcode(self) -> int | None:
        return self.process.exitcode

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def join(self, timeout: float) -> None:
        self.process.join(timeout)

    def terminate(self) -> None:
        """SIGTERM, as a machine that fails (lesson 07 kills a shard this way)."""
        self.process.terminate()

    def stop(self, grace: float = 1.0) -> None:
        """End the process (terminate, then kill after ``grace`` s) and close the pipe."""
        stop_all([self], grace)


def join_all(children: Iterable[Child], timeout: float) -> None:
    """Wait until every child has exited, ``timeout`` seconds at most in all."""
    deadline = time.monotonic() + timeout
    for c in children:
        c.join(max(0.0, deadline - time.monotonic()))


def stop_all(children: Iterable[Child], grace: float = 1.0) -> None:
    """End every child within about ``2 * grace`` seconds: SIGTERM, then SIGKILL for those
    still running after ``grace``; close the parent's ends of their pipes."""
    children = list(children)
    for c in children:
        if c.alive:
            c.terminate()
    join_all(children, grace)
    survivors = [c for c in children if c.alive]
    for c in survivors:
        c.process.kill()
    join_all(survivors, grace)
    for c in children:
        c.conn.close()
        c._lifeline.close()
