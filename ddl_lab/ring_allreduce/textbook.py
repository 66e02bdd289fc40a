"""Lesson 06's allreduces as a textbook writes them: what the lesson prints.

``engine.py`` runs the same algorithms and also records every step (which chunk went
where, the bytes, snapshots of the data) for the pictures and the checks;
``tests/ring_allreduce/test_textbook.py`` runs both and gets the same sums, bit for bit.
Both run on every rank of an initialised ``torch.distributed`` group and sum a 1-D tensor
in place.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

__all__ = ["reduce_broadcast_allreduce", "ring_allreduce"]


def reduce_broadcast_allreduce(tensor: torch.Tensor, root: int = 0) -> torch.Tensor:
    """Everyone sends its tensor to ``root``, which adds them up and sends the sum back."""
    n, rank = dist.get_world_size(), dist.get_rank()
    if rank != root:
        dist.send(tensor, root)
        dist.recv(tensor, root)
        return tensor
    incoming = torch.empty_like(tensor)
    for src in range(n):
        if src != root:
            dist.recv(incoming, src)
            tensor += incoming
    for dst in range(n):
        if dst != root:
            dist.send(tensor, dst)
    return tensor


def ring_allreduce(tensor: torch.Tensor, segments: int) -> torch.Tensor:
    """The ring (p+1) % n: n−1 share-reduce steps, then n−1 share-only steps. Each chunk
    travels in ``segments`` pieces, and a piece moves on as soon as it has arrived."""
    n, p = dist.get_world_size(), dist.get_rank()
    if n == 1:
        return tensor
    pieces = [torch.tensor_split(chunk, segments) for chunk in torch.tensor_split(tensor, n)]

    def start(s: int, j: int) -> tuple:      # step s for piece j: send right, receive left
        out, into = pieces[(p - s) % n][j], pieces[(p - s - 1) % n][j]
        incoming = torch.empty_like(into)
        return dist.isend(out, (p + 1) % n, tag=j), dist.irecv(incoming, (p - 1) % n, tag=j), \
            incoming, into

    work = [start(0, j) for j in range(segments)]
    for s in range(2 * (n - 1)):
        for j in range(segments):
            sending, receiving, incoming, into = work[j]
            receiving.wait()
            sending.wait()
            if s < n - 1:
                into += incoming             # share-reduce: add the neighbour's partial sum
            else:
                into.copy_(incoming)         # share-only: take the finished chunk
            if s + 1 < 2 * (n - 1):
                work[j] = start(s + 1, j)    # forward this piece at once: the pipeline
    return tensor
