"""Every channel between the capstone's workers is metered or closed (lesson 15).

The meter (``capstone.wire``) charges what goes through the default process group. Around
a plan, on each worker, ``sealed()`` closes what would talk past it and records what it
cannot close:

- **Closed**: every ``ProcessGroup`` method that moves data refuses a call that does not
  come through the wiretap — the raw group the meter wraps, however it was reached (an
  attribute of the wire or of ``dist.group.WORLD``, ``c10d._world``, the garbage
  collector), the cluster's other groups, a group built by hand; so do a gloo
  ``Backend``'s methods, every key-value ``Store`` (the TCPStore the group rendezvoused
  through is a channel too), ``ProcessGroup.split_group``/``merge_remote_group`` and
  ``torch.distributed.rpc.init_rpc``.
- **Recorded**: files opened, created, removed or renamed, memory-mapped files and
  shared-memory segments (``/dev/shm``), sockets connected or bound — from Python's audit
  events (PEP 578) — are returned as ``Touch``es for the check to name.

What it cannot see: C++ that opens files or sockets itself (``torch.from_file``, ctypes),
and code that digs this module's own saved methods out of its closures: Python keeps no
secret from code in the same process. The import system's reads of code on ``sys.path``,
bytecode caches and ``/proc``/``/sys`` are not recorded.
"""
from __future__ import annotations

import os
import sys
import threading
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from torch._C import _distributed_c10d as c10d_cpp

from ddl_lab.runtime.wiretap import METHODS, forwarding

__all__ = ["Touch", "sealed", "CLOSED"]

CLOSED = ("the capstone closes every channel the meter cannot count: ")
_GROUP_TOO = ("split_group", "merge_remote_group")
_STORE = ("set", "compare_set", "get", "add", "check", "delete_key", "num_keys", "wait",
          "append", "multi_get", "multi_set", "queue_push", "queue_pop", "queue_len",
          "list_keys", "barrier")
_CODE = (".py", ".pyc", ".so", ".pth", ".pyi")
_SYSTEM = ("/proc/", "/sys/", "/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


@dataclass(frozen=True)
class Touch:
    """One thing a worker did outside the meter: ``kind`` 'read', 'wrote', 'removed',
    'mapped' (a memory-mapped file or shared-memory segment) or 'socket'; ``what`` the
    absolute path, or the socket's address."""

    kind: str
    what: str


# ------------------------------------------------------------------ closed

def _group_message(name: str) -> str:
    return (CLOSED + f"{name} was called on a process group the meter does not watch — the "
            "raw group behind it (reached through an attribute of the wire or of "
            "dist.group.WORLD, or c10d's tables) or another of the cluster's groups. Send "
            "through the metered default group: dist.* without group=, wire.*, or DDP.")


def _refuse(what: str) -> Callable:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(CLOSED + what)
    return refused


def _raw_only_from_the_tap(name: str, method: Callable) -> Callable:
    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not forwarding():                   # the one caller a raw group still answers
            raise RuntimeError(_group_message(name))
        return method(self, *args, **kwargs)
    guarded.__name__ = name
    return guarded


def _replacements() -> list[tuple[Any, str, Callable]]:
    """(owner, attribute, replacement) for everything ``sealed`` closes (the names this
    torch has: an older one lacks some)."""
    pg, backend, store = c10d_cpp.ProcessGroup, c10d_cpp.Backend, c10d_cpp.Store
    out = [(pg, m, _raw_only_from_the_tap(m, vars(pg).get(m))) for m in METHODS]
    out += [(pg, m, _refuse(f"ProcessGroup.{m} makes a group the meter does not watch."))
            for m in _GROUP_TOO]
    out += [(backend, m, _refuse(f"a gloo backend's {m} talks past the meter; send through "
                                 "the metered default group (dist.*, wire.*)."))
            for m in METHODS]
    out += [(store, m, _refuse(f"the key-value store ({m}) is a channel between workers "
                               "the meter does not count; send through dist.* or wire.*."))
            for m in _STORE]
    rpc = sys.modules.get("torch.distributed.rpc")
    if rpc is not None:
        out.append((rpc, "init_rpc", _refuse("torch.distributed.rpc talks past the meter.")))
    return [(owner, m, new) for owner, m, new in out if m in vars(owner)]


@contextmanager
def _closed() -> Iterator[None]:
    replacements = _replacements()
    saved = [(owner, name, vars(owner)[name]) for owner, name, _ in replacements]
    try:
        for owner, name, new in replacements:
            setattr(owner, name, new)
        yield
    finally:
        for owner, name, old in reversed(saved):
            setattr(owner, name, old)


# ------------------------------------------------------------------ recorded

_STATE = threading.local()
_RECORDING: list[list[Touch]] = []        # the touches of the plan running now (0 or 1)
_HOOKED: list[bool] = []


def _path(p: Any) -> str | None:
    try:
        p = os.fsdecode(os.fspath(p))
    except TypeError:
        return None
    return os.path.abspath(p)


def _fd_path(fd: int) -> str | None:
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def _ignored(path: str, kind: str) -> bool:
    """The import system's own traffic — code read from an importable directory, bytecode
    cached in ``__pycache__`` — and the system's pseudo-files."""
    if path.startswith(_SYSTEM) or f"{os.sep}__pycache__{os.sep}" in path:
        return True
    importable = tuple(os.path.abspath(p) + os.sep for p in sys.path
                       if p and os.path.abspath(p) != os.sep)
    return (kind == "read" and path.startswith(importable)
            and (path.endswith(_CODE) or ".dist-info" + os.sep in path))


def _writing(mode: Any, flags: Any) -> bool:
    if isinstance(mode, str):
        return any(c in mode for c in "wax+")
    return isinstance(flags, int) and bool(flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))


def _touch(event: str, args: tuple) -> Touch | None:
    """What ``event`` did, if the plan's verdict should name it."""
    if event == "open" and not isinstance(args[0], int):
        path = _path(args[0])
        kind = "wrote" if _writing(args[1], args[2]) else "read"
        return Touch(kind, path) if path and not _ignored(path, kind) else None
    if event in ("os.remove", "os.rename"):
        path = _path(args[0])
        return Touch("removed", path) if path and not _ignored(path, "removed") else None
    if event == "mmap.__new__" and args[0] not in (-1, None):
        path = _fd_path(args[0])
        return Touch("mapped", path) if path else None
    if event in ("socket.connect", "socket.bind", "socket.sendto"):
        return Touch("socket", str(args[1] if event != "socket.sendto" else args[-1]))
    return None


def _audit(event: str, args: tuple) -> None:
    if not _RECORDING or getattr(_STATE, "busy", False):
        return
    _STATE.busy = True
    try:
        touch = _touch(event, args)
        if touch is not None and touch not in _RECORDING[-1]:
            _RECORDING[-1].append(touch)
    except Exception:                      # never break the learner's own call
        pass
    finally:
        _STATE.busy = False


@contextmanager
def _recorded() -> Iterator[list[Touch]]:
    if not _HOOKED:                        # an audit hook cannot be removed: one per process
        sys.addaudithook(_audit)
        _HOOKED.append(True)
    touches: list[Touch] = []
    _RECORDING.append(touches)
    try:
        yield touches
    finally:
        _RECORDING.remove(touches)


@contextmanager
def sealed() -> Iterator[list[Touch]]:
    """While inside (on a worker, within a ``Wiretap``): every unmetered channel closed, and
    the files, shared memory and sockets the code touches recorded in the list it yields."""
    with ExitStack() as stack:
        stack.enter_context(_closed())
        yield stack.enter_context(_recorded())
