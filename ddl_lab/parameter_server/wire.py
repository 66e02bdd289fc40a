"""The parameter server's wire (lesson 07): pickled messages over authenticated loopback
TCP sockets (``multiprocess.connection``'s challenge, a key from ``os.urandom``), and the
client a replica, the driver or the coordinator holds — one connection to every shard.

Every answer is awaited with a timeout; a shard that died raises ``ShardLost``.
"""
from __future__ import annotations

import os
import pickle
import socket
import struct
import time
from dataclasses import dataclass
from typing import Hashable, Sequence

import multiprocess as mp
import numpy as np
from multiprocess.connection import Connection, answer_challenge, deliver_challenge

from ddl_lab.parameter_server.errors import ShardLost

__all__ = ["send_msg", "recv_msg", "connect", "accept", "Pulled", "ShardClient"]

_HANDSHAKE_S = 5              # seconds a new client has to prove it holds the key


def send_msg(conn: Connection, msg: tuple) -> None:
    """Send one message (any picklable tuple)."""
    conn.send_bytes(pickle.dumps(msg, protocol=5))


def recv_msg(conn: Connection, timeout: float, who: str) -> tuple:
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


def connect(address: tuple, authkey: bytes, timeout: float, who: str) -> Connection:
    """Connect to a shard at ``address`` and prove, both ways, that we hold ``authkey``."""
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


def accept(server: socket.socket, authkey: bytes) -> Connection | None:
    """On a shard: the next client that proves it holds ``authkey`` (None if none waits)."""
    try:
        sock, _ = server.accept()
    except BlockingIOError:
        return None
    sock.setblocking(True)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    _read_timeout(sock, _HANDSHAKE_S)       # a client that says nothing cannot hold the shard
    conn = Connection(sock.detach())
    try:
        deliver_challenge(conn, authkey)
        answer_challenge(conn, authkey)
    except (mp.AuthenticationError, EOFError, OSError):
        conn.close()
        return None
    with socket.socket(fileno=os.dup(conn.fileno())) as same:
        _read_timeout(same, 0)               # proved: reads wait as long as they need again
    return conn


def _read_timeout(sock: socket.socket, seconds: float) -> None:
    """A blocking read on ``sock`` fails (EAGAIN) after ``seconds`` (0: never)."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(seconds), 0))



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
                self.conns.append(connect(address, authkey, timeout, f"shard {i}"))
            for conn in self.conns:
                send_msg(conn, ("hello", name))
        except BaseException:
            self.close()
            raise

    def _ask(self, request: tuple) -> list[tuple]:
        for conn in self.conns:
            send_msg(conn, request)
        return [recv_msg(c, self.timeout, f"shard {i}") for i, c in enumerate(self.conns)]

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
            send_msg(conn, ("leave",))

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
            send_msg(conn, ("push", part, int(v)))

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
            send_msg(conn, ("accumulate", batch, slice_id, part))

    def ops(self, ops: list, batch: int | None = None, n_slices: int = 0) -> list[list]:
        """Run vector operations on every shard (after ``batch`` has all its slices);
        returns each shard's results."""
        return [r[1] for r in self._ask(("ops", batch, n_slices, ops))]

    def close(self) -> None:
        for conn in self.conns:
            conn.close()

