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

Every process comes from a small pool of spawn processes kept warm between runs
(``Roles``); every wait has a timeout, and every process of a failed run is killed.
"""
from __future__ import annotations

import atexit
import os
import pickle
import signal
import socket
import threading
import time
import traceback
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterator, Sequence

import dill
import multiprocess as mp
import numpy as np
from multiprocess.connection import Connection, answer_challenge, deliver_challenge, wait

__all__ = ["MODES", "RULES", "ParameterServerError", "ShardDied", "ShardLost",
           "shard_ranges", "ssp_must_wait", "sgd_push", "adagrad_push", "elastic_push",
           "staleness_lr", "Shard", "Pulled", "ShardClient", "ServerReport",
           "ParameterServer", "Roles", "tell_driver", "from_driver", "shard_throughput"]

MODES = ("bsp", "ssp", "async")
RULES = ("sgd", "adagrad", "elastic")
_SPAWN = mp.get_context("spawn")
_POOL_MAX = 12                 # warm processes kept between runs
_TASK = b"ddl_lab-task:"       # marks a role for a pool process to run
_READY = b"ddl_lab-ready"      # a new pool process has imported what it needs


class ParameterServerError(RuntimeError):
    """A shard, a replica or the coordinator failed; the message says which and why."""


class ShardDied(ParameterServerError):
    """A shard's process died: its slice of θ is gone, so the run cannot go on."""


class ShardLost(ParameterServerError):
    """Seen from a client: a shard closed the connection (its process died or stopped)."""


# ------------------------------------------------------------- the update rules

