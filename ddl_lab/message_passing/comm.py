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
whatever its peers send, so two ranks that both send first do not deadlock. How the bytes
travel is ``wire.py``; the sequence diagrams are ``plots.py``. ``comm_main(fn, args, kwargs,
timeout, finish_timeout)`` is what every worker of ``comm_run`` runs, for code that starts
the workers itself.
"""
from __future__ import annotations

import operator
import os
import socket
import sys
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator, Sequence

from multiprocess import AuthenticationError

from ddl_lab.message_passing.trace import Message, Trace, join_records
from ddl_lab.message_passing.wire import (ABORT, BYE, TEXT, CommAborted, CommError, CommTimeout,
                                          Mail, Wire, decode, encode, handshake, size_text)
from ddl_lab.runtime import WorkerError, shared_cluster

__all__ = ["ANY_SOURCE", "ANY_TAG", "Comm", "CommError", "CommTimeout", "CommAborted",
           "Message", "Trace", "connect", "comm_main", "comm_run", "comm_trace"]

ANY_SOURCE = -1
ANY_TAG = -1
_HANDSHAKE_S = 5.0           # a peer that has not proved its key by then is not one of ours
_TAGS = {"bcast": -10, "scatter": -11, "gather": -12, "reduce": -13, "alltoall": -14,
         "barrier": -15}                       # collectives never match a user's recv


# ------------------------------------------------------------------ the communicator

class Comm(Wire):
    """An MPI-style communicator between ``size`` processes (lesson 04).

    Made by ``connect()`` on every rank (``comm_run`` does it for you). ``timeout`` is
    how long any single wait (a recv, a send the peer does not drain) may take.
    """

    def __init__(self, rank: int, size: int, socks: dict[int, socket.socket],
                 timeout: float = 10.0):
        super().__init__(rank, socks, timeout)
        self.size = size
        self._op: str | None = None            # the collective in progress, for records
        self._self_seq = 0

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
            self.post(p, BYE, TEXT, [])
        self.progress(lambda: all(p.bye and not p.out for p in self._peers.values()),
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
                self.post(p, ABORT, TEXT, [memoryview(reason.encode())])
        try:
            self.progress(lambda: not any(p.out for p in self._peers.values() if not p.eof),
                          1.0, "aborting", None)
        except CommError:
            pass
        self.shutdown()

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
        codec, parts = encode(obj)
        nbytes = sum(p.nbytes for p in parts)
        op = self._op or "send"
        if dest == self.rank:            # to itself: a copy into its own mailbox
            self._mailbox.append(Mail(dest, tag, codec, [bytearray(p) for p in parts]))
            self._sent.append((dest, self._self_seq, tag, op, nbytes, t))
            self._arrived.append((dest, self._self_seq, t))
            self._self_seq += 1
            return
        peer = self._peers[dest]
        self._sent.append((dest, peer.sent, tag, op, nbytes, t))
        peer.sent += 1
        self.post(peer, tag, codec, parts)
        doing = (f"sending {size_text(nbytes)} to rank {dest} in {self._op}" if self._op else
                 f"sending {size_text(nbytes)} with send(dest={dest}, tag={tag})")
        self.progress(lambda: not peer.out, self.timeout, doing, [dest],
                      lambda: f" (is rank {dest} stuck outside the communicator?)")

    def _recv(self, source: int, tag: int, timeout: float | None = None) -> Any:
        found: list[Mail] = []

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
        self.progress(match, timeout or self.timeout, doing,
                      None if source == ANY_SOURCE else [source], hint)
        m = found[0]
        try:
            return decode(m.codec, m.parts)
        except Exception as e:
            raise CommError(f"rank {self.rank} could not unpickle a message from rank "
                            f"{m.src} (tag {_tag_name(m.tag)}): {type(e).__name__}: {e}. "
                            "Send plain data (numbers, lists, dicts, arrays, tensors).") from None


def _tag_name(tag: int) -> str:
    if tag == ANY_TAG:
        return "ANY_TAG"
    names = {v: k for k, v in _TAGS.items()}
    return f"<{names[tag]}>" if tag in names else str(tag)


def _src_name(source: int) -> str:
    return "ANY_SOURCE" if source == ANY_SOURCE else str(source)



# --------------------------------------------------------------- making the mesh

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
            handshake(s, authkey, rank, accepting=False)
        socks.update(_accept_ranks(server, authkey, rank, size, timeout))
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


def _accept_ranks(server: socket.socket, authkey: bytes, rank: int, size: int,
                  timeout: float) -> dict[int, socket.socket]:
    """Accept every higher rank within ``timeout``; a connection that does not prove it
    holds ``authkey`` within _HANDSHAKE_S is not one of ours: closed, and the wait goes on."""
    deadline, socks = time.monotonic() + timeout, {}
    try:
        while len(socks) < size - rank - 1:
            server.settimeout(max(deadline - time.monotonic(), 1e-3))
            s, _ = server.accept()
            s.settimeout(min(timeout, _HANDSHAKE_S))
            try:
                r = handshake(s, authkey, rank, accepting=True)
            except (AuthenticationError, OSError, EOFError, ValueError):
                s.close()
                continue
            if not rank < r < size or r in socks:
                s.close()
                raise CommError(f"rank {rank}: unexpected connection claiming rank {r}")
            s.settimeout(timeout)
            socks[r] = s
    except BaseException:
        for s in socks.values():
            s.close()
        raise
    return socks


# ---------------------------------------------------------------- running fn(comm)

def comm_main(fn: Callable, args: tuple, kwargs: dict, timeout: float,
              finish_timeout: float) -> tuple[Any, dict]:
    """What each worker runs for ``comm_trace`` (and the checks, on their own cluster):
    connect, fn(comm), say goodbye; (fn's result, this rank's message records)."""
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
        out = cluster.run_with(comm_main, (fn, args, kwargs, timeout, budget),
                               timeout=budget + 10.0)
    except WorkerError as e:
        raise CommError(_explain(e)) from None
    return Trace([r for r, _ in out], join_records([rec for _, rec in out]))


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
        last = last.removeprefix("ddl_lab.message_passing.wire.")
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
