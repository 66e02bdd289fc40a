"""The capstone's meter on the wire (lesson 11): every communication call is charged at the
process group, whoever makes it — not where a plan says it talks — by formula, not by capture.

``MeteredGroup`` wraps the worker's default process group. While a plan runs it *is* the
default group, so every ``torch.distributed`` call — from the plan, from
``data_parallel.average_params``, from lesson 08's ``all_gather_bytes``, even from
DDP's C++ reducer and its communication hooks — goes through it and is charged what it
puts on the wire, counted as lesson 06 counts a ring (S: this rank's tensor, n ranks):

- all_reduce: 2(n−1)/n · S (the ring's share-reduce, then share-only);
- all_gather: (n−1) · S (its S travels to each of the others);
- broadcast, reduce, reduce_scatter, all_to_all: (n−1)/n · S (its share of the (n−1)·S
  moved);
- send: S; gather: S from a non-root; scatter: (n−1)/n of the root's tensors;
- recv, barrier: nothing.

A parameter-server client (lesson 07) is metered too: its pushes and, since the shards
are not workers, the pulls they answer, in pickled bytes. ``Wire`` is what a plan holds:
the metered operations, the server client and the running count (read-only).
"""
from __future__ import annotations

import pickle
from collections import Counter
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as c10d

__all__ = ["MeteredGroup", "Wire", "metered", "metered_server", "tensor_bytes"]


def tensor_bytes(tensors: Any) -> int:
    """Bytes of a tensor or of (nested lists of) tensors."""
    if isinstance(tensors, torch.Tensor):
        return tensors.numel() * tensors.element_size()
    return sum(tensor_bytes(t) for t in tensors)


def _call(method: Callable, *args: Any) -> Any:
    """``method(*args, opts)`` with the options the caller gave, or its defaults if None."""
    *front, opts = args
    return method(*front) if opts is None else method(*front, opts)


