"""Checks for lesson 04 (message passing): gather and scatter from send/recv, the parallel
gradient over shards, one Pregel superstep of PageRank. Each runs the learner's function
on real worker processes that talk through ``ddl_lab.message_passing.comm``."""
from __future__ import annotations

import operator
import time
from typing import Any, Callable

import numpy as np

from . import _core
from ._core import fail, first_difference, passed, run_on_workers
from ddl_lab.message_passing.comm import _comm_main
from ddl_lab.message_passing.pregel import Graph, pagerank_step, run_pregel, web_graph

__all__ = ["gather_from_p2p", "scatter_from_p2p", "parallel_gradient", "pagerank_superstep"]

WORLD = 4
_STAGGER_S = 0.05       # gather: higher ranks send first, so arrival order != rank order


def _on_workers(learner: Callable, worker: Callable, *args: Any,
                world_size: int = WORLD) -> tuple[list, list[dict]]:
    """Run ``worker(comm, *args)`` on real workers; (results, per-rank message records).

    Each wait inside the communicator times out after a quarter of the check's time, so a
    deadlock is reported by the ranks themselves (who waited for whom, which tag).
    """
    __tracebackhide__ = True
    total = _core.DEFAULT_TIMEOUT
    out = run_on_workers(_comm_main, world_size, worker, args, {}, total / 4, total / 2,
                         learner_fn=learner, timeout=total)
    return [r for r, _ in out], [rec for _, rec in out]


def _only_send_recv(name: str, records: list[dict]) -> None:
    used = sorted({s[3] for rec in records for s in rec["sent"]} - {"send"})
    if used:
        fail(f"{name} used comm.{used[0]}: this task is to build it from comm.send and "
             "comm.recv only.")


# ------------------------------------------------------------------ task 1: gather

def _gather_worker(comm: Any, my_gather: Callable, root: int) -> Any:
    if comm.rank != root:
        time.sleep(_STAGGER_S * (comm.size - 1 - comm.rank))
    return my_gather(comm, _gather_value(comm.rank), root)


def _gather_value(rank: int) -> dict:
    return {"from rank": rank, "data": list(range(rank + 1))}


def gather_from_p2p(my_gather: Callable, world_size: int = WORLD) -> None:
    """Lesson 04, task 1: ``my_gather(comm, value, root)`` built from send/recv returns, on
    the root, every rank's value in rank order, and None on the other ranks."""
    __tracebackhide__ = True
    want = [_gather_value(r) for r in range(world_size)]
    for root in (0, 2):
        got, records = _on_workers(my_gather, _gather_worker, my_gather, root,
                                   world_size=world_size)
        _only_send_recv("my_gather", records)
        res = got[root]
        if not isinstance(res, (list, tuple)):
            fail(f"with root={root}, the root returned {res!r} ({type(res).__name__}); it "
                 f"should return the list of all {world_size} values, in rank order.")
        senders = [v.get("from rank") if isinstance(v, dict) else v for v in res]
        if len(res) != world_size:
            hint = (" The root's own value is missing: put `value` itself at index root."
                    if len(res) == world_size - 1 and root not in senders else "")
            fail(f"with root={root}, the root returned {len(res)} values from ranks "
                 f"{senders}, expected {world_size}, one per rank.{hint}")
        if list(res) != want:
            if sorted(map(str, senders)) == sorted(map(str, range(world_size))):
                fail(f"with root={root}, the root's list holds the values of ranks "
                     f"{senders}, in that order; expected ranks {list(range(world_size))}. "
                     "Did you receive with ANY_SOURCE and append in arrival order? "
                     "Messages arrive in any order: receive from each rank in turn "
                     "(source=r) so that index r holds rank r's value.")
            fail(f"with root={root}, the root returned {res!r}; expected {want!r}.")
        for r, v in enumerate(got):
            if r != root and v is not None:
                fail(f"with root={root}, rank {r} returned {v!r}; only the root returns the "
                     "list, every other rank returns None (as comm.gather does).")
    passed("gather_from_p2p", f"on {world_size} workers with roots 0 and 2, the root got "
           "every rank's value in rank order although they arrived in reverse")


# ----------------------------------------------------------------- task 2: scatter

def _scatter_chunks(size: int) -> list:
    return [{"for rank": r, "data": np.arange(3) + 10 * r} for r in range(size)]


