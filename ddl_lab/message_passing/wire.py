"""What lesson 04's communicator sends, and how (its engine, not what the lesson reads).

A message is a frame: a header (tag, codec, number of parts), the parts' lengths, then the
parts: a pickle stream (protocol 5) and the raw memory of every numpy array or CPU tensor
in it, sent without copies. ``Wire`` keeps one outgoing queue and one incremental reader
per peer and moves bytes on every connection while it waits (so two ranks that both send
first do not deadlock). ``handshake`` proves, both ways, that the two ends of a new
connection hold the same key.
"""
from __future__ import annotations

import io
import pickle
import select
import socket
import struct
import sys
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from multiprocess import AuthenticationError
from multiprocess.connection import answer_challenge, deliver_challenge

from ddl_lab.runtime.pickling import dumps, loads

__all__ = ["CommError", "CommTimeout", "CommAborted", "Wire", "Mail", "encode", "decode",
           "handshake", "size_text", "BYE", "ABORT", "TEXT"]

BYE, ABORT = -2, -3                           # control frames: "I am done", "I failed"
_HEAD = struct.Struct("!qBI")                  # tag, codec, number of parts
_LEN = struct.Struct("!Q")
_PICKLE, _DILL, TEXT = 0, 1, 2


class CommError(RuntimeError):
    """A message could not be sent or received; the message names the ranks involved."""


class CommTimeout(CommError):
    """A rank waited longer than the timeout for a message (a deadlock, most often)."""


class CommAborted(CommError):
    """Another rank failed, so this one stopped too."""


# ---------------------------------------------------------------- the wire format

class _Pickler(pickle.Pickler):
    """Pickle protocol 5 that sends CPU tensors as numpy arrays (out-of-band, no copy)."""

    def reducer_override(self, obj: Any) -> Any:
        torch = sys.modules.get("torch")
        if torch is not None and type(obj) in (torch.Tensor, torch.nn.Parameter) \
                and obj.device.type == "cpu":
            try:
                return _tensor_from_numpy, (obj.detach().numpy(), obj.requires_grad)
            except (TypeError, RuntimeError):     # bfloat16, conjugate views: pickle as usual
                return NotImplemented
        return NotImplemented


def _tensor_from_numpy(array: Any, requires_grad: bool) -> Any:
    import torch
    return torch.from_numpy(array).requires_grad_(requires_grad)


def encode(obj: Any) -> tuple[int, list[memoryview]]:
    """(codec, parts): the pickle stream, then each array's raw memory."""
    buffers: list[pickle.PickleBuffer] = []
    f = io.BytesIO()
    try:
        _Pickler(f, protocol=5, buffer_callback=buffers.append).dump(obj)
        return _PICKLE, [f.getbuffer()] + [b.raw() for b in buffers]
    except Exception:           # a lambda, a class from a notebook cell: sent by value
        return _DILL, [memoryview(dumps(obj))]


def decode(codec: int, parts: list) -> Any:
    """The object ``encode`` turned into (codec, parts)."""
    if codec == _PICKLE:
        return pickle.loads(parts[0], buffers=parts[1:])
    if codec == _DILL:
        return loads(bytes(parts[0]))
    return bytes(parts[0]).decode()


@dataclass
class Mail:
    src: int
    tag: int
    codec: int
    parts: list


class _Peer:
    """One connection: an outgoing queue and an incremental reader of frames."""

    def __init__(self, rank: int, sock: socket.socket):
        self.rank, self.sock = rank, sock
        self.out: deque[memoryview] = deque()
        self.bye = False          # it said it is done
        self.eof = False          # its end is closed
        self.sent = self.arrived = 0
        self._start_frame()

    def _start_frame(self) -> None:
        self.stage, self.buf, self.pos = "head", bytearray(_HEAD.size), 0
        self.tag = self.codec = 0
        self.parts: list[bytearray] = []
        self.part = 0

    def want(self) -> memoryview:
        """Where the next bytes of the current frame go."""
        if self.stage == "body":
            return memoryview(self.parts[self.part])[self.pos:]
        return memoryview(self.buf)[self.pos:]

    def got(self, n: int) -> tuple[int, int, list] | None:
        """Account for n bytes read; returns (tag, codec, parts) once a frame is complete."""
        self.pos += n
        if self.stage == "head" and self.pos == len(self.buf):
            self.tag, self.codec, count = _HEAD.unpack(self.buf)
            self.stage, self.buf, self.pos = "lens", bytearray(_LEN.size * count), 0
        if self.stage == "lens" and self.pos == len(self.buf):
            lens = [_LEN.unpack_from(self.buf, i)[0] for i in range(0, len(self.buf), _LEN.size)]
            self.parts = [bytearray(k) for k in lens]
            self.stage, self.pos, self.part = "body", 0, 0
        if self.stage == "body":
            while self.part < len(self.parts) and self.pos == len(self.parts[self.part]):
                self.part, self.pos = self.part + 1, 0
            if self.part == len(self.parts):
                frame = (self.tag, self.codec, self.parts)
                self._start_frame()
                return frame
        return None

# ------------------------------------------------------------------ moving bytes

