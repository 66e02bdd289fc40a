"""Allreduce by hand on torch.distributed point-to-point messages (lesson 06).

Three ways to sum a tensor over every rank, in place, with ``send/recv/isend/irecv`` only:

- ``reduce_broadcast_allreduce``: every rank sends its tensor to a root, which adds them
  up and sends the sum back: the root moves 2(n−1)·S bytes while the others idle.
- ``tree_allreduce``: a binomial tree, ⌈log2 n⌉ rounds up and ⌈log2 n⌉ rounds down; every
  message carries the whole tensor.
- ``"ring"``: the ring of the ID2223 review answers (neighbour (p+1) % n). The tensor is cut into n
  chunks; in the *share-reduce* phase (reduce-scatter) each rank passes one chunk to its
  right neighbour, which adds it to its own, n−1 times, until every rank holds one fully
  reduced chunk; in the *share-only* phase (allgather) the finished chunks travel round
  the ring n−1 more times. Each rank sends 2(n−1)/n·S bytes, whatever n: bandwidth-optimal.
  With ``segments > 1`` each chunk travels in pieces and a piece is forwarded as soon as it
  is reduced (a pipeline).

A ``Recorder`` logs every step of a run on one rank (which chunk it sent to whom, which it
received, the bytes sent, and optionally the data), which the pictures and the checks use.
``allreduce(tensor, algorithm)`` runs any of them (the ring is exercise 06's task, so it has
no public name of its own). What the lesson prints is ``textbook.py``, tested equal to
these; the α–β model is ``cost.py``; DDP-style gradient buckets ``buckets.py``; the
pictures ``plots.py``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist

from ddl_lab.runtime import device
from ddl_lab.runtime.costs import sent_bytes

__all__ = ["chunk_bounds", "Step", "Recorder", "tree_allreduce", "reduce_broadcast_allreduce",
           "builtin_allreduce", "ALGORITHMS", "allreduce", "ring_bytes", "time_allreduce",
           "measure_allreduce", "best_of", "ring_trace", "ring_states"]


# ---------------------------------------------------------------- recording

@dataclass
class Step:
    """One step of an allreduce on one rank (lesson 06's pictures and checks).

    ``sent``: (chunk, to rank, bytes) for each message sent; ``received``: (chunk, from
    rank); chunk −1 is the whole tensor. ``data``: a copy of the tensor after the step.
    """

    phase: str
    index: int
    sent: list[tuple[int, int, int]] = field(default_factory=list)
    received: list[tuple[int, int]] = field(default_factory=list)
    data: torch.Tensor | None = None

    @property
    def bytes_sent(self) -> int:
        return sum(b for _, _, b in self.sent)


@dataclass
class Recorder:
    """Every step one rank took in an allreduce; ``keep_data`` also copies the tensor."""

    keep_data: bool = False
    rank: int = 0
    initial: torch.Tensor | None = None
    steps: list[Step] = field(default_factory=list)

    @property
    def bytes_sent(self) -> int:
        """Bytes this rank sent over the whole allreduce."""
        return sum(s.bytes_sent for s in self.steps)

    def begin(self, flat: torch.Tensor) -> None:
        self.rank = dist.get_rank()
        self.steps.clear()
        self.initial = flat.detach().clone() if self.keep_data else None

    def log(self, phase: str, sent: list, received: list, flat: torch.Tensor) -> None:
        data = flat.detach().clone() if self.keep_data else None
        self.steps.append(Step(phase, len(self.steps), sent, received, data))


# ------------------------------------------------------------------- helpers

def chunk_bounds(length: int, parts: int) -> list[tuple[int, int]]:
    """Cut ``range(length)`` into ``parts`` contiguous pieces as even as possible.

    The first ``length % parts`` pieces are one element longer (as ``torch.tensor_split``);
    pieces may be empty when ``length < parts``.
    """
    if parts < 1 or length < 0:
        raise ValueError(f"need parts >= 1 and length >= 0, got parts={parts}, "
                         f"length={length}")
    base, extra = divmod(length, parts)
    bounds, start = [], 0
    for i in range(parts):
        stop = start + base + (1 if i < extra else 0)
        bounds.append((start, stop))
        start = stop
    return bounds


def _setup(tensor: torch.Tensor, name: str) -> tuple[int, int]:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} sums a torch.Tensor in place, got {type(tensor).__name__}")
    if not dist.is_initialized():
        raise RuntimeError(f"{name} needs torch.distributed: run it on a cluster's workers "
                           "(cluster.run(fn)) or under torchrun, not in the notebook itself")
    return dist.get_world_size(), dist.get_rank()


def _flat(tensor: torch.Tensor) -> tuple[torch.Tensor, Callable[[], None]]:
    """A contiguous 1-D view of ``tensor`` and a function that writes it back if needed."""
    if tensor.is_contiguous():
        return tensor.view(-1), lambda: None
    flat = tensor.contiguous().view(-1)
    return flat, lambda: tensor.copy_(flat.view_as(tensor))



def _begin(tensor: torch.Tensor, name: str, record: Recorder | None
           ) -> tuple[int, int, torch.Tensor, Callable[[], None]]:
    """World size, rank, the flat view to work on and its write-back; starts ``record``."""
    n, rank = _setup(tensor, name)
    flat, write_back = _flat(tensor)
    if record is not None:
        record.begin(flat)
    return n, rank, flat, write_back


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def ring_bytes(world_size: int, nbytes: int) -> float:
    """Bytes each rank sends in a ring allreduce of ``nbytes``: 2(n−1)/n · S (lesson 06)."""
    return sent_bytes("all_reduce", world_size, nbytes)


# ------------------------------------------------------------------ the ring

def _ring_allreduce(tensor: torch.Tensor, segments: int = 1,
                    record: Recorder | None = None) -> torch.Tensor:
    """Sum ``tensor`` over every rank of the default group, in place (lesson 06).

    Share-reduce, then share-only, around the ring (p+1) % n, with ``isend``/``irecv``
    only, so no rank ever blocks in a send that its neighbour cannot yet receive (no
    deadlock, whatever the size). Any length works: chunks differ by at most one
    element. ``segments`` splits each chunk into pieces that are pipelined. Returns
    ``tensor``. Exercise 06's task, hence the private name: use ``allreduce(t, "ring")``.
    """
    if not isinstance(segments, int) or segments < 1:
        raise ValueError(f"segments must be a positive integer, got {segments!r}")
    n, rank, flat, write_back = _begin(tensor, "ring_allreduce", record)
    if n == 1:
        return tensor
    right, left = (rank + 1) % n, (rank - 1) % n
    chunks = [flat[a:b] for a, b in chunk_bounds(flat.numel(), n)]
    pieces = [[c[a:b] for a, b in chunk_bounds(c.numel(), segments)] for c in chunks]
    buffer = torch.empty_like(chunks[0])                    # chunk 0 is the longest
    slots = [buffer[a:b] for a, b in chunk_bounds(buffer.numel(), segments)]
    steps = 2 * (n - 1)
    pending: dict[tuple[int, int], dist.Work] = {}          # sends still reading a piece
    receiving: list[tuple[dist.Work, torch.Tensor, torch.Tensor] | None] = [None] * segments
    snapshots = record is not None and record.keep_data

    def post(s: int, j: int) -> None:
        """Start step s for piece j: receive from the left, send to the right."""
        out_chunk, in_chunk = (rank - s) % n, (rank - s - 1) % n
        out, into = pieces[out_chunk][j], pieces[in_chunk][j]
        receiving[j] = None
        if into.numel():
            earlier = pending.pop((in_chunk, j), None)
            if earlier is not None:          # never overwrite a piece that is still being sent
                earlier.wait()
            target = slots[j][:into.numel()] if s < n - 1 else into
            receiving[j] = (dist.irecv(target, left, tag=s * segments + j), target, into)
        if out.numel():
            pending[(out_chunk, j)] = dist.isend(out, right, tag=s * segments + j)

    for j in range(segments):
        post(0, j)
    for s in range(steps):
        for j in range(segments):
            if receiving[j] is not None:
                work, target, into = receiving[j]
                work.wait()
                if s < n - 1:                # share-reduce: add the neighbour's partial sum
                    into.add_(target)
            if s + 1 < steps and not snapshots:
                post(s + 1, j)               # forward this piece at once: the pipeline
        if record is not None:
            out_chunk, in_chunk = (rank - s) % n, (rank - s - 1) % n
            record.log("share-reduce" if s < n - 1 else "share-only",
                       [(out_chunk, right, _nbytes(chunks[out_chunk]))],
                       [(in_chunk, left)], flat)
        if s + 1 < steps and snapshots:
            for j in range(segments):
                post(s + 1, j)
    for work in pending.values():
        work.wait()
    write_back()
    return tensor


# --------------------------------------------------------- tree and root

def _lowbit(rank: int, n: int) -> int:
    """The distance to a rank's parent in the binomial tree rooted at 0."""
    return rank & -rank if rank else 1 << max(n - 1, 1).bit_length()


def tree_allreduce(tensor: torch.Tensor, record: Recorder | None = None) -> torch.Tensor:
    """Sum in place over every rank with a binomial tree to rank 0 and back (lesson 06).

    Rank r receives from r+1, r+2, r+4, … (its children), adds, and sends the whole
    tensor to its parent r − lowbit(r); the sum then flows back down the same tree.
    ⌈log2 n⌉ rounds each way, every message the whole tensor.
    """
    n, rank, flat, write_back = _begin(tensor, "tree_allreduce", record)
    if n == 1:
        return tensor
    low, buf, size = _lowbit(rank, n), torch.empty_like(flat), _nbytes(flat)
    m = 1
    while m < low:                                   # reduce: children first
        if rank + m < n:
            dist.recv(buf, rank + m)
            flat.add_(buf)
            if record is not None:
                record.log("reduce", [], [(-1, rank + m)], flat)
        m <<= 1
    if rank:
        dist.send(flat, rank - low)
        if record is not None:
            record.log("reduce", [(-1, rank - low, size)], [], flat)
        dist.recv(flat, rank - low)                  # broadcast: parent first
        if record is not None:
            record.log("broadcast", [], [(-1, rank - low)], flat)
    m = low >> 1
    while m >= 1:
        if rank + m < n:
            dist.send(flat, rank + m)
            if record is not None:
                record.log("broadcast", [(-1, rank + m, size)], [], flat)
        m >>= 1
    write_back()
    return tensor


def reduce_broadcast_allreduce(tensor: torch.Tensor, root: int = 0,
                               record: Recorder | None = None) -> torch.Tensor:
    """Sum in place: everyone sends to ``root``, which adds and sends the sum back (lesson 06)."""
    n, rank, flat, write_back = _begin(tensor, "reduce_broadcast_allreduce", record)
    if not 0 <= root < n:
        raise ValueError(f"root must be a rank in 0..{n - 1}, got {root}")
    if n == 1:
        return tensor
    others = [r for r in range(n) if r != root]
    if rank == root:
        buf = torch.empty_like(flat)
        for src in others:
            dist.recv(buf, src)
            flat.add_(buf)
        if record is not None:
            record.log("reduce", [], [(-1, s) for s in others], flat)
        works = [dist.isend(flat, dst) for dst in others]
        for w in works:
            w.wait()
        if record is not None:
            record.log("broadcast", [(-1, d, _nbytes(flat)) for d in others], [], flat)
    else:
        dist.send(flat, root)
        if record is not None:
            record.log("reduce", [(-1, root, _nbytes(flat))], [], flat)
        dist.recv(flat, root)
        if record is not None:
            record.log("broadcast", [], [(-1, root)], flat)
    write_back()
    return tensor


def builtin_allreduce(tensor: torch.Tensor, record: Recorder | None = None) -> torch.Tensor:
    """The library's own ``dist.all_reduce`` (gloo's ring on CPU), for comparison."""
    _setup(tensor, "builtin_allreduce")
    if record is not None:
        raise ValueError("the built-in allreduce cannot be recorded: it runs inside gloo")
    dist.all_reduce(tensor)
    return tensor


ALGORITHMS: dict[str, Callable[..., torch.Tensor]] = {
    "reduce_broadcast": reduce_broadcast_allreduce, "tree": tree_allreduce,
    "ring": _ring_allreduce, "dist.all_reduce": builtin_allreduce}


Algorithm = str | Callable[..., torch.Tensor]


def allreduce(tensor: torch.Tensor, algorithm: Algorithm, **options) -> torch.Tensor:
    """Sum ``tensor`` in place over every rank with one of ``ALGORITHMS`` or any function
    ``f(tensor, **options)`` that does it (lesson 06; lesson 05's ``sync_sgd`` takes any of
    them as its ``allreduce``)."""
    if callable(algorithm):
        return algorithm(tensor, **options)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}: use one of {list(ALGORITHMS)}"
                         " or pass a function")
    return ALGORITHMS[algorithm](tensor, **options)