def _scatter_worker(comm: Any, my_scatter: Callable, root: int) -> Any:
    chunks = _scatter_chunks(comm.size) if comm.rank == root else None
    return my_scatter(comm, chunks, root)


def _which_chunk(value: Any, chunks: list) -> int | None:
    for j, c in enumerate(chunks):
        if isinstance(value, dict) and value.get("for rank") == j \
                and np.array_equal(value.get("data"), c["data"]):
            return j
    return None


def scatter_from_p2p(my_scatter: Callable, world_size: int = WORLD) -> None:
    """Lesson 04, task 2: ``my_scatter(comm, chunks, root)`` built from send/recv: rank r
    returns ``chunks[r]`` of the root's list (the other ranks pass chunks=None)."""
    __tracebackhide__ = True
    chunks = _scatter_chunks(world_size)
    for root in (0, 1):
        got, records = _on_workers(my_scatter, _scatter_worker, my_scatter, root,
                                   world_size=world_size)
        _only_send_recv("my_scatter", records)
        for r, v in enumerate(got):
            j = _which_chunk(v, chunks)
            if j == r:
                continue
            if isinstance(v, (list, tuple)) and len(v) == world_size:
                fail(f"with root={root}, rank {r} returned the whole list of {world_size} "
                     f"chunks; each rank returns only its own item, chunks[{r}].")
            if j is not None:
                fail(f"with root={root}, rank {r} returned chunks[{j}], the chunk meant for "
                     f"rank {j}; expected chunks[{r}]." + (
                         " The root keeps its own chunk without sending it." if r == root
                         else ""))
            fail(f"with root={root}, rank {r} returned {v!r}; expected chunks[{r}] = "
                 f"{chunks[r]!r}.")
        sent = sum(len(rec["sent"]) for rec in records)
        if sent > world_size:
            fail(f"with root={root}, {sent} messages were sent; a scatter needs one per "
                 f"rank other than the root ({world_size - 1}).")
    passed("scatter_from_p2p", f"on {world_size} workers with roots 0 and 1, every rank got "
           f"its own chunk, with {world_size - 1} messages from the root")


# ------------------------------------------------------- task 3: parallel gradient

_SIZES = [40, 70, 25, 65]      # unequal on purpose: averaging twice then shows


def _gradient_data() -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    rng = np.random.default_rng(4)
    m, d = sum(_SIZES), 5
    X = rng.normal(size=(m, d))
    y = X @ rng.normal(size=d) + 0.3 * rng.normal(size=m)
    cuts = np.cumsum(_SIZES)[:-1]
    return rng.normal(size=d), list(zip(np.split(X, cuts), np.split(y, cuts)))


def _gradient_worker(comm: Any, parallel_gradient: Callable, theta: np.ndarray,
                     shards: list) -> Any:
    X, y = shards[comm.rank]
    m = sum(len(ys) for _, ys in shards)
    return parallel_gradient(comm, theta.copy(), X, y, m)


def parallel_gradient(parallel_gradient: Callable) -> None:
    """Lesson 04, task 3: ``parallel_gradient(comm, theta, X, y, m)`` returns on every rank
    the full-batch gradient ∇J(θ) = 1/m Σ_i (x_i·θ − y_i) x_i from each rank's shard."""
    __tracebackhide__ = True
    theta, shards = _gradient_data()
    got, _ = _on_workers(parallel_gradient, _gradient_worker, parallel_gradient, theta, shards)
    k, m = len(shards), sum(_SIZES)
    sums = [X.T @ (X @ theta - y) for X, y in shards]
    want = sum(sums) / m
    wrong = {
        "each rank returned only its own shard's gradient: add the shards' sums over all "
        "ranks (comm.allreduce) before dividing": None,
        f"that is Σ_j (mean over shard j) / k: you averaged twice — each rank divided by its "
        f"shard size, then the sum was divided by k = {k}. With shards of different sizes "
        f"({_SIZES}) that weighs examples unequally: add the per-example gradients, add the "
        "ranks' sums, divide by m once": sum(s / n for s, n in zip(sums, _SIZES)) / k,
        "that is the sum of the shards' means: each rank divided by its own shard size. "
        "Add the raw sums and divide by the total m once": sum(s / n for s, n in
                                                                   zip(sums, _SIZES)),
        f"that is ∇J divided by k = {k} as well: the 1/m already averages over all "
        "examples, do not divide by the number of workers too": want / k,
        f"that is the sum over all m = {m} examples, not divided by m": want * m,
        "that is ∇J divided by m twice": want / m,
    }
    for r, g in enumerate(got):
        try:
            g = np.asarray(g, dtype=float)
        except (TypeError, ValueError):
            fail(f"rank {r} returned {type(g).__name__}; return a numpy array of shape "
                 f"{want.shape}.")
        diff = first_difference(want, g, rtol=1e-6, atol=1e-9)
        if diff is None:
            continue
        for why, value in wrong.items():
            mine = [sums[r], sums[r] / _SIZES[r], sums[r] / m] if value is None else [value]
            if g.shape == want.shape and any(np.allclose(g, v, rtol=1e-6, atol=1e-9)
                                             for v in mine):
                fail(f"rank {r} returned a wrong gradient: {why}. ({diff})")
        fail(f"rank {r} returned a wrong gradient: {diff}.")
    passed("parallel_gradient", f"every one of {k} ranks holds ∇J(θ) over all m = {m} "
           f"examples, from shards of sizes {_SIZES}")


