"""A sharded parameter server on real processes (lesson 07).

The server is ``shards`` processes; shard i owns an equal slice θ[lo_i:hi_i] of the
flattened parameters and applies every update to it itself (plain SGD, Adagrad kept
per shard, or EASGD's elastic move). Model replicas, the lesson's driver and
Sandblaster's coordinator talk to the shards over authenticated loopback TCP sockets
(``multiprocess.connection`` challenge, key from ``os.urandom``)::

    with ParameterServer(theta0, shards=2, rule="adagrad", lr=0.1) as ps:
        client = ps.connect("replica 0")
        client.join()
        got = client.pull()                 # θ and the version of every shard
        client.push(grad, got.versions)     # each shard applies its slice of grad
        report = ps.finish()                # final θ, staleness of every update, ...

Consistency (``mode``): ``bsp`` (everyone waits at every clock; a clock's gradients,
all computed on the same θ, are applied together when the last one arrives), ``ssp`` with bound ``s`` (a replica more than ``s``
clocks ahead of the slowest waits at its pull), ``async`` (nobody waits). A replica's
clock is the number of pushes it has made. The staleness of every applied gradient —
how many updates the shard applied between the replica's pull and its push — is
recorded. A replica whose connection drops without saying goodbye is reported lost
and removed from the gates, so a dead replica never blocks the others.

Shards also execute Sandblaster's vector operations (dot, axpy, copy, scale) on named
vectors they keep, so L-BFGS's history never leaves them (``sandblaster.py``).

The pieces: the rules (``rules.py``), one shard's state (``shard.py``), the wire and the
client (``wire.py``), the processes (``roles.py``); this module runs the shard processes
and is the driver's handle on them. Every wait has a timeout, and every process of a
failed run is killed.
"""
from __future__ import annotations

import os
import pickle
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Hashable, Iterator, Sequence

import numpy as np
from multiprocess.connection import Connection, wait

from ddl_lab.parameter_server.errors import ParameterServerError, ShardDied, ShardLost
from ddl_lab.parameter_server.roles import Event, Roles, exit_text, from_driver, tell_driver
from ddl_lab.parameter_server.rules import shard_ranges, validate
from ddl_lab.parameter_server.shard import Shard
from ddl_lab.parameter_server.wire import ShardClient, accept, send_msg
from ddl_lab.runtime.pickling import dumps, loads

__all__ = ["ParameterServer", "ServerReport", "ParameterServerError", "ShardDied",
           "shard_main", "shard_throughput"]


# ------------------------------------------------------------- the shard process

def _load(fn_bytes: bytes | None) -> Callable | None:
    return None if fn_bytes is None else loads(fn_bytes)


def shard_main(parent: Connection, index: int, theta: np.ndarray, options: dict,
               authkey: bytes) -> dict:
    """A shard process: serve pulls, pushes and vector operations until told to finish.

    Runs as a role in a pool process; the learner's ``gate``/``push``/``rate``
    functions arrive pickled by ``runtime.pickling`` in ``options``.
    """
    options = dict(options)
    for key in ("gate", "push", "rate"):
        options[key] = _load(options.get(key))
    shard = Shard(index, theta, **options)
    server = socket.create_server(("127.0.0.1", 0), backlog=128)
    server.setblocking(False)
    names: dict[Connection, Hashable] = {}
    by_name: dict[Hashable, Connection] = {}

    def deliver(replies: list) -> None:
        for who, msg in replies:
            conn = by_name.get(who)
            if conn is None:
                continue
            try:
                send_msg(conn, msg)
            except OSError:                  # it died between its request and our answer
                drop(conn)

    def drop(conn: Connection) -> None:
        who = names.pop(conn, None)
        if by_name.get(who) is conn:
            del by_name[who]
            deliver(shard.lose(who))
        conn.close()

    tell_driver(parent, "addr", server.getsockname())
    try:
        while True:
            t = time.perf_counter()
            ready = wait([parent, server, *names], timeout=1.0)
            shard.idle += time.perf_counter() - t
            for obj in ready:
                if obj is parent:
                    try:
                        msg = pickle.loads(parent.recv_bytes())
                    except (EOFError, OSError):
                        return shard.report()
                    if msg[0] == "final":
                        return shard.report()
                    if msg[0] == "stop":
                        deliver(shard.stop())
                elif obj is server:
                    conn = accept(server, authkey)
                    if conn is not None:
                        names[conn] = None
                elif obj in names:
                    _serve(obj, names, by_name, shard, deliver, drop)
    finally:
        for conn in list(names):
            conn.close()
        server.close()


