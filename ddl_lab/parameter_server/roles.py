"""The processes of a parameter-server run (lesson 07): each plays a *role* — a shard, a
replica, a throughput client — handed to it by the driver.

Every process comes from a small pool of the runtime's processes kept warm between
runs (``Roles``); every wait has a timeout, and every process of a failed run is killed.
"""
from __future__ import annotations

import atexit
import pickle
import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from multiprocess.connection import Connection, wait

from ddl_lab.parameter_server.errors import ParameterServerError
from ddl_lab.parameter_server.wire import recv_msg
from ddl_lab.runtime.pickling import loads
from ddl_lab.runtime.process import ByValue, Child, answer, exit_text, stop_all

__all__ = ["Roles", "Event", "tell_driver", "from_driver", "exit_text"]

_POOL_MAX = 12                 # warm processes kept between runs
_TASK = b"ddl_lab-task:"       # marks a role for a pool process to run
_READY = b"ddl_lab-ready"      # a new pool process has imported what it needs


def _pool_main(conn: Connection) -> None:
    """A warm process (a ``process.Child``): run one role after another until the driver
    says goodbye."""
    conn.send_bytes(_READY)
    while True:
        try:
            data = conn.recv_bytes()
        except (EOFError, OSError):
            return
        if not data:
            return
        if not data.startswith(_TASK):         # a message meant for a role that has ended
            continue
        fn, args = pickle.loads(data[len(_TASK):])
        try:
            conn.send_bytes(pickle.dumps(answer(fn, conn, args=args), protocol=5))
        except OSError:
            return


def tell_driver(parent: Connection, *msg: Any) -> None:
    """From a role: send the driver a message (it arrives as a ``msg`` event)."""
    parent.send_bytes(pickle.dumps(("msg",) + msg, protocol=5))


def from_driver(parent: Connection, timeout: float) -> tuple:
    """In a role: the driver's next message (``go``, ``task``, ``stop``…), with a timeout."""
    return recv_msg(parent, timeout, "the driver")


class _Warm(Child):
    """A pool process; booted once it has said it can read a task."""

    booted = False

    def wait_booted(self, timeout: float) -> None:
        """Wait until the new process can read a task (so sending one does not block)."""
        if not self.booted:
            if not self.conn.poll(timeout) or self.conn.recv_bytes() != _READY:
                raise ParameterServerError(f"a new process did not start within {timeout:g} s")
            self.booted = True


_IDLE: list[_Warm] = []


@atexit.register
def _kill_pool() -> None:
    stop_all(_IDLE)
    _IDLE.clear()


@dataclass
class Event:
    """Something a role did: ``msg`` (payload = its message), ``done`` (payload = its
    result), ``err`` (payload = (traceback, summary, whether it was a NotImplementedError))
    or ``died`` (payload = exit code)."""

    index: int
    kind: str
    payload: Any


