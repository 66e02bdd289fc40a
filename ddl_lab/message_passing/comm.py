"""Message passing between workers that share nothing (lesson 04).

``comm_run(fn, n)`` runs ``fn(comm)`` on ``n`` real worker processes (the runtime's
cluster) and returns the results in rank order. ``comm`` is a small MPI-style
communicator: one authenticated loopback TCP connection per pair of ranks, and nothing
else shared::

    def ping(comm):
        if comm.rank == 0:
            comm.send({"x": 1}, dest=1, tag=7)
        elif comm.rank == 1:
            return comm.recv(source=0, tag=7)

Point to point: ``send`` and ``recv`` (tagged; every wait has a timeout whose error names
the ranks and the tag). Collectives, built on them the simple way (the root talks to every
other rank): ``bcast``, ``scatter``, ``gather``, ``reduce``, ``allreduce``, ``alltoall``,
``barrier``. A message is any picklable object; numpy arrays and CPU tensors travel as
out-of-band buffers (pickle protocol 5): sent from the array's own memory and received
into the buffer the new array lives in, without copies. Every message is recorded
(source, destination, tag, bytes, times) for lesson 04's sequence diagrams.

A send returns once its bytes are handed to the operating system, so the buffer may be
reused (MPI_Send's guarantee). While a rank waits to send or receive, it keeps reading
whatever its peers send, so two ranks that both send first do not deadlock.
"""
from __future__ import annotations

import io
import operator
import os
import pickle
import select
import socket
import struct
import sys
import time
from collections import deque
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import dill
from multiprocess import AuthenticationError
from multiprocess.connection import answer_challenge, deliver_challenge

from ddl_lab.runtime import WorkerError, device, shared_cluster

__all__ = ["ANY_SOURCE", "ANY_TAG", "Comm", "CommError", "CommTimeout", "CommAborted",
           "Message", "Trace", "connect", "comm_run", "comm_trace", "collectives_side_by_side",
           "slowest_rank", "plot_messages", "plot_collectives", "plot_side_by_side"]

ANY_SOURCE = -1
ANY_TAG = -1
_BYE, _ABORT = -2, -3                         # control frames: "I am done", "I failed"
_TAGS = {"bcast": -10, "scatter": -11, "gather": -12, "reduce": -13, "alltoall": -14,
         "barrier": -15}                       # collectives never match a user's recv
_HEAD = struct.Struct("!qBI")                  # tag, codec, number of parts
_LEN = struct.Struct("!Q")
_PICKLE, _DILL, _TEXT = 0, 1, 2


class CommError(RuntimeError):
    """A message could not be sent or received; the message names the ranks involved."""


class CommTimeout(CommError):
    """A rank waited longer than the timeout for a message (a deadlock, most often)."""


class CommAborted(CommError):
    """Another rank failed, so this one stopped too."""


@dataclass(frozen=True)
class Message:
    """One message: who sent it to whom, its tag, the operation, its size, when."""

    src: int
    dst: int
    tag: int
    op: str              # "send" for point to point, else the collective
    nbytes: int
    sent: float          # seconds, when the send started
    arrived: float       # seconds, when its last byte was read at dst (nan: never)


@dataclass
class Trace:
    """What ``comm_trace`` returns: the results in rank order and every message sent."""

    results: list
    messages: list[Message]

    def ops(self) -> list[str]:
        """The operations in the order they first sent a message."""
        return list(dict.fromkeys(m.op for m in sorted(self.messages, key=lambda m: m.sent)))

    def select(self, op: str) -> list[Message]:
        return [m for m in self.messages if m.op == op]


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


def _encode(obj: Any) -> tuple[int, list[memoryview]]:
    """(codec, parts): the pickle stream, then each array's raw memory."""
    buffers: list[pickle.PickleBuffer] = []
    f = io.BytesIO()
    try:
        _Pickler(f, protocol=5, buffer_callback=buffers.append).dump(obj)
        return _PICKLE, [f.getbuffer()] + [b.raw() for b in buffers]
    except Exception:           # a lambda, a class from a notebook cell: dill sends it by value
        return _DILL, [memoryview(dill.dumps(obj, recurse=True))]


