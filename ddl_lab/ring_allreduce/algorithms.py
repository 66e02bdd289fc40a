"""Beyond one ring: three more allreduces by hand on send/recv (lesson 06 §7).

- ``"halving_doubling"``: Rabenseifner's allreduce (Thakur, Rabenseifner & Gropp 2005):
  reduce-scatter by recursive halving — in round k rank p swaps half of its current
  segment with rank p XOR 2^k and adds the half it keeps — then all-gather by recursive
  doubling, the same partners in reverse. 2·log2 n rounds, 2(n−1)/n·S bytes per rank.
  A world size that is not a power of two is first folded: of the first 2r ranks
  (r = n − 2^⌊log2 n⌋) each even rank hands its tensor to the odd rank after it and gets
  the sum back at the end. Exercise 06's task 5, hence no public name of its own.
- ``pipelined_tree_allreduce``: a binary tree (children 2p+1, 2p+2), the tensor streamed
  up and down it in ``chunks`` pieces, so every level works at once (as NCCL's trees do,
  Sanders, Speck & Träff 2009 for the double tree).
- ``two_level_allreduce``: ranks grouped in hosts of ``per_host`` consecutive ranks;
  reduce-scatter inside a host, a ring allreduce of each shard between the hosts (one rank
  per host and shard), all-gather inside the host (Horovod's and NCCL's hierarchical
  allreduce).

Every message is logged in a ``Recorder`` like the ring's; ``counts`` turns the records
into rounds and bytes, which ``cost.model_counts`` predicts.
"""
from __future__ import annotations

from typing import Sequence

import torch
import torch.distributed as dist

from ddl_lab.ring_allreduce.engine import (ALGORITHMS, Recorder, _begin, _nbytes,
                                           chunk_bounds)

__all__ = ["pipelined_tree_allreduce", "two_level_allreduce", "counts", "trace"]


def _log(record: Recorder | None, phase: str, sent: list, received: list,
         flat: torch.Tensor) -> None:
    if record is not None:
        record.log(phase, sent, received, flat)


_PIECE = 1 << 20          # bytes: a large exchange goes in pieces, each added on arrival


