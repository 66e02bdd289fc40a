"""The capstone's meter on the wire (lesson 15): every communication call is charged at the
process group, whoever makes it — not where a plan says it talks — by formula, not by capture.

While a plan runs, the worker listens with the runtime's ``Wiretap`` (``runtime.wiretap``):
its group *is* the default group, so every ``torch.distributed`` call — from the plan, from
``data_parallel.average_params``, from lesson 08's ``all_gather_bytes``, even from DDP's
C++ reducer and its communication hooks — goes through it and is charged what it puts on
the wire, counted as lesson 06 counts a ring (``runtime.costs.sent_bytes``; S: this
rank's tensor, n ranks):

- all_reduce: 2(n−1)/n · S (the ring's share-reduce, then share-only);
- all_gather: (n−1) · S (its S travels to each of the others);
- broadcast, reduce, reduce_scatter, all_to_all: (n−1)/n · S (its share of the (n−1)·S
  moved);
- send: S; gather: S from a non-root, 0 at the root; scatter: (n−1)/n of the root's tensors;
- recv, barrier: nothing.

A parameter-server client (lesson 07) is metered too: its pushes and, since the shards
are not workers, the pulls they answer, in pickled bytes. ``Wire`` is what a plan holds:
the metered operations, the server client and the running count (read-only).
"""
from __future__ import annotations

import pickle
from contextlib import contextmanager
from typing import Any, Iterator

import torch
import torch.distributed as dist

from ddl_lab.runtime.wiretap import Op, Wiretap

__all__ = ["Wire", "metered", "metered_server"]

# what the meter does not charge: refused rather than let through for free
_NOT_METERED = {"allgather_coalesced", "all_gather_single_coalesced",
                "reduce_scatter_single_coalesced", "alltoall"}


def _metered_only(op: Op, args: tuple) -> None:
    if op.method in _NOT_METERED:
        raise RuntimeError("this coalesced collective is not metered in the capstone: use "
                           "all_reduce, all_gather, broadcast, reduce_scatter, send/recv")


def metered(tally: list[float]) -> Wiretap:
    """A wiretap charging every operation on the default group, refusing ``dist.new_group``
    (a new group would talk past the meter) while inside. ``tally[0]`` adds up the same
    charges outside the tap, so that a plan that changes the tap's own count is seen."""
    def on_op(op: Op, args: tuple) -> None:
        tally[0] += op.sent
        _metered_only(op, args)
    return Wiretap(on_op=on_op, refuse_new_group=(
        "dist.new_group is not available to a capstone plan: a new group would talk past "
        "the meter. Use the default group (dist.* or wire.*)."))


@contextmanager
def metered_server(tap: Wiretap, tally: list[float]) -> Iterator[None]:
    """While inside, every parameter-server message of this process is charged to
    ``tap`` (and ``tally``): what ``ShardClient`` sends, and the answers it receives."""
    from ddl_lab.parameter_server import wire as ps_wire
    send, recv = ps_wire.send_msg, ps_wire.recv_msg

    def send_msg(conn: Any, msg: tuple) -> None:
        data = pickle.dumps(msg, protocol=5)
        tap.charge("parameter server", len(data))
        tally[0] += len(data)
        conn.send_bytes(data)

    def recv_msg(conn: Any, timeout: float, who: str) -> tuple:
        msg = recv(conn, timeout, who)
        nbytes = len(pickle.dumps(msg, protocol=5))
        tap.charge("parameter server", nbytes)
        tally[0] += nbytes
        return msg

    ps_wire.send_msg, ps_wire.recv_msg = send_msg, recv_msg
    try:
        yield
    finally:
        ps_wire.send_msg, ps_wire.recv_msg = send, recv


class Wire:
    """What a capstone plan talks through on one worker (lesson 15).

    ``allreduce`` / ``all_gather_bytes`` / ``broadcast`` / ``barrier`` are the metered
    default group's, ``mesh()`` a device mesh over it (``dist.*`` calls and DDP are metered just the same); ``server`` is a
    joined parameter-server client when the run has one, else None; ``sent`` is what
    the meter has counted for this worker so far.
    """

    def __init__(self, tap: Wiretap, server: Any = None):
        self._tap, self._server = tap, server
        self.rank, self.world_size = tap.rank, tap.size

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
        return self._tap.sent

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

    def mesh(self) -> Any:
        """A 1-D ``DeviceMesh`` over the metered group, for FSDP2 and DTensor (lessons 09, 10):
        a mesh made otherwise holds a group of its own, which the capstone closes."""
        from torch.distributed.device_mesh import DeviceMesh
        return DeviceMesh.from_group(dist.group.WORLD, "cpu")

    def __repr__(self) -> str:
        return (f"Wire(rank={self.rank}, world_size={self.world_size}, sent={self.sent:,.0f} B"
                + (", server" if self._server is not None else "") + ")")
