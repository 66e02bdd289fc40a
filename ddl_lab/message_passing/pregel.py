"""Graph-parallel computing in the BSP / Pregel style (lesson 04; Do's lecture, "Graph
Parallel ML – BSP, Pregel, GAS").

Pregel (Malewicz et al., SIGMOD 2010) "thinks like a vertex". The vertices are split over
the workers (vertex v lives on worker v mod k) and a computation is a sequence of
*supersteps*. In each one, every active vertex runs the same ``compute(vertex, messages,
ctx)``: it reads the messages sent to it in the previous superstep, updates its value,
sends messages along its out-edges and may vote to halt. Then the workers exchange the
messages (one ``alltoall``), add up the aggregators (one ``allreduce``) and wait for each
other (``barrier``): bulk synchronous parallel. The run ends when every vertex has voted
to halt and no message is in flight; a message wakes a halted vertex up.

PageRank as a vertex program, with D the rank held by dangling vertices (no out-edges),
spread over all n vertices through an aggregator:

    r_v ← (1 − d)/n + d · ( Σ_{u→v} r_u / outdeg(u)  +  D/n )
"""
from __future__ import annotations

import functools
import operator
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ddl_lab.message_passing.comm import Comm, comm_run

__all__ = ["Graph", "web_graph", "pagerank_step", "pagerank_power", "pagerank_exact",
           "Vertex", "Context", "add_aggregates", "my_vertices", "run_pregel", "PregelRun",
           "pregel", "pregel_pagerank"]


@dataclass
class Graph:
    """A directed graph on vertices 0..n-1: edge i goes from ``src[i]`` to ``dst[i]``."""

    n: int
    src: np.ndarray
    dst: np.ndarray

    def out_degree(self) -> np.ndarray:
        return np.bincount(self.src, minlength=self.n)

    def out_edges(self, v: int) -> np.ndarray:
        return self.dst[self.src == v]


def web_graph(n: int = 200, avg_degree: float = 4.0, dangling: float = 0.1,
              seed: int = 0) -> Graph:
    """A small web-like digraph: a few popular pages that many link to, and a fraction
    ``dangling`` of pages without out-links (deterministic under ``seed``)."""
    if n < 3 or not 0 <= dangling < 1 or not 1 <= avg_degree < n:
        raise ValueError(f"need n >= 3, 0 <= dangling < 1, 1 <= avg_degree < n; got "
                         f"n={n!r}, dangling={dangling!r}, avg_degree={avg_degree!r}")
    rng = np.random.default_rng(seed)
    popularity = 1.0 / (1 + rng.permutation(n)) ** 0.9
    has_links = rng.random(n) >= dangling
    src, dst = [], []
    for u in np.flatnonzero(has_links):
        p = popularity.copy()
        p[u] = 0.0
        k = min(n - 1, 1 + rng.poisson(avg_degree - 1))
        targets = rng.choice(n, size=k, replace=False, p=p / p.sum())
        src += [u] * k
        dst += sorted(targets.tolist())
    return Graph(n, np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64))


def pagerank_step(graph: Graph, r: np.ndarray, damping: float = 0.85, teleport: bool = True,
                  dangling: bool = True) -> np.ndarray:
    """One power-iteration step on the whole graph (the single-process reference).

    ``teleport=False`` drops the (1 − d)/n term and ``dangling=False`` the D/n term: the
    mistakes lesson 04's check recognises.
    """
    out = graph.out_degree()
    spread = np.zeros(graph.n)
    np.add.at(spread, graph.dst, r[graph.src] / out[graph.src])
    lost = r[out == 0].sum() if dangling else 0.0
    base = (1 - damping) / graph.n if teleport else 0.0
    return base + damping * (spread + lost / graph.n)


def pagerank_power(graph: Graph, damping: float = 0.85, tol: float = 1e-10,
                   max_iter: int = 200) -> list[np.ndarray]:
    """Power iteration from the uniform vector until the L1 change < tol: every iterate."""
    _check_damping(damping)
    iterates = [np.full(graph.n, 1.0 / graph.n)]
    for _ in range(max_iter):
        iterates.append(pagerank_step(graph, iterates[-1], damping))
        if np.abs(iterates[-1] - iterates[-2]).sum() < tol:
            break
    return iterates


