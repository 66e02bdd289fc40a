"""The processes the course starts (lessons 00, 02, 07): one start method, one way to end
with the parent, one way to stop, one wording for how a process ended, one reply for an
exception.

The runtime's workers, lesson 02's processes and lesson 07's parameter-server roles are
each a ``Child``: a process started from ``CONTEXT`` (never the platform's default start
method) that runs ``target(conn, *args)`` with ``conn`` its end of a duplex pipe, leaves
Ctrl-C to the parent and ends when the parent does, so a killed kernel leaves none of them
behind. ``stop_all`` ends a group of them within a bound (terminate, join, kill, join). A
child that runs a task answers with ``answer``: ``("ok", result)`` or ``("err", Raised)``.
Everything that travels by value (tasks, results) is pickled by ``runtime.pickling``.
Locks, barriers and shared values handed to children are made with ``CONTEXT`` too.

**How processes start.** From a *forkserver* (``multiprocess``'s): the first start in a
process launches a server, a fresh interpreter that imports ``PRELOAD`` (torch,
torch.distributed, the runtime's worker modules) once and waits on a socket; every start
is then a fork of that server (a few milliseconds, not 1-3 s of importing torch). This is
safe where ``fork`` is not. ``fork`` copies the *caller* — a notebook kernel with its
threads (Jupyter's, gloo's, torch's OpenMP pool) of which only the forking one lives on in
the child, so a lock another held stays held and the first parallel op can hang. The
kernel's threads are never forked here: the server only imports modules (no parallel torch
op, no CUDA, no process group ever runs in it) and has one thread (tests/runtime hold it
to that); each child sets its own torch threads. Children run the runtime's modules as the
server imported them: restart the kernel after editing ``ddl_lab.runtime`` itself. What a fork cannot take from the caller, each start
sends: its environment (``_Environment``), sys.path, working directory and key
(``multiprocess``'s preparation data, as for spawn). The server ends when the caller and
every child it forked have ended (each holds the end of its "alive" pipe), removing its
socket (``serverside``); one that died is started again by the next start.

``DDL_LAB_START_METHOD=spawn`` (or ``use_start_method("spawn")``) is the one setting that
starts every course process as a fresh interpreter instead, as before.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import sys
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

__all__ = ["CONTEXT", "PRELOAD", "Child", "ByValue", "Raised", "answer", "join_all",
           "stop_all", "exit_text", "start_method", "use_start_method", "start_server",
           "server_socket"]

SETTING = "DDL_LAB_START_METHOD"
START_METHODS = ("forkserver", "spawn")
# imported once by the forkserver: what every worker imports and nothing that starts a
# thread pool or runs a torch op at import (the server must never run a parallel op).
# torch._dynamo: DDP, FSDP2 and DTensor import it on first use, 1.5–1.8 CPU-s in every worker
# (lessons 10–14); imported here once, each fork has it (measured: the DDP, ZeRO and tensor-
# parallel test modules 50–58 → 40–42 CPU-s), for 1.8 CPU-s once per forkserver
PRELOAD = ["torch", "torch.distributed", "torch._dynamo", "dill", "threadpoolctl",
           "ddl_lab.runtime.worker", "ddl_lab.runtime.serverside"]
_POLL_S = 0.5


def start_method() -> str:
    """How the course's processes start: ``DDL_LAB_START_METHOD`` ('forkserver', the
    default, or 'spawn'); spawn where the platform has no forkserver (Windows)."""
    method = os.environ.get(SETTING, "forkserver")
    if method not in START_METHODS:
        raise ValueError(f"{SETTING} must be one of {', '.join(START_METHODS)}; "
                         f"got {method!r}")
    if method == "forkserver" and method not in mp.get_all_start_methods():
        return "spawn"
    return method


def use_start_method(method: str) -> None:
    """Start the course's processes by ``method`` ('forkserver' or 'spawn') from now on:
    sets ``DDL_LAB_START_METHOD``, the one setting (processes already running stay)."""
    if method not in START_METHODS:
        raise ValueError(f"method must be one of {', '.join(START_METHODS)}; got {method!r}")
    os.environ[SETTING] = method


def context() -> Any:
    """The ``multiprocess`` context of ``start_method()``, the forkserver's preload set."""
    method = start_method()
    ctx = mp.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_server() -> None:
    """Start the forkserver now if it is not running (under spawn: nothing), so that the
    next start does not wait for it to import torch."""
    if context().get_start_method() == "forkserver":
        from multiprocess import forkserver
        forkserver.ensure_running()


def server_socket() -> str | None:
    """The socket file the forkserver this process started listens on (in a folder that
    ``multiprocess`` made in the temporary folder, removed as the kernel ends), or None."""
    from multiprocess import forkserver
    server = forkserver._forkserver                     # noqa: SLF001 (no public reader)
    path = server._forkserver_address
    return path if server._forkserver_pid is not None and isinstance(path, str) else None


class _Context:
    """``CONTEXT.Pipe()``, ``CONTEXT.Lock()``, ``CONTEXT.Barrier(n)``...: from the context
    the next ``Child`` starts from (read from the setting at each call)."""

    def __getattr__(self, name: str) -> Any:
        return getattr(context(), name)

    def __repr__(self) -> str:
        return f"<ddl_lab process context: {start_method()}>"


CONTEXT: Any = _Context()


def exit_text(code: int | None) -> str:
    """'exit code -9 (SIGKILL)': how a process ended, in words."""
    if code is not None and code < 0:
        try:
            return f"exit code {code} ({signal.Signals(-code).name})"
        except ValueError:
            pass
    return f"exit code {code}"