class Wire:
    """The connections of one rank to every other: queues out, frames in, progress.

    ``progress(done, ...)`` moves bytes in and out on every connection until ``done()``
    holds or the timeout passes; frames that arrive go to ``mailbox`` (and the record of
    arrivals). ``Comm`` (``comm.py``) builds the MPI-style calls on it.
    """

    def __init__(self, rank: int, socks: dict[int, socket.socket], timeout: float):
        self.rank, self.timeout = rank, float(timeout)
        self._peers = {r: _Peer(r, s) for r, s in socks.items()}
        self._by_fd = {p.sock.fileno(): p for p in self._peers.values()}
        self._mailbox: list[Mail] = []
        self._doing = "idle"
        self._sent: list[tuple] = []           # (dst, seq, tag, op, nbytes, time)
        self._arrived: list[tuple] = []        # (src, seq, time)
        self._closed = False

    def shutdown(self) -> None:
        """Close every connection now."""
        self._closed = True
        for p in self._peers.values():
            p.sock.close()

    def post(self, peer: _Peer, tag: int, codec: int, parts: list) -> None:
        """Queue one frame for ``peer`` (``progress`` sends it)."""
        head = _HEAD.pack(tag, codec, len(parts)) + b"".join(_LEN.pack(p.nbytes)
                                                            for p in parts)
        peer.out.append(memoryview(head))
        peer.out.extend(p for p in parts if p.nbytes)

    def progress(self, done: Callable[[], bool], timeout: float, doing: str,
                 waiting_on: list[int] | None, hint: Callable[[], str] = lambda: "") -> None:
        """Move bytes in and out on every connection until ``done()`` or the timeout."""
        self._doing = doing
        deadline = time.monotonic() + timeout
        while not done():
            gone = [r for r in (waiting_on or self._peers) if r != self.rank
                    and self._peers[r].eof]
            if gone and (waiting_on or len(gone) == len(self._peers)):
                raise CommError(f"rank {self.rank} is still {doing}, but rank(s) {gone} "
                                "already finished their function")
            left = deadline - time.monotonic()
            if left <= 0:
                raise CommTimeout(f"rank {self.rank} timed out after {timeout:g} s "
                                  f"{doing}{hint()}")
            live = [p for p in self._peers.values() if not p.eof]
            r, w, _ = select.select([p.sock for p in live],
                                    [p.sock for p in live if p.out], [], min(left, 0.5))
            for s in w:
                self._pump_out(self._by_fd[s.fileno()])
            for s in r:
                self._pump_in(self._by_fd[s.fileno()])

    def _pump_out(self, p: _Peer) -> None:
        try:
            while p.out:
                n = p.sock.send(p.out[0])
                if n == p.out[0].nbytes:
                    p.out.popleft()
                else:
                    p.out[0] = p.out[0][n:]
        except BlockingIOError:
            pass
        except OSError:
            self._lost(p)

    def _pump_in(self, p: _Peer) -> None:
        while not p.eof:
            try:
                n = p.sock.recv_into(p.want())
            except BlockingIOError:
                return
            except OSError:
                n = 0
            if n == 0:
                self._lost(p)
                return
            frame = p.got(n)
            if frame is not None:
                self._arrive(p, *frame)

    def _arrive(self, p: _Peer, tag: int, codec: int, parts: list) -> None:
        if tag == BYE:
            p.bye = True
        elif tag == ABORT:
            raise CommAborted(f"rank {self.rank} stopped ({self._doing}) because rank "
                              f"{p.rank} failed: {decode(TEXT, parts)}")
        else:
            self._arrived.append((p.rank, p.arrived, time.time()))
            p.arrived += 1
            self._mailbox.append(Mail(p.rank, tag, codec, parts))

    def _lost(self, p: _Peer) -> None:
        p.eof = True
        p.out.clear()
        if not p.bye:
            raise CommError(f"rank {self.rank} lost its connection to rank {p.rank} while "
                            f"{self._doing}: rank {p.rank} died or was killed")


def size_text(nbytes: float) -> str:
    """'512 B', '1.5 KB', '3.0 MB': a size in words."""
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1024 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return ""


# --------------------------------------------------------------- a new connection

class _Framed:
    """Length-prefixed messages over a socket with a timeout, for the auth handshake."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def send_bytes(self, data: bytes) -> None:
        self.sock.sendall(struct.pack("!I", len(data)) + bytes(data))

    def recv_bytes(self, maxlength: int | None = None) -> bytes:
        n = struct.unpack("!I", self._exactly(4))[0]
        if maxlength is not None and n > maxlength:
            raise AuthenticationError(f"handshake message too long ({n} bytes)")
        return self._exactly(n)

    def _exactly(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the other side closed the connection")
            buf += chunk
        return bytes(buf)


def handshake(sock: socket.socket, authkey: bytes, rank: int, accepting: bool) -> int:
    """Mutual HMAC challenge (multiprocess's), then the connecting side names its rank."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)    # no Nagle stalls
    conn = _Framed(sock)
    if accepting:
        deliver_challenge(conn, authkey)
        answer_challenge(conn, authkey)
        return int.from_bytes(conn.recv_bytes(8), "big")
    answer_challenge(conn, authkey)
    deliver_challenge(conn, authkey)
    conn.send_bytes(rank.to_bytes(8, "big"))
    return -1