def _check_damping(damping: float) -> None:
    if not 0 < damping < 1:
        raise ValueError(f"damping must be between 0 and 1, got {damping!r}")


def pagerank_exact(graph: Graph, damping: float = 0.85) -> np.ndarray:
    """PageRank solved directly, (I − d·M) r = (1 − d)/n · 1 with M the transition matrix
    (dangling pages link to every page): the reference the iterations converge to."""
    _check_damping(damping)
    n, out = graph.n, graph.out_degree()
    M = np.zeros((n, n))
    np.add.at(M, (graph.dst, graph.src), 1.0 / out[graph.src])
    M[:, out == 0] = 1.0 / n
    return np.linalg.solve(np.eye(n) - damping * M, np.full(n, (1 - damping) / n))


# ------------------------------------------------------------------- the engine

class Vertex:
    """A vertex as its program sees it: id, value, out-edges (target ids), active flag."""

    __slots__ = ("id", "value", "out_edges", "active")

    def __init__(self, id: int, value: float, out_edges: np.ndarray):
        self.id, self.value, self.out_edges, self.active = id, value, out_edges, True

    def vote_to_halt(self) -> None:
        """Stay inactive until a message arrives."""
        self.active = False

    def __repr__(self) -> str:
        return f"Vertex({self.id}, value={self.value:.4g}, out_edges={len(self.out_edges)})"


class Context:
    """What a vertex program may do besides touching its vertex: send, aggregate."""

    def __init__(self, superstep: int, num_vertices: int, workers: int,
                 aggregated: dict[str, float], combine: Callable | None):
        self.superstep, self.num_vertices = superstep, num_vertices
        self._workers, self._previous, self._combine = workers, aggregated, combine
        self.outboxes: list[dict] = [{} for _ in range(workers)]
        self.aggregates: dict[str, float] = {}
        self.sent = 0

    def send(self, dst: int, message: Any) -> None:
        """Deliver ``message`` to vertex ``dst`` at the start of the next superstep."""
        dst = int(dst)
        box = self.outboxes[dst % self._workers]
        self.sent += 1
        if self._combine is None:
            box.setdefault(dst, []).append(message)
        else:                                     # a combiner: one message per target
            box[dst] = self._combine(box[dst], message) if dst in box else message

    def aggregate(self, name: str, value: float) -> None:
        """Add ``value`` to the global aggregator ``name`` (visible next superstep)."""
        self.aggregates[name] = self.aggregates.get(name, 0.0) + value

    def aggregated(self, name: str, default: float = 0.0) -> float:
        """The sum over all vertices of what they aggregated as ``name`` last superstep."""
        return self._previous.get(name, default)


def add_aggregates(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    """Two workers' aggregators added up, name by name (an allreduce's op)."""
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0.0) + v
    return out


def _add_stats(a: tuple, b: tuple) -> tuple:
    """Add (active, sent, crossing, aggregators) of two workers."""
    return a[0] + b[0], a[1] + b[1], a[2] + b[2], add_aggregates(a[3], b[3])


def my_vertices(graph: Graph, rank: int, k: int) -> list[Vertex]:
    """The vertices worker ``rank`` of k owns (v ≡ rank mod k), each with its out-edges."""
    order = np.argsort(graph.src, kind="stable")
    starts = np.searchsorted(graph.src[order], np.arange(graph.n + 1))
    return [Vertex(int(v), 1.0 / graph.n, graph.dst[order[starts[v]:starts[v + 1]]])
            for v in range(rank, graph.n, k)]