def _decode(codec: int, parts: list) -> Any:
    if codec == _PICKLE:
        return pickle.loads(parts[0], buffers=parts[1:])
    if codec == _DILL:
        return dill.loads(bytes(parts[0]))
    return bytes(parts[0]).decode()


@dataclass
class _Mail:
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


# ------------------------------------------------------------------ the communicator

class Comm:
    """An MPI-style communicator between ``size`` processes (lesson 04).

    Made by ``connect()`` on every rank (``comm_run`` does it for you). ``timeout`` is
    how long any single wait (a recv, a send the peer does not drain) may take.
    """

    def __init__(self, rank: int, size: int, socks: dict[int, socket.socket],
                 timeout: float = 10.0):
        self.rank, self.size, self.timeout = rank, size, float(timeout)
        self._peers = {r: _Peer(r, s) for r, s in socks.items()}
        self._by_fd = {p.sock.fileno(): p for p in self._peers.values()}
        self._mailbox: list[_Mail] = []
        self._op: str | None = None            # the collective in progress, for records
        self._doing = "idle"
        self._sent: list[tuple] = []           # (dst, seq, tag, op, nbytes, time)
        self._arrived: list[tuple] = []        # (src, seq, time)
        self._self_seq = 0
        self._closed = False

    def __repr__(self) -> str:
        return f"Comm(rank={self.rank}, size={self.size})"

    # -- point to point
    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Send ``obj`` to rank ``dest``; returns once its buffer may be reused."""
        self._check_rank(dest, f"send(dest={dest!r})")
        self._check_tag(tag, "send")
        self._send(obj, dest, tag)

    def recv(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
             timeout: float | None = None) -> Any:
        """Wait for a message from ``source`` (or any) with ``tag`` (or any); return it.

        Messages with other tags stay queued for later recvs. Raises ``CommTimeout``
        after ``timeout`` seconds (default: the communicator's), naming ranks and tag.
        """
        if source != ANY_SOURCE:
            self._check_rank(source, f"recv(source={source!r})")
        if tag != ANY_TAG:
            self._check_tag(tag, "recv")
        if timeout is not None and not timeout > 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        return self._recv(source, tag, timeout)

    # -- collectives (linear: the root sends to / receives from every other rank)
    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """Every rank returns the root's ``obj``."""
        with self._collective("bcast", root):
            if self.rank == root:
                for r in self._others(root):
                    self._send(obj, r, _TAGS["bcast"])
                return obj
            return self._recv(root, _TAGS["bcast"])

    def scatter(self, chunks: Sequence | None = None, root: int = 0) -> Any:
        """Rank r returns ``chunks[r]`` of the root's list (one item per rank)."""
        with self._collective("scatter", root):
            if self.rank == root:
                if chunks is None or len(chunks) != self.size:
                    got = "None" if chunks is None else f"{len(chunks)} items"
                    raise ValueError(f"scatter on the root (rank {root}) needs a list of "
                                     f"exactly {self.size} items, one per rank; got {got}")
                for r in self._others(root):
                    self._send(chunks[r], r, _TAGS["scatter"])
                return chunks[root]
            return self._recv(root, _TAGS["scatter"])

    def gather(self, obj: Any, root: int = 0) -> list | None:
        """The root returns ``[obj of rank 0, ..., obj of rank size-1]``; others None."""
        with self._collective("gather", root):
            if self.rank != root:
                self._send(obj, root, _TAGS["gather"])
                return None
            return [obj if r == root else self._recv(r, _TAGS["gather"])
                    for r in range(self.size)]

    def reduce(self, obj: Any, op: Callable[[Any, Any], Any] = operator.add,
               root: int = 0) -> Any:
        """The root returns op(...op(op(x0, x1), x2)..., x_{n-1}) (rank order); others None."""
        with self._collective("reduce", root):
            items = self.gather(obj, root)
            if items is None:
                return None
            total = items[0]
            for x in items[1:]:
                total = op(total, x)
            return total

    def allreduce(self, obj: Any, op: Callable[[Any, Any], Any] = operator.add) -> Any:
        """Every rank returns the reduction of all ranks' ``obj`` (reduce, then bcast)."""
        with self._collective("allreduce", 0):
            return self.bcast(self.reduce(obj, op, root=0), root=0)

    def alltoall(self, objs: Sequence) -> list:
        """Rank r sends ``objs[j]`` to rank j; returns what every rank sent to r, in rank order."""
        with self._collective("alltoall", 0):
            if len(objs) != self.size:
                raise ValueError(f"alltoall needs a list of exactly {self.size} items (one "
                                 f"per destination rank), got {len(objs)}")
            for r in self._others(self.rank):
                self._send(objs[r], r, _TAGS["alltoall"])
            return [objs[r] if r == self.rank else self._recv(r, _TAGS["alltoall"])
                    for r in range(self.size)]

    def barrier(self) -> None:
        """Return only once every rank has called barrier."""
        with self._collective("barrier", 0):
            self.gather(None, root=0)
            self.bcast(None, root=0)

    # -- records and life cycle
    def records(self) -> dict:
        """This rank's message records (``comm_trace`` joins every rank's into a Trace)."""
        return {"rank": self.rank, "sent": list(self._sent), "arrived": list(self._arrived)}

    def close(self, timeout: float | None = None) -> None:
        """Say goodbye to every rank and wait until every rank has said it too.

        Warns about messages sent to this rank that it never received.
        """
        if self._closed:
            return
        for p in self._peers.values():
            self._post(p, _BYE, _TEXT, [])
        self._progress(lambda: all(p.bye and not p.out for p in self._peers.values()),
                       timeout or self.timeout, "waiting for the other ranks to finish", None)
        left = [m for m in self._mailbox]
        if left:
            what = ", ".join(f"from rank {m.src} with tag {_tag_name(m.tag)}" for m in left)
            print(f"warning: rank {self.rank} never received {len(left)} message(s) sent "
                  f"to it: {what}", file=sys.stderr)
        self.shutdown()

    def abort(self, reason: str) -> None:
        """Tell every rank this one failed (best effort, within a second), then close."""
        if self._closed:
            return
        for p in self._peers.values():
            if not p.eof:
                self._post(p, _ABORT, _TEXT, [memoryview(reason.encode())])
        try:
            self._progress(lambda: not any(p.out for p in self._peers.values() if not p.eof),
                           1.0, "aborting", None)
        except CommError:
            pass
        self.shutdown()

    def shutdown(self) -> None:
        """Close every connection now."""
        self._closed = True
        for p in self._peers.values():
            p.sock.close()

    # -- internals
    def _others(self, root: int) -> list[int]:
        return [r for r in range(self.size) if r != root]

    def _check_rank(self, r: Any, call: str) -> None:
        if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < self.size:
            raise ValueError(f"rank {self.rank}: {call}: there is no rank {r!r}; this world "
                             f"has ranks 0..{self.size - 1} (size {self.size})")

    def _check_tag(self, tag: Any, call: str) -> None:
        if isinstance(tag, bool) or not isinstance(tag, int) or tag < 0:
            raise ValueError(f"rank {self.rank}: {call}: a tag must be an int >= 0, got "
                             f"{tag!r}")

    @contextmanager
    def _collective(self, name: str, root: int) -> Iterator[None]:
        self._check_rank(root, f"{name}(root={root!r})")
        outer = self._op
        self._op = outer or name
        try:
            yield
        finally:
            self._op = outer

    def _send(self, obj: Any, dest: int, tag: int) -> None:
        t = time.time()
        codec, parts = _encode(obj)
        nbytes = sum(p.nbytes for p in parts)
        op = self._op or "send"
        if dest == self.rank:            # to itself: a copy into its own mailbox
            self._mailbox.append(_Mail(dest, tag, codec, [bytearray(p) for p in parts]))
            self._sent.append((dest, self._self_seq, tag, op, nbytes, t))
            self._arrived.append((dest, self._self_seq, t))
            self._self_seq += 1
            return
        peer = self._peers[dest]
        self._sent.append((dest, peer.sent, tag, op, nbytes, t))
        peer.sent += 1
        self._post(peer, tag, codec, parts)
        doing = (f"sending {_size(nbytes)} to rank {dest} in {self._op}" if self._op else
                 f"sending {_size(nbytes)} with send(dest={dest}, tag={tag})")
        self._progress(lambda: not peer.out, self.timeout, doing, [dest],
                       lambda: f" (is rank {dest} stuck outside the communicator?)")

    def _post(self, peer: _Peer, tag: int, codec: int, parts: list) -> None:
        head = _HEAD.pack(tag, codec, len(parts)) + b"".join(_LEN.pack(p.nbytes)
                                                            for p in parts)
        peer.out.append(memoryview(head))
        peer.out.extend(p for p in parts if p.nbytes)

    def _recv(self, source: int, tag: int, timeout: float | None = None) -> Any:
        found: list[_Mail] = []

        def match() -> bool:
            for i, m in enumerate(self._mailbox):
                if (source in (ANY_SOURCE, m.src)) and (m.tag == tag if tag != ANY_TAG
                                                        else m.tag >= 0):
                    found.append(self._mailbox.pop(i))
                    return True
            return False

        def hint() -> str:
            if self._op:
                return (f". Did every rank call {self._op}, with the same root? (one rank "
                        "skipping it, or calling another collective, is a deadlock)")
            src = "any rank" if source == ANY_SOURCE else f"rank {source}"
            text = (f": no message from {src} with tag {_tag_name(tag)} came. Does {src} "
                    f"call send(..., dest={self.rank}, tag={_tag_name(tag)})?")
            queued = sorted({m.tag for m in self._mailbox
                             if source in (ANY_SOURCE, m.src) and m.tag >= 0})
            return text + (f" It did send tag(s) {queued}, still unreceived." if queued else "")

        doing = (f"waiting in {self._op} for rank {source}'s message" if self._op else
                 f"waiting in recv(source={_src_name(source)}, tag={_tag_name(tag)})")
        self._progress(match, timeout or self.timeout, doing,
                       None if source == ANY_SOURCE else [source], hint)
        m = found[0]
        try:
            return _decode(m.codec, m.parts)
        except Exception as e:
            raise CommError(f"rank {self.rank} could not unpickle a message from rank "
                            f"{m.src} (tag {_tag_name(m.tag)}): {type(e).__name__}: {e}. "
                            "Send plain data (numbers, lists, dicts, arrays, tensors).") from None

    def _progress(self, done: Callable[[], bool], timeout: float, doing: str,
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
        if tag == _BYE:
            p.bye = True
        elif tag == _ABORT:
            raise CommAborted(f"rank {self.rank} stopped ({self._doing}) because rank "
                              f"{p.rank} failed: {_decode(_TEXT, parts)}")
        else:
            self._arrived.append((p.rank, p.arrived, time.time()))
            p.arrived += 1
            self._mailbox.append(_Mail(p.rank, tag, codec, parts))

    def _lost(self, p: _Peer) -> None:
        p.eof = True
        p.out.clear()
        if not p.bye:
            raise CommError(f"rank {self.rank} lost its connection to rank {p.rank} while "
                            f"{self._doing}: rank {p.rank} died or was killed")


def _tag_name(tag: int) -> str:
    if tag == ANY_TAG:
        return "ANY_TAG"
    names = {v: k for k, v in _TAGS.items()}
    return f"<{names[tag]}>" if tag in names else str(tag)


def _src_name(source: int) -> str:
    return "ANY_SOURCE" if source == ANY_SOURCE else str(source)


def _size(nbytes: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if nbytes < 1024 or unit == "GB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return ""


# --------------------------------------------------------------- making the mesh

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


def _handshake(sock: socket.socket, authkey: bytes, rank: int, accepting: bool) -> int:
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


def connect(timeout: float = 10.0, authkey: bytes | None = None) -> Comm:
    """Build the communicator on this worker: a connection to every other rank (lesson 04).

    Runs on every rank of an initialised ``torch.distributed`` group (a ``Cluster`` worker
    or ``torchrun``); the listening addresses travel through its store. Loopback only:
    all ranks on one machine. Rank j connects to every lower rank and accepts every higher
    one; both ends prove they hold ``authkey`` (random, from rank 0, if not given).
    """
    import torch.distributed as dist
    if not timeout or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("connect() runs on a worker whose torch.distributed group is "
                           "initialised: use comm_run(fn, world_size) from a notebook, or "
                           "torchrun")
    rank, size = dist.get_rank(), dist.get_world_size()
    if authkey is None:
        box = [os.urandom(32) if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        authkey = box[0]
    server = socket.create_server(("127.0.0.1", 0), backlog=max(size, 1))
    socks: dict[int, socket.socket] = {}
    try:
        server.settimeout(timeout)
        addrs: list = [None] * size
        dist.all_gather_object(addrs, server.getsockname())
        for r in range(rank):
            s = socket.create_connection(addrs[r], timeout=timeout)
            socks[r] = s
            _handshake(s, authkey, rank, accepting=False)
        for _ in range(rank + 1, size):
            s, _ = server.accept()
            s.settimeout(timeout)
            r = _handshake(s, authkey, rank, accepting=True)
            if not rank < r < size or r in socks:
                raise CommError(f"rank {rank}: unexpected connection claiming rank {r}")
            socks[r] = s
    except (socket.timeout, TimeoutError):
        for s in socks.values():
            s.close()
        raise CommTimeout(f"rank {rank}: connecting to the other {size - 1} ranks took "
                          f"longer than {timeout:g} s") from None
    except (AuthenticationError, OSError) as e:
        for s in socks.values():
            s.close()
        raise CommError(f"rank {rank}: could not connect to the other ranks: "
                        f"{type(e).__name__}: {e}") from None
    finally:
        server.close()
    for s in socks.values():
        s.setblocking(False)
    return Comm(rank, size, socks, timeout)


# ---------------------------------------------------------------- running fn(comm)

def _comm_main(fn: Callable, args: tuple, kwargs: dict, timeout: float,
               finish_timeout: float) -> tuple[Any, dict]:
    """What each worker runs for ``comm_trace``: connect, fn(comm), say goodbye."""
    comm = connect(timeout)
    try:
        result = fn(comm, *args, **kwargs)
        comm.close(finish_timeout)
    except BaseException as e:
        if not isinstance(e, CommAborted):
            comm.abort(f"{type(e).__name__}: {e}")
        raise
    finally:
        comm.shutdown()
    return result, comm.records()


def comm_trace(fn: Callable, world_size: int, *args: Any, timeout: float = 10.0,
               run_timeout: float | None = None, **kwargs: Any) -> Trace:
    """Run ``fn(comm, *args, **kwargs)`` on ``world_size`` workers; results and messages.

    ``timeout`` bounds each wait inside the communicator; ``run_timeout`` (default
    3·timeout + 30 s) the whole run. Errors come back as one ``CommError`` naming the
    ranks; a rank that died is replaced, so the next run starts clean.
    """
    if not timeout or timeout <= 0:
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
    budget = run_timeout or 3 * timeout + 30.0
    cluster = shared_cluster(world_size)
    try:
        out = cluster.run_with(_comm_main, (fn, args, kwargs, timeout, budget),
                               timeout=budget + 10.0)
    except WorkerError as e:
        raise CommError(_explain(e)) from None
    return Trace([r for r, _ in out], _join([rec for _, rec in out]))


def comm_run(fn: Callable, world_size: int, *args: Any, timeout: float = 10.0,
             run_timeout: float | None = None, **kwargs: Any) -> list:
    """Run ``fn(comm, *args, **kwargs)`` on ``world_size`` workers; results in rank order."""
    return comm_trace(fn, world_size, *args, timeout=timeout, run_timeout=run_timeout,
                      **kwargs).results


def _explain(e: WorkerError) -> str:
    """One line per failed rank (ranks that only stopped because of it, grouped), and
    the traceback of the first rank whose own code raised."""
    lines, stopped, own = [], [], None
    for r, text in sorted(e.failures.items()):
        last = text.strip().splitlines()[-1] if text.strip() else "failed"
        last = last.removeprefix("ddl_lab.message_passing.comm.")
        if last.startswith("CommAborted"):
            stopped.append(r)
            continue
        _, _, msg = last.partition(": ")
        lines.append(msg if msg.startswith(f"rank {r}") else
                     last if last.startswith(f"rank {r}") else f"rank {r}: {last}")
        if own is None and "Traceback" in text and not last.startswith("Comm"):
            own = r
    if stopped:
        lines.append(f"rank(s) {stopped} stopped because of that")
    lines.append("The workers were restarted." if e.restarted else
                 "The workers are ready for the next run.")
    text = "\n".join(lines)
    if own is not None:
        text += f"\n\n--- rank {own} ---\n{e.failures[own].rstrip()}"
    return text


def _join(records: list[dict]) -> list[Message]:
    arrived = {(src, rec["rank"], seq): t for rec in records for src, seq, t in rec["arrived"]}
    sent = [(rec["rank"], *s) for rec in records for s in rec["sent"]]
    t0 = min((s[-1] for s in sent), default=0.0)
    return sorted((Message(src, dst, tag, op, nbytes, t - t0,
                           arrived.get((src, dst, seq), float("nan")) - t0)
                   for src, dst, seq, tag, op, nbytes, t in sent), key=lambda m: m.sent)


# ------------------------------------------------------ the same on torch.distributed

def collectives_side_by_side(comm: Comm, nbytes: int = 4096, repeat: int = 3) -> dict:
    """Each operation done with ``comm`` and with ``torch.distributed`` on the same data.

    Runs on every rank (lesson 04), with tensors on ``ddl_lab.device()``. Returns
    {op: {"equal": bool, "ours_s": seconds, "torch_s": seconds}}: the best of ``repeat``
    times, measured between barriers.
    """
    import torch
    import torch.distributed as dist
    rank, size, dev = comm.rank, comm.size, device()
    n = max(1, nbytes // 4)
    x = torch.full((n,), float(rank + 1), device=dev)
    chunks = [torch.full((n,), float(10 * r), device=dev) for r in range(size)]

    def torch_p2p() -> Any:
        t = x.clone()
        if rank == 0:
            dist.send(t, dst=1)
        elif rank == 1:
            dist.recv(t, src=0)
        return t

    def torch_bcast() -> Any:
        t = x.clone()
        dist.broadcast(t, src=0)
        return t

    def torch_scatter() -> Any:
        t = torch.empty(n, device=dev)
        dist.scatter(t, chunks if rank == 0 else None, src=0)
        return t

    def torch_gather() -> Any:
        ts = [torch.empty(n, device=dev) for _ in range(size)] if rank == 0 else None
        dist.gather(x, ts, dst=0)
        return ts

    def torch_reduce() -> Any:
        t = x.clone()
        dist.reduce(t, dst=0)
        return t if rank == 0 else None

    def torch_allreduce() -> Any:
        t = x.clone()
        dist.all_reduce(t)
        return t

    def ours_p2p() -> Any:
        if rank == 0:
            comm.send(x, dest=1)
        return comm.recv(source=0) if rank == 1 else x

    pairs = {
        "send / recv": (ours_p2p, torch_p2p),
        "bcast": (lambda: comm.bcast(x, root=0), torch_bcast),
        "scatter": (lambda: comm.scatter(chunks if rank == 0 else None, root=0),
                    torch_scatter),
        "gather": (lambda: comm.gather(x, root=0), torch_gather),
        "reduce": (lambda: comm.reduce(x, root=0), torch_reduce),
        "allreduce": (lambda: comm.allreduce(x), torch_allreduce),
        "barrier": (comm.barrier, dist.barrier),
    }
    out = {}
    for name, (ours, theirs) in pairs.items():
        if name == "send / recv" and size < 2:
            continue
        times = {"ours_s": [], "torch_s": []}
        for _ in range(repeat):
            for key, f in (("ours_s", ours), ("torch_s", theirs)):
                dist.barrier()
                t0 = time.perf_counter()
                value = f()
                times[key].append(time.perf_counter() - t0)
                if key == "ours_s":
                    mine = value
                else:
                    same = _same(mine, value)
        out[name] = {"equal": same, "ours_s": min(times["ours_s"]),
                     "torch_s": min(times["torch_s"])}
    return out


def slowest_rank(per_rank: list[dict]) -> dict:
    """Merge every rank's ``collectives_side_by_side`` result: the slowest rank's times."""
    return {op: {"equal": all(r[op]["equal"] for r in per_rank),
                 "ours_s": max(r[op]["ours_s"] for r in per_rank),
                 "torch_s": max(r[op]["torch_s"] for r in per_rank)} for op in per_rank[0]}


def _same(a: Any, b: Any) -> bool:
    import torch
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return bool(torch.equal(torch.as_tensor(a).cpu(), torch.as_tensor(b).cpu()))


# --------------------------------------------------------------------- pictures

_OP_COLORS = {"send": "tab:gray", "bcast": "tab:blue", "scatter": "tab:orange",
              "gather": "tab:green", "reduce": "tab:red", "allreduce": "tab:purple",
              "alltoall": "tab:brown", "barrier": "tab:olive"}


def plot_messages(messages: Sequence[Message], size: int, ax: Any = None,
                  title: str | None = None, label_bytes: bool = True) -> Any:
    """A message-sequence diagram: one lifeline per rank, time downwards, an arrow per
    message from (sender, send time) to (receiver, arrival time) (lesson 04)."""
    import matplotlib.pyplot as plt
    if ax is None:
        ax = plt.subplots(figsize=(1.2 + 1.1 * size, 3.2))[1]
    ms = sorted(messages, key=lambda m: m.sent)
    t0 = min((m.sent for m in ms), default=0.0)
    t_end = max([1e-6] + [max(m.sent, m.arrived) - t0 for m in ms if m.arrived == m.arrived])
    scale = 1e3
    for r in range(size):
        ax.plot([r, r], [0, t_end * scale * 1.05], color="0.75", lw=1, zorder=0)
    for m in ms:
        y0 = (m.sent - t0) * scale
        y1 = (m.arrived - t0) * scale if m.arrived == m.arrived else y0
        color = _OP_COLORS.get(m.op, "black")
        if m.src == m.dst:
            ax.plot([m.src], [y0], "o", color=color, ms=4)
            continue
        ax.annotate("", xy=(m.dst, y1), xytext=(m.src, y0),
                    arrowprops=dict(arrowstyle="->", color=color, lw=1.4,
                                    shrinkA=0, shrinkB=0))
        if label_bytes and len(ms) <= 16:
            ax.text((m.src + m.dst) / 2, (y0 + y1) / 2, _size(m.nbytes), fontsize=7,
                    ha="center", va="bottom", color=color)
    ax.set_xticks(range(size), [f"rank {r}" for r in range(size)])
    ax.xaxis.tick_top()
    ax.set_xlim(-0.5, size - 0.5)
    ax.set_ylim(t_end * scale * 1.08, -t_end * scale * 0.03)
    ax.set_ylabel("time (ms)")
    if title:
        ax.set_title(title, fontsize=10, pad=18)
    return ax


def plot_collectives(trace: Trace, size: int, ops: Sequence[str] | None = None,
                     columns: int = 4) -> Any:
    """One sequence diagram per operation of a trace, each with its own time origin."""
    import matplotlib.pyplot as plt
    ops = list(ops or trace.ops())
    rows, cols = -(-len(ops) // columns), min(columns, len(ops))
    fig, axes = plt.subplots(rows, cols, figsize=(2.4 * cols + 0.5, 3.4 * rows), squeeze=False)
    for ax in axes.flat[len(ops):]:
        ax.axis("off")
    for ax, op in zip(axes.flat, ops):
        ms = trace.select(op)
        total = sum(m.nbytes for m in ms)
        plot_messages(ms, size, ax=ax, label_bytes=False,
                      title=f"{op}\n{len(ms)} msgs, {_size(total)}")
        ax.tick_params(axis="x", labelsize=7)
        ax.set_xticks(range(size), [str(r) for r in range(size)])
    fig.tight_layout()
    return fig


def plot_side_by_side(results: dict, nbytes: int, ax: Any = None) -> Any:
    """Bars: each operation's time with our communicator and with torch.distributed."""
    import matplotlib.pyplot as plt
    import numpy as np
    if ax is None:
        ax = plt.subplots(figsize=(7, 3))[1]
    names = list(results)
    x = np.arange(len(names))
    ours = [1e3 * results[k]["ours_s"] for k in names]
    theirs = [1e3 * results[k]["torch_s"] for k in names]
    ax.bar(x - 0.2, ours, 0.4, label="ddl_lab Comm (pickle over TCP)", color="tab:blue")
    ax.bar(x + 0.2, theirs, 0.4, label="torch.distributed (gloo)", color="tab:orange")
    ax.set_xticks(x, names, fontsize=8)
    ax.set_ylabel("ms (slowest rank, best of runs)")
    ax.set_title(f"the same operations, {_size(nbytes)} per message", fontsize=10)
    ax.legend(fontsize=8)
    return ax