def _serve(conn: Connection, names: dict, by_name: dict, shard: Shard,
           deliver: Callable, drop: Callable) -> None:
    """Handle every message already waiting on one connection."""
    for _ in range(64):
        try:
            if not conn.poll(0):
                return
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            drop(conn)
            return
        if msg[0] == "hello":
            names[conn] = msg[1]
            by_name[msg[1]] = conn
            continue
        if names.get(conn) is None:
            drop(conn)                      # spoke before saying who it is
            return
        deliver(shard.handle(names[conn], msg))


# ------------------------------------------------------------- the server

@dataclass
class ServerReport:
    """What the shards said at the end of a run (lesson 07)."""

    theta: np.ndarray                  # the final model, all slices together
    shards: list[dict]                 # each shard's own report (Shard.report)
    ranges: list[tuple[int, int]]

    @property
    def staleness(self) -> np.ndarray:
        """Staleness of every gradient shard 0 applied (all shards see the same pushes)."""
        return self.shards[0]["staleness"]

    @property
    def lost(self) -> list[tuple[float, Hashable]]:
        """(time, replica) of every replica shard 0 lost without a goodbye."""
        return self.shards[0]["lost"]

    @property
    def max_gap(self) -> int:
        """The largest clock lead any replica had when a pull was let through."""
        return max((g for _, _, g in self.shards[0]["gaps"]), default=0)


class ParameterServer:
    """``shards`` shard processes holding θ, sliced evenly (lesson 07).

    Args:
        theta0: the initial parameters (flat).
        shards: number of shard processes.
        rule: 'sgd', 'adagrad' (G kept per shard) or 'elastic' (EASGD's centre).
        lr, eps: the rule's rate and Adagrad's epsilon.
        mode: 'bsp', 'ssp' (bound ``s``) or 'async'.
        staleness_aware: scale each gradient's rate by ``rate(lr, staleness)``.
        gate, push, rate: replace ``ssp_must_wait``, the push handler and
            ``staleness_lr`` (functions may come from a notebook cell).
        timeout: seconds any single wait may take.
    """

    def __init__(self, theta0: np.ndarray, shards: int = 2, rule: str = "sgd",
                 lr: float = 0.1, mode: str = "async", s: int = 2, eps: float = 1e-8,
                 staleness_aware: bool = False, gate: Callable | None = None,
                 push: Callable | None = None, rate: Callable | None = None,
                 timeout: float = 30.0):
        theta0 = np.asarray(theta0, dtype=np.float64).ravel()
        validate(rule, lr, mode, s)
        if not timeout or timeout <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        self.ranges = shard_ranges(theta0.size, shards)
        self.timeout = timeout
        self.authkey = os.urandom(32)
        options = dict(rule=rule, lr=lr, eps=eps, mode=mode, s=s,
                       staleness_aware=staleness_aware,
                       gate=_dump(gate, "gate"), push=_dump(push, "push"),
                       rate=_dump(rate, "rate"))
        self.roles = Roles(shards, "shard")
        self.report: ServerReport | None = None
        try:
            for i, (lo, hi) in enumerate(self.ranges):
                self.roles.start(i, shard_main, i, theta0[lo:hi], options, self.authkey)
            self.addresses = [self.roles.expect(i, "addr", timeout + 30)[0]
                              for i in range(shards)]
        except BaseException:
            self.roles.close()
            raise
        self._clients: list[ShardClient] = []

    def connect(self, name: Hashable) -> ShardClient:
        """A client in this process (the driver, the coordinator, a check)."""
        client = ShardClient(self.addresses, self.ranges, self.authkey, name, self.timeout)
        self._clients.append(client)
        return client

    def client_args(self) -> tuple:
        """What another process needs to connect: (addresses, ranges, authkey)."""
        return self.addresses, self.ranges, self.authkey

    def check(self, events: Sequence[Event]) -> None:
        """Raise if any shard failed or died (call with the shards' events)."""
        for ev in events:
            if ev.kind == "died":
                lo, hi = self.ranges[ev.index]
                raise ShardDied(
                    f"shard {ev.index} died ({exit_text(ev.payload)}). It held "
                    f"parameters {lo}..{hi - 1} and no other process has them, so the run "
                    "cannot go on; every replica was stopped. (A real parameter server "
                    "keeps replicas of each shard or checkpoints, and restarts it.)")
            if ev.kind == "done":
                raise ParameterServerError(f"shard {ev.index} stopped before it was told to")
            raise self.roles.error(ev)

    @contextmanager
    def guard(self) -> Iterator[None]:
        """Inside, a client's ShardLost becomes the shard's own report (ShardDied)."""
        try:
            yield
        except ShardLost:
            self.check(self.roles.events(2.0))
            raise

    def kill_shard(self, i: int) -> None:
        """Terminate shard i's process (to see what a shard failure does)."""
        self.roles.kill(i)

    def stop_pulls(self) -> None:
        """Answer every waiting and every later pull with 'stop' (replicas then finish)."""
        for i in range(len(self.roles)):
            self.roles.tell(i, "stop")

    def finish(self) -> ServerReport:
        """Ask every shard for its final state; the shards' processes go back to the pool."""
        for client in self._clients:
            client.close()
        self._clients = []
        for i in range(len(self.roles)):
            self.roles.tell(i, "final")
        reports: list[dict | None] = [None] * len(self.roles)
        deadline = time.monotonic() + self.timeout
        while self.roles.running():
            left = deadline - time.monotonic()
            if left <= 0:
                raise ParameterServerError(f"shards {self.roles.running()} did not report "
                                           f"within {self.timeout:g} s")
            for ev in self.roles.events(min(left, 0.5)):
                if ev.kind != "done":
                    self.check([ev])
                reports[ev.index] = ev.payload
        self.roles.close()
        self.report = ServerReport(np.concatenate([r["theta"] for r in reports]),
                                   reports, self.ranges)
        return self.report

    def close(self) -> None:
        for client in self._clients:
            client.close()
        self._clients = []
        self.roles.close()

    def __enter__(self) -> "ParameterServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _dump(fn: Callable | None, what: str) -> bytes | None:
    if fn is None:
        return None
    if not callable(fn):
        raise TypeError(f"{what} must be a function, got {type(fn).__name__}")
    try:
        return dumps(fn)
    except Exception as e:
        raise TypeError(f"the {what} function {getattr(fn, '__name__', fn)!r} cannot be sent "
                        f"to the shard processes ({type(e).__name__}: {e})") from None