# ------------------------------------------------------------ task 4: PageRank

def _check_graph() -> Graph:
    return web_graph(n=24, avg_degree=3.0, dangling=0.2, seed=3)


def pagerank_superstep(pagerank_compute: Callable, supersteps: int = 4,
                       damping: float = 0.85) -> None:
    """Lesson 04, task 4: the vertex program ``pagerank_compute(vertex, messages, ctx)``
    makes each Pregel superstep s produce power iterate s of PageRank."""
    __tracebackhide__ = True
    graph = _check_graph()
    parts, _ = _on_workers(pagerank_compute, run_pregel, graph, pagerank_compute,
                           supersteps, operator.add)
    values = np.full((supersteps, graph.n), np.nan)
    for p in parts:
        if len(p["snapshots"]):
            values[:len(p["snapshots"]), p["ids"]] = p["snapshots"]
    dangling = int((graph.out_degree() == 0).sum())
    expected = [np.full(graph.n, 1.0 / graph.n)]
    for _ in range(supersteps - 1):
        expected.append(pagerank_step(graph, expected[-1], damping))
    for s in range(supersteps):
        got, want = values[s], expected[s]
        diff = first_difference(want, got, rtol=1e-9, atol=1e-12)
        if diff is None:
            continue
        where = f"after superstep {s}, the values differ from power iterate {s}: {diff}"
        if np.isnan(got).any():
            fail(f"the run stopped after {int(np.isnan(values[:, 0]).argmax())} supersteps "
                 f"instead of {supersteps}: did every vertex vote to halt? Vote to halt "
                 "only when the work is done (the check runs a fixed number of supersteps).")
        if s == 0:
            fail(f"{where}. In superstep 0 no messages have arrived yet: keep the initial "
                 "value 1/n and only send it (value / number of out-edges) along the edges.")
        prev = expected[s - 1]
        hints = {
            "the (1 − d)/n term is missing (the random jump to any page)":
                pagerank_step(graph, prev, damping, teleport=False),
            "the rank of the dangling vertices (no out-edges) is lost: in each superstep "
            "they must ctx.aggregate('dangling', value), and every vertex adds "
            "d · ctx.aggregated('dangling') / n":
                pagerank_step(graph, prev, damping, dangling=False),
            "both the (1 − d)/n term and the dangling vertices' share are missing":
                pagerank_step(graph, prev, damping, teleport=False, dangling=False),
            "the damping factor d is not applied (d = 1)": pagerank_step(graph, prev, 1.0),
            "the damping is applied to the messages but not to the dangling share":
                pagerank_step(graph, prev, damping, dangling=False)
                + prev[graph.out_degree() == 0].sum() / graph.n,
        }
        for why, value in hints.items():
            if np.allclose(got, value, rtol=1e-9, atol=1e-12):
                fail(f"{where}. Your values match a superstep where {why}.")
        fail(f"{where}. The values add up to {got.sum():.6f} (PageRank keeps the total at "
             "1). new value = (1 − d)/n + d·(sum(messages) + ctx.aggregated('dangling')/n); "
             "then send value/len(out_edges) to each out-edge, or aggregate it as "
             "'dangling' if there are none.")
    passed("pagerank_superstep", f"{supersteps} supersteps on {WORLD} workers match power "
           f"iteration on a {graph.n}-page graph with {dangling} dangling pages")