def _end_with_parent(lifeline: Connection,
                     cleanup: Callable[[], None] | None = None) -> None:
    """Start a daemon thread that ends this process (after ``cleanup``) once the caller is
    gone, seen at once as the end of ``lifeline`` (a pipe only the caller writes to, and
    never does; the forkserver closes its copy as it forks), or once the process that
    started this one (the caller, or the forkserver) is: a notebook kernel that is killed
    leaves no process behind."""
    parent = os.getppid()           # under a forkserver: the server, not the caller
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
        the start: locks, barriers and shared values can only travel that way)."""
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


class _Environment(dict):
    """The caller's ``os.environ`` as a start sends it. Loading it in the child (the first
    argument, so before the target and the other arguments are loaded) makes it the
    child's environment and gives back the one the child had: a forked child inherits the
    *server's* environment, taken when the server started, so a test's or notebook's
    ``os.environ[...] = ...`` since then reaches workers only this way (under spawn it is
    the same environment twice). Variables read once as the server imported ``PRELOAD``
    keep the server's value: OMP_NUM_THREADS (read as torch loads;
    ``_follow_thread_limits`` applies a changed one), MKL_NUM_THREADS, the TORCH_* flags
    torch reads at import, PYTHONHASHSEED, PYTHONPATH (sys.path is sent anyway),
    LD_PRELOAD and LD_LIBRARY_PATH. It also checks that the child runs the caller's
    ddl_lab (a server started before sys.path changed may have imported another)."""

    def __reduce__(self) -> tuple:
        return (_become, (dict(self), __file__))


def _become(env: dict[str, str], caller: str) -> dict[str, str]:
    if os.path.realpath(caller) != os.path.realpath(__file__):
        raise ImportError(f"this process runs {__file__}, its caller {caller}: the forkserver "
                          "imported ddl_lab before sys.path changed. Restart the kernel, or "
                          f"set {SETTING}=spawn")
    before = dict(os.environ)
    for name in set(before) - set(env):
        del os.environ[name]
    os.environ.update(env)
    if "tempfile" in sys.modules:          # its folder was cached from the server's TMPDIR
        sys.modules["tempfile"].tempdir = None
        sys.modules["tempfile"].gettempdir()   # probe it now (a file written and removed),
        # not inside the task: lesson 15's meter would see the probe as the plan's own file
    return before


def _follow_thread_limits(before: dict[str, str], threads: int | None) -> None:
    """Torch's threads in a new child: ``threads`` if asked, else as OMP_NUM_THREADS says
    when the caller's differs from the one torch read at import (in the server)."""
    if threads is None:
        asked = os.environ.get("OMP_NUM_THREADS", "")
        if asked == before.get("OMP_NUM_THREADS", "") or not asked.isdigit() or asked == "0":
            return
        threads = int(asked)
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(threads)
    except ImportError:
        pass


def _child_main(before: dict[str, str], lifeline: Connection, authkey: bytes,
                threads: int | None, at_parent_exit: Callable[[], None] | None,
                target: Callable, conn: Connection, args: tuple, kwargs: dict) -> None:
    """What a course process does first: leave Ctrl-C to the parent, end with the parent,
    take the parent's key (torch.multiprocessing hands shared memory over a socket that
    checks it), and set its threads (several processes share the laptop's cores).
    ``before``: the environment it had before the caller's replaced it (``_Environment``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    multiprocessing.current_process().authkey = authkey
    _end_with_parent(lifeline, at_parent_exit)
    _follow_thread_limits(before, threads)
    try:
        target(conn, *args, **kwargs)
    finally:                        # it may have ended first, seeing its pipe close
        if at_parent_exit is not None and lifeline.poll(0):
            at_parent_exit()


class Child:
    """One process of the course (started from ``CONTEXT``) and the parent's end of its
    pipe."""

    def __init__(self, process: Any, conn: Connection, lifeline: Connection):
        self.process, self.conn, self._lifeline = process, conn, lifeline

    @classmethod
    def start(cls, target: Callable, args: tuple = (), kwargs: dict | None = None, *,
              name: str = "ddl_lab-child", threads: int | None = None,
              at_parent_exit: Callable[[], None] | None = None) -> "Child":
        """Start a process that runs ``target(conn, *args, **kwargs)``; ``target`` and the
        arguments travel with the start, with this process's environment. ``threads``:
        torch and BLAS threads in the child. ``at_parent_exit`` runs in the child if the
        parent dies first (it must pickle)."""
        ctx = context()
        mine, theirs = ctx.Pipe(duplex=True)
        life_end, lifeline = ctx.Pipe(duplex=False)      # the child reads, the parent holds
        key = bytes(multiprocessing.current_process().authkey)
        process = ctx.Process(target=_child_main, daemon=True, name=name,
                              args=(_Environment(os.environ), life_end, key, threads,
                                    at_parent_exit, target, theirs, tuple(args),
                                    dict(kwargs or {})))
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


# A SIGKILLed child is dead at once, but a forkserver's child is reported dead by the server
# (which reaps it): on a busy machine that report can take longer than a short grace.
_KILLED_REPORT_S = 10.0


def stop_all(children: Iterable[Child], grace: float = 1.0) -> None:
    """End every child within about ``2 * grace`` seconds: SIGTERM, then SIGKILL for those
    still running after ``grace``, whose end is awaited (a busy forkserver reports it late,
    ``_KILLED_REPORT_S`` at most); close the parent's ends of their pipes."""
    children = list(children)
    for c in children:
        if c.alive:
            c.terminate()
    join_all(children, grace)
    survivors = [c for c in children if c.alive]
    for c in survivors:
        c.process.kill()
    join_all(survivors, max(grace, _KILLED_REPORT_S))
    for c in children:
        c.conn.close()
        c._lifeline.close()