# ------------------------------------------------------------- how fast is a shard?

def _hammer(parent: Connection, addresses: list, ranges: list, authkey: bytes, name: int,
            seconds: float, timeout: float) -> int:
    client = ShardClient(addresses, ranges, authkey, name, timeout)
    client.join()
    tell_driver(parent, "ready")
    from_driver(parent, timeout)
    zeros, pairs = np.zeros(client.n), 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        got = client.pull()
        client.push(zeros, got.versions)
        pairs += 1
    client.leave()
    client.snapshot()                        # the last push has been applied
    client.close()
    return pairs


def shard_throughput(n_params: int = 2410, clients: int = 2, seconds: float = 1.0,
                     timeout: float = 30.0) -> dict[str, float]:
    """Pulls + pushes per second one shard sustains, ``clients`` processes pulling and
    pushing ``n_params`` values as fast as they can (lesson 07's benchmark)."""
    if clients < 1 or seconds <= 0 or n_params < 1:
        raise ValueError("clients and n_params must be >= 1 and seconds > 0")
    with ParameterServer(np.zeros(n_params), shards=1, rule="sgd", lr=0.0,
                         timeout=timeout) as ps:
        roles = Roles(clients, "client")
        try:
            for i in range(clients):
                roles.start(i, _hammer, *ps.client_args(), i, seconds, timeout)
            for i in range(clients):
                roles.expect(i, "ready", timeout + 30)
            t0 = time.perf_counter()
            for i in range(clients):
                roles.tell(i, "go")
            pairs = 0
            deadline = time.monotonic() + seconds + timeout
            while roles.running():
                if time.monotonic() > deadline:
                    raise ParameterServerError("the throughput clients did not finish")
                for ev in roles.events(0.5):
                    if ev.kind != "done":
                        raise roles.error(ev)
                    pairs += ev.payload
            wall = time.perf_counter() - t0
        finally:
            roles.close()
        rep = ps.finish().shards[0]
    return {"clients": clients, "n_params": n_params, "seconds": wall,
            "pulls": rep["pulls"], "pushes": rep["pushes"],
            "per_second": (rep["pulls"] + rep["pushes"]) / wall,
            "busy_fraction": 1.0 - rep["idle"] / rep["alive"]}