class MeteredGroup(dist.ProcessGroup):
    """A process group that forwards every operation to ``inner`` and charges its bytes."""

    def __init__(self, inner: dist.ProcessGroup):
        super().__init__(inner.rank(), inner.size())
        self.inner = inner
        self.n = inner.size()
        self.sent = 0.0                       # bytes this rank put on the wire
        self.calls: Counter = Counter()       # operation -> calls that carried bytes
        self.by_op: Counter = Counter()       # operation -> bytes charged
        self.sizes: Counter = Counter()       # (operation, S) -> calls

    def getBackendName(self) -> str:
        return "metered"

    def _charge(self, op: str, size: int, factor: float) -> None:
        if size and factor:
            self.sent += size * factor
            self.calls[op] += 1
            self.by_op[op] += size * factor
            self.sizes[(op, size)] += 1

    def allreduce(self, tensors, opts=None):
        self._charge("all_reduce", tensor_bytes(tensors), 2 * (self.n - 1) / self.n)
        return _call(self.inner.allreduce, tensors, opts)

    def allreduce_coalesced(self, tensors, opts=None):
        self._charge("all_reduce", tensor_bytes(tensors), 2 * (self.n - 1) / self.n)
        return _call(self.inner.allreduce_coalesced, tensors, opts)

    def broadcast(self, tensors, opts=None):
        self._charge("broadcast", tensor_bytes(tensors), (self.n - 1) / self.n)
        return _call(self.inner.broadcast, tensors, opts)

    def reduce(self, tensors, opts=None):
        self._charge("reduce", tensor_bytes(tensors), (self.n - 1) / self.n)
        return _call(self.inner.reduce, tensors, opts)

    def allgather(self, outputs, inputs, opts=None):
        self._charge("all_gather", tensor_bytes(inputs), self.n - 1)
        return _call(self.inner.allgather, outputs, inputs, opts)

    def all_gather_single(self, output, input, opts=None):
        self._charge("all_gather", tensor_bytes(input), self.n - 1)
        return _call(self.inner.all_gather_single, output, input, opts)

    _allgather_base = all_gather_single             # the name C++ callers use

    def reduce_scatter(self, outputs, inputs, opts=None):
        self._charge("reduce_scatter", tensor_bytes(inputs), (self.n - 1) / self.n)
        return _call(self.inner.reduce_scatter, outputs, inputs, opts)

    def reduce_scatter_single(self, output, input, opts=None):
        self._charge("reduce_scatter", tensor_bytes(input), (self.n - 1) / self.n)
        return _call(self.inner.reduce_scatter_single, output, input, opts)

    _reduce_scatter_base = reduce_scatter_single

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes,
                          opts=None):
        self._charge("all_to_all", tensor_bytes(input), (self.n - 1) / self.n)
        return _call(self.inner.all_to_all_single, output, input, output_split_sizes,
                     input_split_sizes, opts)

    def _not_metered(self, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("this coalesced collective is not metered in the capstone: use "
                           "all_reduce, all_gather, broadcast, reduce_scatter, send/recv")

    allgather_coalesced = all_gather_single_coalesced = _not_metered
    reduce_scatter_single_coalesced = alltoall = _not_metered

    def gather(self, outputs, inputs, opts=None):
        root = self.rank() == opts.rootRank if opts is not None else self.rank() == 0
        self._charge("gather", tensor_bytes(inputs), 0 if root else 1)
        return _call(self.inner.gather, outputs, inputs, opts)

    def scatter(self, outputs, inputs, opts=None):
        self._charge("scatter", tensor_bytes(inputs), (self.n - 1) / self.n)
        return _call(self.inner.scatter, outputs, inputs, opts)

    def send(self, tensors, dst, tag):
        self._charge("send", tensor_bytes(tensors), 1)
        return self.inner.send(tensors, dst, tag)

    def recv(self, tensors, src, tag):
        return self.inner.recv(tensors, src, tag)

    def recv_anysource(self, tensors, tag):
        return self.inner.recv_anysource(tensors, tag)

    def barrier(self, opts=None):
        return _call(self.inner.barrier, opts)

    def charge_server(self, nbytes: int) -> None:
        """A parameter-server message of ``nbytes`` (a push sent, or a pull answered)."""
        self._charge("parameter server", nbytes, 1)


_WORLD_TABLES = ("pg_map", "pg_names", "pg_group_ranks", "pg_backend_config")


def _no_new_group(*args: Any, **kwargs: Any) -> None:
    raise RuntimeError("dist.new_group is not available to a capstone plan: a new group "
                       "would talk past the meter. Use the default group (dist.* or wire.*).")


@contextmanager
def metered() -> Iterator[MeteredGroup]:
    """While inside, a ``MeteredGroup`` around the current default group is the default
    group (registered like it), and ``dist.new_group`` is refused; both undone on exit."""
    inner = c10d._get_default_group()
    group = MeteredGroup(inner)
    world = c10d._world
    tables = [getattr(world, name) for name in _WORLD_TABLES]
    for table in tables:
        if inner in table:
            table[group] = table[inner]
    new_group = dist.new_group
    c10d._update_default_pg(group)
    dist.new_group = c10d.new_group = _no_new_group
    try:
        yield group
    finally:
        dist.new_group = c10d.new_group = new_group
        c10d._update_default_pg(inner)
        for table in tables:
            table.pop(group, None)


@contextmanager
def metered_server(group: MeteredGroup) -> Iterator[None]:
    """While inside, every parameter-server message of this process is charged to
    ``group``: what ``ShardClient`` sends, and the answers it receives."""
    from ddl_lab.parameter_server import wire as ps_wire
    send, recv = ps_wire.send_msg, ps_wire.recv_msg

    def send_msg(conn: Any, msg: tuple) -> None:
        data = pickle.dumps(msg, protocol=5)
        group.charge_server(len(data))
        conn.send_bytes(data)

    def recv_msg(conn: Any, timeout: float, who: str) -> tuple:
        msg = recv(conn, timeout, who)
        group.charge_server(len(pickle.dumps(msg, protocol=5)))
        return msg

    ps_wire.send_msg, ps_wire.recv_msg = send_msg, recv_msg
    try:
        yield
    finally:
        ps_wire.send_msg, ps_wire.recv_msg = send, recv


class Wire:
    """What a capstone plan talks through on one worker (lesson 11).

    ``allreduce`` / ``all_gather_bytes`` / ``broadcast`` / ``barrier`` are the metered
    default group's (``dist.*`` calls and DDP are metered just the same); ``server`` is a
    joined parameter-server client when the run has one, else None; ``sent`` is what
    the meter has counted for this worker so far.
    """

    def __init__(self, group: MeteredGroup, server: Any = None):
        self._group, self._server = group, server
        self.rank, self.world_size = group.rank(), group.size()

    @property
    def server(self) -> Any:
        """This worker's joined client of the run's parameter server (lesson 07)."""
        if self._server is None:
            raise RuntimeError("this run has no parameter server: start one with "
                               "measure(plan, parameter_server=dict(shards=2, rule='sgd', "
                               "lr=0.1, mode='ssp', s=2)) or check.capstone(plan, "
                               "parameter_server=...)")
        return self._server

    @property
    def sent(self) -> float:
        """Bytes this worker has put on the wire so far (the meter's count, read-only)."""
        return self._group.sent

    def allreduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum ``t`` over all workers, in place (charged 2(n−1)/n of its bytes)."""
        dist.all_reduce(t)
        return t

    def all_gather_bytes(self, data: bytes) -> list[bytes]:
        """Every worker's message, in rank order (lesson 08's exchange of encoded updates)."""
        from ddl_lab.compression.training import all_gather_bytes
        return all_gather_bytes(data)

    def broadcast(self, t: torch.Tensor, src: int = 0) -> torch.Tensor:
        """``t`` from worker ``src`` to every worker, in place."""
        dist.broadcast(t, src)
        return t

    def barrier(self) -> None:
        dist.barrier()

    def __repr__(self) -> str:
        return (f"Wire(rank={self.rank}, world_size={self.world_size}, sent={self.sent:,.0f} B"
                + (", server" if self._server is not None else "") + ")")