def _swap(out: torch.Tensor, into: torch.Tensor, peer: int, tag: int,
          add_to: torch.Tensor | None = None) -> None:
    """Send ``out`` to ``peer`` and receive its message into ``into``, both at once; with
    ``add_to``, add what arrives into it, piece by piece as the pieces land (so the
    additions overlap the transfer, as the segmented ring of §6)."""
    pieces = max(1, _nbytes(out) // _PIECE, _nbytes(into) // _PIECE)
    ins, outs = torch.tensor_split(into, pieces), torch.tensor_split(out, pieces)
    got = [dist.irecv(p, peer, tag=tag) if p.numel() else None for p in ins]
    sent = [dist.isend(p, peer, tag=tag) for p in outs if p.numel()]
    sums = torch.tensor_split(add_to, pieces) if add_to is not None else [None] * pieces
    for w, p, total in zip(got, ins, sums):
        if w is not None:
            w.wait()
            if total is not None:
                total.add_(p)
    for w in sent:
        w.wait()


# ------------------------------------------------------- recursive halving and doubling

def _halving_doubling(tensor: torch.Tensor, record: Recorder | None = None) -> torch.Tensor:
    """Sum ``tensor`` in place over every rank: Rabenseifner's allreduce (lesson 06 §7)."""
    n, rank, flat, write_back = _begin(tensor, "halving_doubling", record)
    if n == 1:
        return tensor
    p = 1 << (n.bit_length() - 1)                  # the largest power of two ≤ n
    r, size = n - p, _nbytes(flat)
    if rank < 2 * r and rank % 2 == 0:             # folded: hand over, wait for the sum
        dist.send(flat, rank + 1)
        _log(record, "fold", [(-1, rank + 1, size)], [], flat)
        dist.recv(flat, rank + 1)
        _log(record, "unfold", [], [(-1, rank + 1)], flat)
        write_back()
        return tensor
    if rank < 2 * r:
        extra = torch.empty_like(flat)
        dist.recv(extra, rank - 1)
        flat.add_(extra)
        _log(record, "fold", [], [(-1, rank - 1)], flat)
    virtual = rank // 2 if rank < 2 * r else rank - r

    def real(v: int) -> int:
        return 2 * v + 1 if v < r else v + r

    rounds = p.bit_length() - 1
    lo, hi, stack = 0, flat.numel(), []
    buf = torch.empty_like(flat[:(hi + 1) // 2])
    for k in range(rounds):                        # reduce-scatter: recursive halving
        peer, mid = real(virtual ^ (1 << k)), lo + (hi - lo + 1) // 2
        keep, give = ((lo, mid), (mid, hi)) if not virtual >> k & 1 else ((mid, hi), (lo, mid))
        _swap(flat[give[0]:give[1]], buf[:keep[1] - keep[0]], peer, tag=k,
              add_to=flat[keep[0]:keep[1]])
        stack.append((lo, hi, give))
        _log(record, "reduce-scatter", [(k, peer, _nbytes(flat[give[0]:give[1]]))],
             [(k, peer)], flat)
        lo, hi = keep
    for k in reversed(range(rounds)):              # all-gather: recursive doubling
        peer = real(virtual ^ (1 << k))
        parent_lo, parent_hi, give = stack.pop()
        _swap(flat[lo:hi], flat[give[0]:give[1]], peer, tag=rounds + k)
        _log(record, "all-gather", [(k, peer, _nbytes(flat[lo:hi]))], [(k, peer)], flat)
        lo, hi = parent_lo, parent_hi
    if rank < 2 * r:
        dist.send(flat, rank - 1)
        _log(record, "unfold", [(-1, rank - 1, size)], [], flat)
    write_back()
    return tensor


# ----------------------------------------------------------------- pipelined binary tree

def pipelined_tree_allreduce(tensor: torch.Tensor, chunks: int = 8,
                             record: Recorder | None = None) -> torch.Tensor:
    """Sum in place over a binary tree (children 2p+1 and 2p+2 of rank p, root 0), the
    tensor cut into ``chunks`` pieces that stream up (added on the way) and back down:
    a piece moves on as soon as it is complete, so every level of the tree works at once
    (lesson 06 §7)."""
    if not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"chunks must be a positive integer, got {chunks!r}")
    n, rank, flat, write_back = _begin(tensor, "pipelined_tree_allreduce", record)
    if n == 1:
        return tensor
    children = [c for c in (2 * rank + 1, 2 * rank + 2) if c < n]
    parent = (rank - 1) // 2 if rank else None
    pieces = [flat[a:b] for a, b in chunk_bounds(flat.numel(), chunks) if b > a]
    bufs = [torch.empty_like(pieces[0]) for _ in children] if pieces else []
    sends: list[dist.Work] = []
    for j, piece in enumerate(pieces):             # up: add the children's piece j, pass on
        got = [dist.irecv(b[:piece.numel()], c, tag=j) for b, c in zip(bufs, children)]
        for w, b in zip(got, bufs):
            w.wait()
            piece.add_(b[:piece.numel()])
        sent = []
        if parent is not None:
            sends.append(dist.isend(piece, parent, tag=j))
            sent = [(j, parent, _nbytes(piece))]
        _log(record, "reduce", sent, [(j, c) for c in children], flat)
    for w in sends:                                # a piece is overwritten only once sent
        w.wait()
    sends.clear()
    for j, piece in enumerate(pieces):             # down: the finished piece j to the children
        if parent is not None:
            dist.recv(piece, parent, tag=len(pieces) + j)
        sends += [dist.isend(piece, c, tag=len(pieces) + j) for c in children]
        _log(record, "broadcast", [(j, c, _nbytes(piece)) for c in children],
             [] if parent is None else [(j, parent)], flat)
    for w in sends:
        w.wait()
    write_back()
    return tensor


# ----------------------------------------------------------------------- two levels

def _ring_among(piece: torch.Tensor, members: Sequence[int], me: int, tag: int,
                record: Recorder | None, flat: torch.Tensor) -> None:
    """The lesson's ring allreduce of ``piece`` over the ranks ``members`` (me = my index)."""
    m = len(members)
    if m == 1:
        return
    right, left = members[(me + 1) % m], members[(me - 1) % m]
    parts = [piece[a:b] for a, b in chunk_bounds(piece.numel(), m)]
    buf = torch.empty_like(parts[0])
    for s in range(2 * (m - 1)):
        out, into = parts[(me - s) % m], parts[(me - s - 1) % m]
        target = buf[:into.numel()] if s < m - 1 else into
        works = [dist.isend(out, right, tag=tag + s)] if out.numel() else []
        if into.numel():
            dist.irecv(target, left, tag=tag + s).wait()
        for w in works:
            w.wait()
        if s < m - 1:
            into.add_(target)
        _log(record, "between hosts", [((me - s) % m, right, _nbytes(out))],
             [((me - s - 1) % m, left)], flat)


def two_level_allreduce(tensor: torch.Tensor, per_host: int = 2,
                        record: Recorder | None = None) -> torch.Tensor:
    """Sum in place over hosts of ``per_host`` consecutive ranks (the last may be smaller):
    (1) reduce-scatter inside the host — the tensor is cut into ``per_host`` shards and
    shard j summed on the host's local rank j % h; (2) each shard allreduced by a ring
    between the hosts, one owner per host; (3) all-gather inside the host. Only step (2)
    crosses between hosts, with S/per_host bytes per owner (lesson 06 §7, lesson 11)."""
    if not isinstance(per_host, int) or per_host < 1:
        raise ValueError(f"per_host must be a positive integer, got {per_host!r}")
    n, rank, flat, write_back = _begin(tensor, "two_level_allreduce", record)
    if n == 1:
        return tensor
    first = rank - rank % per_host
    host = list(range(first, min(first + per_host, n)))
    h, local = len(host), rank - first
    shards = [flat[a:b] for a, b in chunk_bounds(flat.numel(), per_host)]
    owner = [host[j % h] for j in range(per_host)]
    mine = [j for j in range(per_host) if owner[j] == rank]
    bufs = {j: torch.empty_like(shards[j]) for j in mine}
    for step in range(1, h):                       # (1) reduce-scatter inside the host
        to, frm = host[(local + step) % h], host[(local - step) % h]
        out = [j for j in range(per_host) if owner[j] == to]
        works = [dist.isend(shards[j], to, tag=j) for j in out if shards[j].numel()]
        for j in mine:
            if shards[j].numel():
                dist.irecv(bufs[j], frm, tag=j).wait()
                shards[j].add_(bufs[j])
        for w in works:
            w.wait()
        _log(record, "reduce-scatter in host",
             [(j, to, _nbytes(shards[j])) for j in out], [(j, frm) for j in mine], flat)
    hosts = range(0, n, per_host)
    for j in mine:                                 # (2) between hosts, one owner per host
        members = [f + j % min(per_host, n - f) for f in hosts]
        _ring_among(shards[j], members, members.index(rank), 1000 * (j + 1), record, flat)
    for step in range(1, h):                       # (3) all-gather inside the host
        to, frm = host[(local + step) % h], host[(local - step) % h]
        theirs = [j for j in range(per_host) if owner[j] == frm]
        works = [dist.isend(shards[j], to, tag=100 + j) for j in mine if shards[j].numel()]
        for j in theirs:
            if shards[j].numel():
                dist.irecv(shards[j], frm, tag=100 + j).wait()
        for w in works:
            w.wait()
        _log(record, "all-gather in host", [(j, to, _nbytes(shards[j])) for j in mine],
             [(j, frm) for j in theirs], flat)
    write_back()
    return tensor


ALGORITHMS.update({"halving_doubling": _halving_doubling,
                   "pipelined_tree": pipelined_tree_allreduce,
                   "two_level": two_level_allreduce})


# -------------------------------------------------------------- counting and stepping

def counts(recorders: Sequence[Recorder]) -> dict[str, int]:
    """Rounds and bytes read off the recorded messages: the busiest rank's steps that sent
    or received something, and the most bytes one rank sent (lesson 06 §7)."""
    return {"rounds": max((sum(1 for s in r.steps if s.sent or s.received)
                           for r in recorders), default=0),
            "bytes": max((r.bytes_sent for r in recorders), default=0)}


def trace(algorithm: str = "halving_doubling", chunk_length: int = 1, **options) -> Recorder:
    """Worker function: a recorded allreduce whose data says who contributed — rank r
    starts with 2**r everywhere, as in ``ring_trace`` (lesson 06's stepping widget)."""
    n, rank = dist.get_world_size(), dist.get_rank()
    t = torch.full((n * chunk_length,), float(2 ** rank), dtype=torch.float64)
    rec = Recorder(keep_data=True)
    ALGORITHMS[algorithm](t, record=rec, **options)
    return rec
