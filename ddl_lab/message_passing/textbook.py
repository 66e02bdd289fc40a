"""Lesson 04's loops as a textbook writes them: what the lesson prints.

``parallel_gd.parallel_gd`` and ``pregel.run_pregel`` run the same loops and also time
every step, send the loss along and record every superstep;
``tests/message_passing/test_textbook.py`` runs both and gets the same numbers.
"""
from __future__ import annotations

import operator
from typing import Callable

import numpy as np

from ddl_lab.message_passing.comm import Comm
from ddl_lab.message_passing.pregel import Context, Graph, add_aggregates, my_vertices

__all__ = ["parallel_gd", "run_pregel"]


def parallel_gd(comm: Comm, shards: list[tuple[np.ndarray, np.ndarray]], steps: int,
                lr: float) -> np.ndarray:
    """Batch GD over k shards: rank r sums the gradient over ``shards[r]``; the root adds
    the sums, divides by m once and sends the new θ to everyone."""
    X, y = shards[comm.rank]                                   # my shard
    m = sum(len(ys) for _, ys in shards)
    theta = np.zeros(X.shape[1])
    for _ in range(steps):
        total = comm.reduce(X.T @ (X @ theta - y), root=0)     # Σ over every shard
        if comm.rank == 0:
            theta = theta - lr * total / m
        theta = comm.bcast(theta, root=0)
    return theta


def run_pregel(comm: Comm, graph: Graph, compute: Callable, max_supersteps: int = 50,
               combine: Callable | None = operator.add) -> dict[int, float]:
    """Pregel's supersteps on every rank; this rank owns the vertices v ≡ rank (mod k)."""
    vertices = my_vertices(graph, comm.rank, comm.size)
    inbox, aggregated = {}, {}
    for step in range(max_supersteps):
        ctx = Context(step, graph.n, comm.size, aggregated, combine)
        for v in vertices:                                     # 1. compute
            messages = inbox.get(v.id, [])
            if messages:
                v.active = True                                # a message wakes it up
            if v.active:
                compute(v, messages, ctx)
        inbox = {}
        for box in comm.alltoall(ctx.outboxes):                # 2. exchange the messages
            for dst, msg in box.items():
                inbox.setdefault(dst, []).extend(msg if combine is None else [msg])
        aggregated = comm.allreduce(ctx.aggregates, op=add_aggregates)
        busy = comm.allreduce(sum(v.active for v in vertices) + ctx.sent)
        comm.barrier()                                         # 3. the end of the superstep
        if busy == 0:
            break
    return {v.id: v.value for v in vertices}
