"""A broadcast pipelined along a chain of ranks, and its α–β time read from the messages
it sent (lesson 04; exercise 04 chooses how many pieces to cut the message into).

``chain_bcast(comm, data, pieces)``: the root cuts its array into ``pieces`` and sends them
one after another to the next rank, which forwards each piece as soon as it has it, and so
on down the chain root → root+1 → … (mod n). ``chain_time(trace, alpha, beta)``: the time
the recorded messages take in the α–β model (a message of b bytes costs α + b·β; a rank
sends one message at a time and forwards a piece only once it has arrived).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ddl_lab.message_passing.trace import Message

__all__ = ["chain_bcast", "chain_time"]


def chain_bcast(comm: Any, data: np.ndarray | None, pieces: int, root: int = 0) -> np.ndarray:
    """Every rank returns the root's array (others pass ``data=None``), sent down the chain
    in ``pieces`` messages per link, each forwarded as soon as it arrives (lesson 04)."""
    if isinstance(pieces, bool) or not isinstance(pieces, (int, np.integer)) or pieces < 1:
        raise ValueError(f"pieces must be a whole number >= 1, got {pieces!r}")
    n = comm.size
    first = (comm.rank - root) % n == 0
    last = (comm.rank - root) % n == n - 1
    parts = np.array_split(data, pieces) if first else None
    got = []
    for j in range(pieces):
        piece = parts[j] if first else comm.recv(source=(comm.rank - 1) % n)
        if not last:
            comm.send(piece, dest=(comm.rank + 1) % n)
        got.append(piece)
    return np.concatenate(got)


def chain_time(messages: list[Message], alpha: float, beta: float, root: int = 0) -> float:
    """Seconds the chain's messages take in the α–β model: message j on link h starts once
    piece j has arrived at the link's sender and its previous message on the link is out."""
    links: dict[int, list[int]] = {}
    for m in sorted(messages, key=lambda m: m.sent):
        links.setdefault(m.src, []).append(m.nbytes)
    ready: list[float] | None = None                   # when each piece is at the sender
    n = len(links) + 1
    for h in range(n - 1):
        sizes = links[(root + h) % n]
        ready = ready or [0.0] * len(sizes)
        done, t = [], 0.0
        for j, nbytes in enumerate(sizes):
            t = max(t, ready[j]) + alpha + nbytes * beta
            done.append(t)
        ready = done
    return ready[-1] if ready else 0.0