def run_pregel(comm: Comm, graph: Graph, compute: Callable, max_supersteps: int = 50,
               combine: Callable | None = operator.add) -> dict:
    """The BSP engine (runs on every rank): this rank owns the vertices v ≡ rank (mod k).

    Each superstep: compute on every active vertex (or one with messages), exchange the
    messages with ``alltoall``, add the aggregators with ``allreduce``, ``barrier``.
    Returns this rank's vertex ids, its values after every superstep (row s: after
    superstep s), and per-superstep statistics (the same on every rank).
    """
    k, n = comm.size, graph.n
    ids = np.arange(comm.rank, n, k)
    vertices = my_vertices(graph, comm.rank, k)
    inbox: dict[int, list] = {}
    aggregated: dict[str, float] = {}
    snapshots, history = [], []
    for step in range(max_supersteps):
        t0 = time.perf_counter()
        ctx = Context(step, n, k, aggregated, combine)
        for v in vertices:
            messages = inbox.get(v.id, [])
            if messages:
                v.active = True
            if v.active:
                compute(v, messages, ctx)
        t1 = time.perf_counter()
        inbox = {}
        for box in comm.alltoall(ctx.outboxes):              # message exchange
            for dst, msg in box.items():
                inbox.setdefault(dst, []).extend(msg if combine is None else [msg])
        active = sum(v.active for v in vertices)
        crossing = sum(len(b) for r, b in enumerate(ctx.outboxes) if r != comm.rank)
        stats = comm.allreduce((active, ctx.sent, crossing, ctx.aggregates), op=_add_stats)
        comm.barrier()                                          # end of the superstep
        aggregated = stats[3]
        snapshots.append(np.array([v.value for v in vertices]))
        history.append({"superstep": step, "active": stats[0], "messages": stats[1],
                        "crossing": stats[2], "compute_s": t1 - t0,
                        "exchange_s": time.perf_counter() - t1, **aggregated})
        if stats[0] == 0 and stats[1] == 0:
            break
    return {"ids": ids, "snapshots": np.array(snapshots), "history": history}


@dataclass
class PregelRun:
    """A whole run: values (n,), the values after every superstep (S, n), statistics.

    For PageRank, row s equals power iterate s: superstep 0 only sends the initial 1/n.
    """

    values: np.ndarray
    snapshots: np.ndarray
    history: list[dict]
    workers: int
    wall_s: float


def pregel(graph: Graph, world_size: int, compute: Callable, max_supersteps: int = 50,
           combine: Callable | None = operator.add, timeout: float = 10.0) -> PregelRun:
    """Run the vertex program ``compute`` on ``world_size`` workers; gather the values."""
    if max_supersteps < 1:
        raise ValueError(f"max_supersteps must be >= 1, got {max_supersteps!r}")
    t0 = time.perf_counter()
    parts = comm_run(run_pregel, world_size, graph, compute, max_supersteps, combine,
                     timeout=timeout)
    steps = len(parts[0]["snapshots"])
    snapshots = np.zeros((steps, graph.n))
    for part in parts:
        snapshots[:, part["ids"]] = part["snapshots"]
    return PregelRun(snapshots[-1], snapshots, parts[0]["history"], world_size,
                     time.perf_counter() - t0)


def _pagerank_vertex(vertex: Vertex, messages: list[float], ctx: Context,
                     damping: float = 0.85, tol: float = 1e-10) -> None:
    """PageRank, thinking like a vertex (Pregel's own example, with dangling vertices;
    exercise 04's last task, hence the private name).

    Superstep 0 only sends the initial value. Once the total change of the previous
    superstep is below ``tol``, every vertex votes to halt and the run ends.
    """
    n = ctx.num_vertices
    if ctx.superstep > 0:
        if ctx.aggregated("change", default=np.inf) < tol:
            vertex.vote_to_halt()
            return
        new = (1 - damping) / n + damping * (sum(messages) + ctx.aggregated("dangling") / n)
        ctx.aggregate("change", abs(new - vertex.value))
        vertex.value = new
    if len(vertex.out_edges):
        share = vertex.value / len(vertex.out_edges)
        for w in vertex.out_edges:
            ctx.send(w, share)
    else:
        ctx.aggregate("dangling", vertex.value)


def pregel_pagerank(graph: Graph, world_size: int = 4, damping: float = 0.85,
                    tol: float = 1e-10, max_supersteps: int = 200) -> PregelRun:
    """PageRank of ``graph`` in supersteps on ``world_size`` workers (lesson 04)."""
    _check_damping(damping)
    return pregel(graph, world_size, functools.partial(_pagerank_vertex, damping=damping,
                                                        tol=tol), max_supersteps)