# ---------------------------------------------------------------- measuring

def time_allreduce(algorithm: Algorithm = "ring", nbytes: int = 1 << 20, repeats: int = 5,
                   dtype: torch.dtype = torch.float32, **options) -> list[float]:
    """Worker function: seconds each of ``repeats`` allreduces of ``nbytes`` took here.

    Every repetition starts after a barrier; the first, untimed run warms up (and for
    the shared-memory allreduce creates the shared segment). The result is verified: a wrong sum raises.
    """
    n, rank = dist.get_world_size(), dist.get_rank()
    numel = max(1, nbytes // torch.tensor([], dtype=dtype).element_size())
    t = torch.empty(numel, dtype=dtype, device=device())
    times = []
    for i in range(repeats + 1):
        t.fill_(rank + 1)
        dist.barrier()
        t0 = time.perf_counter()
        allreduce(t, algorithm, **options)
        if i:
            times.append(time.perf_counter() - t0)
    want = n * (n + 1) / 2
    if float(t[0]) != want or float(t[-1]) != want:
        raise RuntimeError(f"{algorithm} gave {float(t[0])}…{float(t[-1])}, expected {want}")
    return times


def measure_allreduce(cluster, algorithm: str, nbytes: int, repeats: int = 5,
                      **options) -> float:
    """Seconds of an allreduce on ``cluster``: the best of ``repeats`` runs, each timed on
    its slowest rank (on a shared machine, the best run is the least disturbed one)."""
    per_rank = cluster.run(time_allreduce, algorithm, nbytes, repeats, **options)
    return best_of(per_rank)


def best_of(per_rank: Sequence[Sequence[float]]) -> float:
    """Min over repetitions of the max over ranks of per-rank times (seconds)."""
    return float(np.min(np.max(np.array(per_rank), axis=0)))


# ------------------------------------ the figures of the ID2223 review answers

def ring_trace(chunk_length: int = 1) -> Recorder:
    """Worker function: a recorded ring allreduce whose data says who contributed.

    Rank r starts with 2**r in every element, so after any step an element holding the
    sum over a set of ranks equals the bitmask of that set: the recorded data of a real
    run tell exactly which ranks' data each chunk holds (lesson 06's widget).
    """
    n, rank = dist.get_world_size(), dist.get_rank()
    t = torch.full((n * chunk_length,), float(2 ** rank), dtype=torch.float64,
                   device=device())
    rec = Recorder(keep_data=True)
    _ring_allreduce(t, record=rec)
    return rec


def ring_states(recorders: Sequence[Recorder]) -> np.ndarray:
    """(steps + 1, n ranks, n chunks) array of bitmasks: which ranks' data each chunk holds."""
    n = len(recorders)
    bounds = chunk_bounds(recorders[0].initial.numel(), n)

    def masks(data: torch.Tensor) -> list[int]:
        return [int(round(float(data[a]))) if b > a else 0 for a, b in bounds]

    states = [[masks(r.initial.cpu()) for r in recorders]]
    for s in range(len(recorders[0].steps)):
        states.append([masks(r.steps[s].data.cpu()) for r in recorders])
    return np.array(states, dtype=np.int64)