def shard_ranges(n: int, shards: int) -> list[tuple[int, int]]:
    """[lo, hi) of each shard: ``shards`` equal slices of n parameters (sizes differ by ≤ 1)."""
    if not isinstance(shards, (int, np.integer)) or shards < 1:
        raise ValueError(f"shards must be a positive integer, got {shards!r}")
    if shards > n:
        raise ValueError(f"cannot split {n} parameters over {shards} shards: use at most {n}")
    edges = np.linspace(0, n, shards + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def ssp_must_wait(clock: int, clocks: Sequence[int], s: int) -> bool:
    """The stale-synchronous gate: must a replica at ``clock`` wait before it reads θ?

    ``clocks`` holds the clock of every live replica (its own included). It waits while
    it is more than ``s`` clocks ahead of the slowest one; s = 0 is BSP.
    """
    return clock - min(clocks) > s


def sgd_push(theta: np.ndarray, grad: np.ndarray, G: np.ndarray, lr: float,
             eps: float) -> tuple[np.ndarray, np.ndarray]:
    """A shard's plain SGD push handler: θ ← θ − lr·g (G is left alone)."""
    theta -= lr * grad
    return theta, G


def adagrad_push(theta: np.ndarray, grad: np.ndarray, G: np.ndarray, lr: float,
                 eps: float) -> tuple[np.ndarray, np.ndarray]:
    """A shard's Adagrad push handler (DistBelief): G ← G + g², θ ← θ − lr·g/(√G + eps).

    Each shard keeps G for its own slice only: Adagrad needs nothing from other shards.
    """
    G += grad * grad
    theta -= lr * grad / (np.sqrt(G) + eps)
    return theta, G


def elastic_push(theta: np.ndarray, delta: np.ndarray, G: np.ndarray, lr: float,
                 eps: float) -> tuple[np.ndarray, np.ndarray]:
    """EASGD's centre update: the replica pushes α(x_i − x̃) and the centre moves by it."""
    theta += delta
    return theta, G


_PUSH = {"sgd": sgd_push, "adagrad": adagrad_push, "elastic": elastic_push}


def staleness_lr(lr: float, staleness: int) -> float:
    """Zhang et al.'s staleness-aware rate: lr/τ for a gradient τ ≥ 1 updates old; a fresh
    gradient (τ = 0) keeps the full rate lr."""
    return lr / staleness if staleness > 0 else lr


# ------------------------------------------------------------- one shard's state

@dataclass
class _Log:
    t: list = field(default_factory=list)
    replica: list = field(default_factory=list)
    staleness: list = field(default_factory=list)
    lr: list = field(default_factory=list)


class Shard:
    """The state of one shard and what it does with each request (lesson 07).

    ``handle(sender, request)`` returns the replies to send as (receiver, message) pairs;
    the shard process feeds it what arrives on its sockets, and the tests call it
    directly. Requests: ``join``, ``pull``, ``push``, ``leave``, ``snapshot`` (an
    ungated read for the driver), ``get``/``accumulate``/``ops`` (Sandblaster).
    ``gate``, ``push`` and ``rate`` replace ``ssp_must_wait``, the rule's push handler and
    ``staleness_lr`` (the exercise plugs the learner's functions in here).
    """

    def __init__(self, index: int, theta: np.ndarray, *, rule: str = "sgd", lr: float = 0.1,
                 eps: float = 1e-8, mode: str = "async", s: int = 2,
                 staleness_aware: bool = False, gate: Callable | None = None,
                 push: Callable | None = None, rate: Callable | None = None):
        _validate(rule, lr, mode, s)
        self.index, self.rule, self.lr, self.eps, self.mode = index, rule, lr, eps, mode
        self.s = 0 if mode == "bsp" else s
        self.staleness_aware = staleness_aware
        self.gate = gate or ssp_must_wait
        self.push_fn = push or _PUSH[rule]
        self.rate = rate or staleness_lr
        self.vectors: dict[str, np.ndarray] = {"theta": np.array(theta, dtype=np.float64)}
        self.G = np.zeros_like(self.vectors["theta"])
        self.version = 0                               # gradients applied so far
        self.clocks: dict[Hashable, int] = {}          # live replicas -> pushes made
        self.pending: list[tuple[Hashable, float]] = []
        self.rounds: dict[int, list] = {}              # BSP: clock -> [(grad, who, version)]
        self.stopping = False
        self.log = _Log()
        self.gaps: list[tuple[float, Hashable, int]] = []
        self.joins: list[tuple[float, Hashable, int]] = []
        self.leaves: list[tuple[float, Hashable]] = []
        self.lost: list[tuple[float, Hashable]] = []
        self.pulls = self.pushes = self.requests = 0
        self.busy = 0.0                                # seconds inside handle()
        self.idle = 0.0                                # seconds the process waited for work
        self.born = time.perf_counter()
        self.batch: int | None = None                  # Sandblaster
        self.seen: set[int] = set()
        self.deferred: list[tuple] = []
        self.discarded = 0

    @property
    def theta(self) -> np.ndarray:
        return self.vectors["theta"]

    # -- dispatch
    def handle(self, sender: Hashable, request: tuple) -> list[tuple[Hashable, tuple]]:
        t = time.perf_counter()
        self.requests += 1
        handler = getattr(self, "_on_" + str(request[0]), None)
        if handler is None:
            raise ValueError(f"shard {self.index}: unknown request {request[0]!r} from "
                             f"{sender!r}")
        try:
            return handler(sender, *request[1:])
        finally:
            self.busy += time.perf_counter() - t

    # -- membership and the consistency gate
    def _on_join(self, who: Hashable) -> list:
        if who in self.clocks:
            raise ValueError(f"shard {self.index}: {who!r} joined twice")
        clock = min(self.clocks.values()) if self.clocks else 0   # late joiners start level
        self.clocks[who] = clock
        self.joins.append((time.perf_counter(), who, clock))
        return [(who, ("joined", clock, self.version))]

    def _on_leave(self, who: Hashable) -> list:
        if self.clocks.pop(who, None) is not None:
            self.leaves.append((time.perf_counter(), who))
        return self._progress()

    def lose(self, who: Hashable) -> list:
        """``who``'s connection dropped without a goodbye: report it, stop waiting for it."""
        if self.clocks.pop(who, None) is not None:
            self.lost.append((time.perf_counter(), who))
        self.pending = [p for p in self.pending if p[0] != who]
        return self._progress()

    def stop(self) -> list:
        """The driver ends the run: every waiting and every later pull is answered 'stop'."""
        self.stopping = True
        return self._release_ready()

    def _must_wait(self, who: Hashable) -> bool:
        if self.mode == "async" or who not in self.clocks:
            return False
        verdict = self.gate(self.clocks[who], list(self.clocks.values()), self.s)
        if not isinstance(verdict, (bool, np.bool_)):
            raise TypeError(f"the gate must return True (wait) or False (go), got "
                            f"{verdict!r} ({type(verdict).__name__})")
        return bool(verdict)

    def _release(self, who: Hashable, arrived: float, opened: float) -> tuple:
        """The answer to a pull that arrived at ``arrived`` and passed the gate at ``opened``."""
        if who in self.clocks:
            self.gaps.append((opened, who, self.clocks[who] - min(self.clocks.values())))
        return (who, ("params", self.theta.copy(), self.version, opened, arrived))

    def _release_ready(self) -> list:
        out, still = [], []
        for who, arrived in self.pending:
            if self.stopping:
                out.append((who, ("stop",)))
            elif self._must_wait(who):
                still.append((who, arrived))
            else:
                out.append(self._release(who, arrived, time.perf_counter()))
        self.pending = still
        return out

    def _on_pull(self, who: Hashable) -> list:
        self.pulls += 1
        if self.stopping:
            return [(who, ("stop",))]
        now = time.perf_counter()
        if self._must_wait(who):
            self.pending.append((who, now))
            return []
        return [self._release(who, now, now)]

    def _on_snapshot(self, who: Hashable) -> list:
        now = time.perf_counter()
        return [(who, ("params", self.theta.copy(), self.version, now, now))]

    # -- updates
    def _on_push(self, who: Hashable, grad: np.ndarray, version_read: int) -> list:
        self.pushes += 1
        grad = np.asarray(grad, dtype=np.float64)
        if grad.shape != self.theta.shape:
            raise ValueError(f"shard {self.index}: {who!r} pushed {grad.shape[0] if grad.ndim else 1}"
                             f" values, but this shard holds {self.theta.size} parameters")
        if self.mode == "bsp" and who in self.clocks:      # held until the clock is complete
            self.rounds.setdefault(self.clocks[who], []).append((grad, who, version_read))
            self.clocks[who] += 1
        else:
            self._apply(grad, who, self.version - version_read)
            if who in self.clocks:
                self.clocks[who] += 1
        return self._progress()

    def _apply(self, grad: np.ndarray, who: Hashable, tau: int) -> None:
        """Apply one gradient that is ``tau`` updates stale, and record it."""
        lr = self.lr
        if self.staleness_aware:
            lr = self.rate(self.lr, tau)
            try:
                lr = float(lr)
            except (TypeError, ValueError):
                raise TypeError(f"the staleness-aware rate must be a number, got {lr!r}") from None
            if not np.isfinite(lr):
                raise ValueError(f"the staleness-aware rate for staleness {tau} is {lr}")
        result = self.push_fn(self.theta, grad, self.G, lr, self.eps)
        if not (isinstance(result, tuple) and len(result) == 2):
            raise TypeError(f"the push handler must return (theta, G), got "
                            f"{type(result).__name__}")
        theta, G = (np.asarray(a, dtype=np.float64) for a in result)
        if theta.shape != self.theta.shape or G.shape != self.G.shape:
            raise ValueError(f"the push handler returned θ of shape {theta.shape} and G of "
                             f"shape {G.shape}; both must keep the shard's shape "
                             f"{self.theta.shape}")
        self.vectors["theta"], self.G = theta, G
        self.version += 1
        self.log.t.append(time.perf_counter())
        self.log.replica.append(who)
        self.log.staleness.append(tau)
        self.log.lr.append(lr)

    def _progress(self) -> list:
        """Apply every BSP clock all live replicas have pushed, then open what can go.

        A clock's gradients were all computed on the same θ: they are applied one after
        another (for SGD, θ − lr·Σg) and each counts as fresh (staleness 0).
        """
        while self.rounds:
            clock = min(self.rounds)
            if self.clocks and min(self.clocks.values()) <= clock:
                break
            base = self.version
            for grad, who, version_read in self.rounds.pop(clock):
                self._apply(grad, who, base - version_read)
        return self._release_ready()

    # -- Sandblaster: vectors that stay on the shard
    def _on_get(self, who: Hashable, name: str) -> list:
        return [(who, ("vector", self._vector(name).copy()))]

    def _on_accumulate(self, who: Hashable, batch: int, slice_id: int,
                       part: np.ndarray) -> list:
        if batch != self.batch or slice_id in self.seen:    # a backup task's late twin
            self.discarded += 1
            return []
        self.vectors["g_new"] += part
        self.seen.add(slice_id)
        out, still = [], []
        for item in self.deferred:
            (out if self._batch_complete(item[1], item[2]) else still).append(item)
        self.deferred = still
        return [(w, ("results", self._execute(ops))) for w, _, _, ops in out]

    def _on_ops(self, who: Hashable, batch: int | None, n_slices: int, ops: list) -> list:
        if batch is not None and not self._batch_complete(batch, n_slices):
            self.deferred.append((who, batch, n_slices, ops))
            return []
        return [(who, ("results", self._execute(ops)))]

    def _batch_complete(self, batch: int, n_slices: int) -> bool:
        return batch == self.batch and len(self.seen) >= n_slices

    def _vector(self, name: str) -> np.ndarray:
        if name not in self.vectors:
            raise KeyError(f"shard {self.index} has no vector {name!r} (it has "
                           f"{sorted(self.vectors)})")
        return self.vectors[name]

    def _execute(self, ops: list) -> list:
        results = []
        for op in ops:
            kind, args = op[0], op[1:]
            value = None
            if kind == "dot":
                value = float(self._vector(args[0]) @ self._vector(args[1]))
            elif kind == "axpy":                       # dst += alpha * src
                self._vector(args[0])[:] += args[1] * self._vector(args[2])
            elif kind == "copy":                       # dst = src
                self.vectors[args[0]] = self._vector(args[1]).copy()
            elif kind == "scale":                      # dst *= alpha
                self._vector(args[0])[:] *= args[1]
            elif kind == "new_batch":
                self.batch, self.seen = args[0], set()
                self.vectors["g_new"] = np.zeros_like(self.theta)
            else:
                raise ValueError(f"shard {self.index}: unknown vector operation {kind!r}")
            results.append(value)
        return results

    # -- the end
    def report(self) -> dict:
        return {"index": self.index, "theta": self.theta, "G": self.G,
                "version": self.version,
                "t": np.array(self.log.t), "replica": list(self.log.replica),
                "staleness": np.array(self.log.staleness, dtype=int),
                "lr": np.array(self.log.lr), "gaps": self.gaps, "joins": self.joins,
                "leaves": self.leaves, "lost": self.lost, "pulls": self.pulls,
                "pushes": self.pushes, "requests": self.requests, "busy": self.busy,
                "idle": self.idle, "alive": time.perf_counter() - self.born,
                "discarded": self.discarded}


def _validate(rule: str, lr: float, mode: str, s: int) -> None:
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if not isinstance(s, (int, np.integer)) or s < 0:
        raise ValueError(f"the staleness bound s must be an integer >= 0, got {s!r}")
    if not lr >= 0:
        raise ValueError(f"lr must be >= 0, got {lr!r}")


# ------------------------------------------------------------- the wire

def _send(conn: Connection, msg: tuple) -> None:
    conn.send_bytes(pickle.dumps(msg, protocol=5))


def _recv(conn: Connection, timeout: float, who: str) -> tuple:
    """The next message from ``who``; TimeoutError or ShardLost instead of hanging."""
    try:
        ready = conn.poll(timeout)
        data = conn.recv_bytes() if ready else None
    except (EOFError, OSError):
        raise ShardLost(f"{who} closed the connection (its process died or "
                        "stopped)") from None
    if data is None:
        raise TimeoutError(f"{who} did not answer within {timeout:g} s")
    return pickle.loads(data)


def _connect(address: tuple, authkey: bytes, timeout: float, who: str) -> Connection:
    try:
        sock = socket.create_connection(tuple(address), timeout=timeout)
    except OSError as e:
        raise ShardLost(f"cannot connect to {who} at {address}: {e}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(None)
    conn = Connection(sock.detach())
    try:
        if not conn.poll(timeout):
            raise TimeoutError(f"{who} did not accept the connection within {timeout:g} s")
        answer_challenge(conn, authkey)
        deliver_challenge(conn, authkey)
    except BaseException:
        conn.close()
        raise
    return conn


def _accept(server: socket.socket, authkey: bytes) -> Connection | None:
    try:
        sock, _ = server.accept()
    except BlockingIOError:
        return None
    sock.setblocking(True)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    conn = Connection(sock.detach())
    try:
        deliver_challenge(conn, authkey)
        answer_challenge(conn, authkey)
    except (mp.AuthenticationError, EOFError, OSError):
        conn.close()
        return None
    return conn


# ------------------------------------------------------------- the shard process

def _load(fn_bytes: bytes | None) -> Callable | None:
    return None if fn_bytes is None else dill.loads(fn_bytes)


def shard_main(parent: Connection, index: int, theta: np.ndarray, options: dict,
               authkey: bytes) -> dict:
    """A shard process: serve pulls, pushes and vector operations until told to finish.

    Runs as a role in a pool process; the learner's ``gate``/``push``/``rate``
    functions arrive dill-pickled in ``options``.
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
                _send(conn, msg)
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
                    conn = _accept(server, authkey)
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


# ------------------------------------------------------------- the client side

@dataclass
class Pulled:
    """What one pull brought back: θ, every shard's version, and when the gate opened."""

    theta: np.ndarray
    versions: tuple[int, ...]
    sent: float          # perf_counter times: request sent,
    arrived: float       # request arrived at the shard that held it longest,
    opened: float        # that shard's gate opened,
    received: float      # the last slice received

    @property
    def held(self) -> float:
        """Seconds the consistency gate kept this pull waiting."""
        return self.opened - self.arrived


class ShardClient:
    """One connection to every shard: what a replica, the driver or the coordinator holds.

    Every answer is awaited at most ``timeout`` seconds; a shard that died raises
    ``ShardLost`` instead of a hang.
    """

    def __init__(self, addresses: Sequence[tuple], ranges: Sequence[tuple[int, int]],
                 authkey: bytes, name: Hashable, timeout: float = 30.0):
        self.name, self.ranges, self.timeout = name, list(ranges), timeout
        self.n = self.ranges[-1][1]
        self.conns: list[Connection] = []
        try:
            for i, address in enumerate(addresses):
                self.conns.append(_connect(address, authkey, timeout, f"shard {i}"))
            for conn in self.conns:
                _send(conn, ("hello", name))
        except BaseException:
            self.close()
            raise

    def _ask(self, request: tuple) -> list[tuple]:
        for conn in self.conns:
            _send(conn, request)
        return [_recv(c, self.timeout, f"shard {i}") for i, c in enumerate(self.conns)]

    def _split(self, vec: np.ndarray) -> list[np.ndarray]:
        vec = np.asarray(vec, dtype=np.float64)
        if vec.shape != (self.n,):
            raise ValueError(f"expected a vector of {self.n} parameters, got shape "
                             f"{vec.shape}")
        return [vec[lo:hi] for lo, hi in self.ranges]

    def join(self) -> int:
        """Become a member of the gates; returns the clock this replica starts at."""
        return int(self._ask(("join",))[0][1])

    def leave(self) -> None:
        """Say goodbye: the gates stop counting this replica."""
        for conn in self.conns:
            _send(conn, ("leave",))

    def pull(self) -> Pulled | None:
        """θ from every shard (each waits at its gate); None once the run is stopping."""
        sent = time.perf_counter()
        replies = self._ask(("pull",))
        received = time.perf_counter()
        if any(r[0] == "stop" for r in replies):
            return None
        slow = max(replies, key=lambda r: r[3] - r[4])
        return Pulled(np.concatenate([r[1] for r in replies]), tuple(r[2] for r in replies),
                      sent, slow[4], slow[3], received)

    def push(self, grad: np.ndarray, versions: Sequence[int]) -> None:
        """Send each shard its slice of ``grad``, tagged with the version it was read at."""
        for conn, part, v in zip(self.conns, self._split(grad), versions):
            _send(conn, ("push", part, int(v)))

    def snapshot(self) -> tuple[np.ndarray, tuple[int, ...]]:
        """θ now, without joining or waiting at any gate (the driver's monitor)."""
        replies = self._ask(("snapshot",))
        return np.concatenate([r[1] for r in replies]), tuple(r[2] for r in replies)

    def get(self, name: str) -> np.ndarray:
        """A named vector kept on the shards (Sandblaster)."""
        return np.concatenate([r[1] for r in self._ask(("get", name))])

    def accumulate(self, batch: int, slice_id: int, vec: np.ndarray) -> None:
        """Add a data slice's gradient to the shards' g_new (each slice counted once)."""
        for conn, part in zip(self.conns, self._split(vec)):
            _send(conn, ("accumulate", batch, slice_id, part))

    def ops(self, ops: list, batch: int | None = None, n_slices: int = 0) -> list[list]:
        """Run vector operations on every shard (after ``batch`` has all its slices);
        returns each shard's results."""
        return [r[1] for r in self._ask(("ops", batch, n_slices, ops))]

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


# ------------------------------------------------------------- processes

def _watch_parent(parent: int) -> None:
    while True:
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(0.5)


def _pool_main(conn: Connection, parent: int) -> None:
    """A warm process: run one role after another until the driver says goodbye."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(1)
    except ImportError:
        pass
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
        try:
            fn, args = dill.loads(data[len(_TASK):])
            reply = ("done", dill.dumps(fn(conn, *args), recurse=True))
        except BaseException as e:
            tb = e.__traceback__.tb_next if e.__traceback__ else None
            reply = ("err", "".join(traceback.format_exception(type(e), e, tb)),
                     f"{type(e).__name__}: {e}")
        try:
            conn.send_bytes(pickle.dumps(reply, protocol=5))
        except OSError:
            return


def tell_driver(parent: Connection, *msg: Any) -> None:
    """From a role: send the driver a message (it arrives as a ``msg`` event)."""
    parent.send_bytes(pickle.dumps(("msg",) + msg, protocol=5))


def from_driver(parent: Connection, timeout: float) -> tuple:
    """In a role: the driver's next message (``go``, ``task``, ``stop``…), with a timeout."""
    return _recv(parent, timeout, "the driver")


class _Proc:
    def __init__(self) -> None:
        mine, theirs = _SPAWN.Pipe(duplex=True)
        self.process = _SPAWN.Process(target=_pool_main, args=(theirs, os.getpid()),
                                      daemon=True, name="ddl_lab-ps")
        self.process.start()
        theirs.close()
        self.conn = mine
        self.booted = False

    def wait_booted(self, timeout: float) -> None:
        """Wait until the new process can read a task (so sending one does not block)."""
        if not self.booted:
            if not self.conn.poll(timeout) or self.conn.recv_bytes() != _READY:
                raise ParameterServerError(f"a new process did not start within {timeout:g} s")
            self.booted = True

    @property
    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(1.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(1.0)
        self.conn.close()


_IDLE: list[_Proc] = []


@atexit.register
def _kill_pool() -> None:
    while _IDLE:
        _IDLE.pop().kill()


@dataclass
class Event:
    """Something a role did: ``msg`` (payload = its message), ``done`` (payload = its
    result), ``err`` (payload = (traceback, summary)) or ``died`` (payload = exit code)."""

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
                p.kill()
        self.procs = reuse + [_Proc() for _ in range(n - len(reuse))]
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
        self.procs[i].conn.send_bytes(_TASK + dill.dumps((fn, args), recurse=True))
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
        self.procs[i].process.terminate()

    def running(self) -> list[int]:
        return [i for i, s in enumerate(self.state) if s == "running"]

    def waitables(self) -> list:
        out = []
        for i in self.running():
            out += [self.procs[i].conn, self.procs[i].process.sentinel]
        return out

    def collect(self, ready: Sequence) -> list[Event]:
        """The events of the processes among ``ready`` (objects ``wait`` returned)."""
        events: list[Event] = []
        ready_ids = {id(o) for o in ready}
        for i in self.running():
            p = self.procs[i]
            if id(p.conn) in ready_ids or id(p.process.sentinel) in ready_ids:
                events += self._drain(i)
        return events

    def _drain(self, i: int) -> list[Event]:
        p, events = self.procs[i], []
        try:
            while self.state[i] == "running" and p.conn.poll(0):
                msg = pickle.loads(p.conn.recv_bytes())
                if msg[0] == "msg":
                    events.append(Event(i, "msg", msg[1:]))
                elif msg[0] == "done":
                    self.state[i] = "done"
                    events.append(Event(i, "done", dill.loads(msg[1])))
                else:
                    self.state[i] = "failed"
                    events.append(Event(i, "err", (msg[1], msg[2])))
        except (EOFError, OSError):                # the pipe closed: it is dying
            p.process.join(1.0)
        if self.state[i] == "running" and not p.alive:
            p.process.join(1.0)
            self.state[i] = "died"
            self.exitcodes[i] = p.process.exitcode
            events.append(Event(i, "died", p.process.exitcode))
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
            return ParameterServerError(f"{who} failed: {ev.payload[1]}\n\n{ev.payload[0]}")
        if ev.kind == "died":
            return ParameterServerError(f"{who} died ({_exit_text(ev.payload)})")
        return ParameterServerError(f"{who}: unexpected {ev.kind} {ev.payload!r:.200}")

    def close(self) -> None:
        """Return cleanly finished processes to the pool, kill the rest; never raises."""
        if self.state and self.state[0] == "closed":
            return
        for i, p in enumerate(self.procs):
            if self.state[i] in ("idle", "done") and p.alive and len(_IDLE) < _POOL_MAX:
                _IDLE.append(p)
            else:
                p.kill()
        self.state = ["closed"] * len(self.procs)


def _exit_text(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"exit code {code}, {signal.Signals(-code).name}"
        except ValueError:
            pass
    return f"exit code {code}"


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
        _validate(rule, lr, mode, s)
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
                    f"shard {ev.index} died ({_exit_text(ev.payload)}). It held "
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
        return dill.dumps(fn, recurse=True)
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