class Roles:
    """``n`` processes of one run, each playing a role (a shard, a replica…) (lesson 07).

    ``start(i, fn, *args)`` runs ``fn(parent_conn, *args)`` in process i; ``events``
    reports what they say and which died. Processes come from a warm pool and go back to
    it after ``close()`` if their role ended cleanly; the others are killed.
    """

    def __init__(self, n: int, label: str = "process"):
        self.label = label
        reuse = []
        while _IDLE and len(reuse) < n:
            p = _IDLE.pop()
            if p.alive:
                reuse.append(p)
            else:
                p.stop()
        self.procs = reuse + [_Warm.start(_pool_main, name="ddl_lab-ps", threads=1)
                              for _ in range(n - len(reuse))]
        self.state = ["idle"] * n          # idle, running, done, failed, died
        self.exitcodes: list[int | None] = [None] * n
        self.backlog: list[Event] = []     # events read but not yet handed out

    def __len__(self) -> int:
        return len(self.procs)

    def start(self, i: int, fn: Callable, *args: Any) -> None:
        """Run ``fn(parent_conn, *args)`` in process i."""
        try:
            self.procs[i].wait_booted(60.0)
        except (EOFError, OSError):
            raise ParameterServerError(f"{self.label} {i}'s process died while "
                                       "starting") from None
        task = pickle.dumps((ByValue(fn), ByValue(args)), protocol=5)
        self.procs[i].conn.send_bytes(_TASK + task)
        self.state[i] = "running"

    def tell(self, i: int, *msg: Any) -> None:
        """Send process i a message (it reads it with ``from_driver``); a dead one is skipped."""
        if self.state[i] == "running":
            try:
                self.procs[i].conn.send_bytes(pickle.dumps(msg, protocol=5))
            except OSError:
                pass

    def kill(self, i: int) -> None:
        """Terminate process i for real (SIGTERM), as a machine that fails."""
        self.procs[i].terminate()

    def running(self) -> list[int]:
        return [i for i, s in enumerate(self.state) if s == "running"]

    def waitables(self) -> list:
        out = []
        for i in self.running():
            out += [self.procs[i].conn, self.procs[i].sentinel]
        return out

    def collect(self, ready: Sequence) -> list[Event]:
        """The events of the processes among ``ready`` (objects ``wait`` returned)."""
        events: list[Event] = []
        ready_ids = {id(o) for o in ready}
        for i in self.running():
            p = self.procs[i]
            if id(p.conn) in ready_ids or id(p.sentinel) in ready_ids:
                events += self._drain(i)
        return events

    def _drain(self, i: int) -> list[Event]:
        p, events = self.procs[i], []
        try:
            while self.state[i] == "running" and p.conn.poll(0):
                msg = pickle.loads(p.conn.recv_bytes())
                if msg[0] == "msg":
                    events.append(Event(i, "msg", msg[1:]))
                elif msg[0] == "ok":
                    self.state[i] = "done"
                    events.append(Event(i, "done", loads(msg[1])))
                else:
                    self.state[i] = "failed"
                    events.append(Event(i, "err", (msg[1].traceback, msg[1].summary,
                                                   msg[1].not_implemented)))
        except (EOFError, OSError):                # the pipe closed: it is dying
            p.join(1.0)
        if self.state[i] == "running" and not p.alive:
            p.join(1.0)
            self.state[i] = "died"
            self.exitcodes[i] = p.exitcode
            events.append(Event(i, "died", p.exitcode))
        return events

    def events(self, timeout: float) -> list[Event]:
        """What happened, waiting at most ``timeout`` seconds for something to happen."""
        out, self.backlog = self.backlog, []
        deadline = time.monotonic() + timeout
        while self.running():
            left = 0.0 if out else deadline - time.monotonic()
            out += self.collect(wait(self.waitables(), timeout=max(0.0, left)))
            if out or left <= 0:
                break
        return out

    def expect(self, i: int, what: str, timeout: float) -> tuple:
        """Wait for process i's message ``what`` (e.g. its address); errors raise."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ParameterServerError(f"{self.label} {i} did not send {what!r} within "
                                           f"{timeout:g} s")
            found, keep = None, []
            for ev in self.events(min(left, 0.5)):
                if ev.index != i or found is not None:
                    keep.append(ev)
                elif ev.kind == "msg" and ev.payload[0] == what:
                    found = ev.payload[1:]
                else:
                    raise self.error(ev)
            self.backlog = keep + self.backlog
            if found is not None:
                return found

    def error(self, ev: Event) -> ParameterServerError:
        who = f"{self.label} {ev.index}"
        if ev.kind == "err":
            return ParameterServerError(f"{who} failed: {ev.payload[1]}\n\n{ev.payload[0]}",
                                        not_implemented=ev.payload[2])
        if ev.kind == "died":
            return ParameterServerError(f"{who} died ({exit_text(ev.payload)})")
        return ParameterServerError(f"{who}: unexpected {ev.kind} {ev.payload!r:.200}")

    def close(self) -> None:
        """Return cleanly finished processes to the pool, kill the rest; never raises."""
        if self.state and self.state[0] == "closed":
            return
        for i, p in enumerate(self.procs):
            if self.state[i] in ("idle", "done") and p.alive and len(_IDLE) < _POOL_MAX:
                _IDLE.append(p)
            else:
                p.stop()
        self.state = ["closed"] * len(self.procs)

