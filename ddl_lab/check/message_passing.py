"""Checks for lesson 04 (message passing): gather, scatter, the parallel gradient, a Pregel
PageRank superstep, a binomial-tree gather and a pipelined chain broadcast (their shapes judged
too) on real workers talking through the lesson's ``comm``; a tree gather's time; chunking."""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np

from ddl_lab.message_passing.comm import ANY_SOURCE, ANY_TAG, comm_main
from ddl_lab.runtime.costs import message_time

from . import _answers as answers
from . import _core
from ._core import CheckFailed, fail, task
from ._diagnose import (Case, Snapshot, as_array, describe_value, differs, explain, only_right_for,
                        returned_none, table)
from ._trial import Trial, formula_cases

__all__ = ["gather", "scatter", "parallel_gradient", "pagerank_compute", "tree_gather",
           "tree_gather_time", "chain_bcast", "pipeline_chunks"]

WORLD_SIZES = (4, 3)        # the lesson's 4 first, then 3: code that assumes 4 shows
_PKG = "ddl_lab.message_passing"


def _trial(task: str, fn: Callable, seed: int, fixed: list[dict], draw: Callable) -> Trial:
    return Trial(task, fn, seed, fixed, draws=1, draw=draw, timeout=_core.DEFAULT_TIMEOUT)


def _on_workers(trial: Trial, worker: Callable, n: int, *args: Any,
                send_recv_only: bool = False) -> tuple[list, list]:
    """``worker(comm, *args)`` on n real workers: (results, per-rank message records). Each
    wait in the communicator times out after a quarter of the check's time, so the ranks
    report a deadlock themselves; ``send_recv_only`` refuses the communicator's collectives."""
    total = _core.DEFAULT_TIMEOUT
    out = trial.world(comm_main, n, worker, args, {}, total / 4, total / 2)
    records = [rec for _, rec in out]
    used = sorted({s[3] for rec in records for s in rec["sent"]} - {"send"})
    if send_recv_only and used:
        fail(f"{trial.name} used comm.{used[0]}: this task is to build it from comm.send and "
             "comm.recv only.")
    return [r for r, _ in out], records


def _each(trial: Trial, one: Callable[[Any], None]) -> str:
    """``one(case)`` for every case of ``trial``, a failure quoting the case and the sizes and
    roots that passed (``trial.right``); the sizes that passed."""
    def hint(case: Any) -> str:
        n, root = case.params["n"], case.params.get("root")
        other_n = [f"{c.params['n']} ranks" for c in trial.right if c.params["n"] != n]
        same_n = [f"root {c.params['root']}" for c in trial.right
                  if c.params["n"] == n and c.params.get("root") not in (None, root)]
        return (only_right_for(sorted(set(other_n)), f"{n} ranks") if other_n else
                only_right_for(sorted(set(same_n)), f"root {root}", "root") if same_n else "")
    for case in trial:
        try:
            one(case)
        except CheckFailed as e:
            raise CheckFailed(f"{e} [{case}]{hint(case)}") from None
        trial.right.append(case)
    return " and ".join(sorted({f"{c.params['n']} ranks" for c in trial.right}, reverse=True))


def _root_case(rng: np.random.Generator) -> dict[str, Any]:
    n = int(rng.choice(WORLD_SIZES))
    return {"n": n, "root": int(rng.integers(0, n))}


# ------------------------------------------------------------------ task 1: gather

@task("message_passing")
def gather(my_gather: Callable, seed: int = 0) -> None:
    """Lesson 04, task 1: ``my_gather(comm, value, root)`` built from send/recv returns, on
    the root, every rank's value in rank order, and None on the other ranks; each other
    rank sends the root one message."""
    trial = _trial("gather", my_gather, seed, table("n root", (4, 0), (4, 3), (3, 2)), _root_case)

    def one(case: Any) -> None:
        n, root = case.params["n"], case.params["root"]
        values = [gather_value(r, case.index) for r in range(n)]
        out, records = _on_workers(trial, logged, n, my_gather, [(v, root) for v in values],
                                   root, send_recv_only=True)
        _judge_gather(trial.name, [r for r, _ in out], values, root, n)
        sent = [(rec["rank"], s[0]) for rec in records for s in rec["sent"] if s[0] != rec["rank"]]
        if sorted(sent) != sorted((r, root) for r in range(n) if r != root):
            fail(f"{len(sent)} messages were sent ({sent[:8]} as (from, to)); a gather needs "
                 f"exactly {n - 1}: one from each other rank to the root.")

    trial.passed(f"on {_each(trial, one)} with roots 0, 3, 2 and a drawn one, the root got every "
                 "rank's value in rank order (its ANY_SOURCE receives answered latest rank "
                 "first), from one message per other rank")


def _judge_gather(name: str, got: list, want: list, root: int, n: int) -> None:
    """Fail unless the root returned every value in rank order and the others None."""
    res = got[root]
    if not isinstance(res, (list, tuple)):
        fail(returned_none(res, f"{name} on the root (rank {root})", f"the list of all {n} "
                           "values") or f"the root returned {res!r:.60} "
             f"({type(res).__name__}); it should return the list of all {n} values, in rank "
             "order.")
    senders = [v.get("from rank") if isinstance(v, dict) else v for v in res]
    if len(res) != n:
        hint = (" The root's own value is missing: put `value` itself at index root."
                if len(res) == n - 1 and root not in senders else "")
        fail(f"the root returned {len(res)} values from ranks {senders}, expected {n}, one "
             f"per rank.{hint}")
    right = [isinstance(g, dict) and g.get("from rank") == w["from rank"]
             and np.array_equal(g.get("data"), w["data"]) for g, w in zip(res, want)]
    if not all(right):
        if sorted(map(str, senders)) == sorted(map(str, range(n))) and \
                list(map(str, senders)) != list(map(str, range(n))):
            fail(f"the root's list holds the values of ranks {senders}, in that order; "
                 f"expected ranks {list(range(n))}. Messages from different ranks arrive in "
                 "any order (here the ANY_SOURCE receives got the latest rank first): receive "
                 "from each rank in turn (source=r), so that index r holds rank r's value.")
        i = right.index(False)
        fail(f"the root's list at index {i} holds {res[i]!r:.200}; "
             f"expected rank {i}'s value {want[i]!r:.200}, as rank {i} sent it.")
    for r, v in enumerate(got):
        if r != root and v is not None:
            fail(f"rank {r} returned {v!r:.60}; only the root returns the list, every other "
                 "rank returns None (as comm.gather does).")


# ----------------------------------------------------------------- task 2: scatter

@task("message_passing")
def scatter(my_scatter: Callable, seed: int = 0) -> None:
    """Lesson 04, task 2: ``my_scatter(comm, chunks, root)`` built from send/recv: rank r
    returns ``chunks[r]`` of the root's list (the other ranks pass chunks=None); the root
    sends each other rank its own item only — one message, about that item's size."""
    trial = _trial("scatter", my_scatter, seed, table("n root", (4, 0), (4, 2), (3, 1)), _root_case)

    def one(case: Any) -> None:
        n, root = case.params["n"], case.params["root"]
        rng = np.random.default_rng([case.index, 99])     # the root's chunks, handed to it alone
        chunks = [{"for rank": r, "data": rng.normal(size=int(rng.integers(300, 2000)))}
                  for r in range(n)]
        out, records = _on_workers(trial, logged, n, my_scatter, [
            (chunks if r == root else None, root) for r in range(n)], send_recv_only=True)
        _judge_scatter([r for r, _ in out], records, chunks, root, n)

    trial.passed(f"on {_each(trial, one)} with roots 0, 2, 1 and a drawn one, every rank got its "
                 "own chunk, the root sending each other rank one message of that chunk's size")


def _judge_scatter(got: list, records: list[dict], chunks: list, root: int, n: int) -> None:
    for r, v in enumerate(got):
        j = next((j for j, c in enumerate(chunks) if isinstance(v, dict) and
                  v.get("for rank") == j and np.array_equal(v.get("data"), c["data"])), None)
        if j == r:
            continue
        if isinstance(v, (list, tuple)) and len(v) == n:
            fail(f"rank {r} returned the whole list of {n} chunks; each rank returns only its "
                 f"own item, chunks[{r}].")
        if j is not None:
            fail(f"rank {r} returned chunks[{j}], the chunk meant for rank {j}; expected "
                 f"chunks[{r}]." + (" The root keeps its own chunk without sending it."
                                    if r == root else ""))
        fail(f"rank {r} returned {v!r:.80}; expected chunks[{r}] = {{'for rank': {r}, "
             f"'data': array of {len(chunks[r]['data'])} numbers}}.")
    sent = {(rec["rank"], s[0]): s[4] for rec in records for s in rec["sent"]}
    pairs = [(rec["rank"], s[0]) for rec in records for s in rec["sent"]]
    if sorted(pairs) != sorted((root, r) for r in range(n) if r != root):
        fail(f"{len(pairs)} messages were sent ({pairs[:8]} as (from, to)); a scatter needs "
             f"exactly {n - 1}: one from the root to each other rank.")
    for r in sorted(set(range(n)) - {root}):
        own = chunks[r]["data"].nbytes
        if sent[(root, r)] > 1.25 * own + 512:
            fail(f"the root sent rank {r} {sent[(root, r)]:,} bytes, "
                 f"{sent[(root, r)] / own:.1f}× the size of chunks[{r}] ({own:,} bytes): "
                 f"send each rank only its own item (chunks[{r}]), not the whole list — "
                 "that is what makes a scatter cheaper than a broadcast.")


# ------------------------------------------------------- task 3: parallel gradient

def _gradient_case(rng: np.random.Generator) -> dict[str, Any]:
    n = int(rng.choice(WORLD_SIZES))
    return {"n": n, "sizes": [int(s) for s in rng.integers(0, 60, size=n)],
            "d": int(rng.integers(1, 7)), "dtype": str(rng.choice(["float64", "float32"]))}


def _gradient_data(case: Any) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    sizes, d, rng = case.params["sizes"], case.params["d"], case.rng
    X = rng.normal(size=(sum(sizes), d)) * 10 ** rng.uniform(-1, 1, size=d)
    y = X @ rng.normal(size=d) + 0.3 * rng.normal(size=len(X))
    cuts = np.cumsum(sizes)[:-1]
    dt = case.params["dtype"]
    return (rng.normal(size=d).astype(dt),
            [(a.astype(dt), b.astype(dt)) for a, b in zip(np.split(X, cuts), np.split(y, cuts))])


def _gradient_worker(comm: Any, fn: Callable, theta: np.ndarray, shards: list) -> Any:
    X, y = shards[comm.rank]
    inputs = Snapshot(theta=theta, X=X, y=y)
    out = fn(comm, theta, X, y, sum(len(ys) for _, ys in shards))
    return out, inputs.changed(getattr(fn, "__name__", "my_parallel_gradient"))


@task("message_passing", refuses=(_PKG, "parallel_gd"))
def parallel_gradient(my_parallel_gradient: Callable, seed: int = 0) -> None:
    """Lesson 04, task 3: ``my_parallel_gradient(comm, theta, X, y, m)`` returns on every
    rank the full-batch gradient ∇J(θ) = 1/m Σ_i (x_i·θ − y_i) x_i from each rank's shard
    (shards of different sizes, an empty one too), leaving its inputs unchanged."""
    trial = _trial("parallel_gradient", my_parallel_gradient, seed, table(
        "n sizes d dtype", (4, [40, 70, 25, 65], 5, "float64"), (3, [13, 0, 1], 3, "float64"),
        (4, [7, 30, 2, 11], 2, "float32")), _gradient_case)

    def one(case: Any) -> None:
        theta, shards = _gradient_data(case)
        got, _ = _on_workers(trial, _gradient_worker, case.params["n"], my_parallel_gradient,
                             theta, shards)
        _judge_gradient(my_parallel_gradient, got, theta, shards, case.params["sizes"])

    trial.passed(f"on {_each(trial, one)}, every rank holds ∇J(θ) over all m examples, from "
                 "shards of unequal sizes (an empty one too), float64 and float32")


def _judge_gradient(fn: Callable, got: list, theta: np.ndarray, shards: list,
                    sizes: list[int]) -> None:
    name, k, m = getattr(fn, "__name__", "my_parallel_gradient"), len(shards), sum(sizes)
    t64 = theta.astype(np.float64)
    sums = [X.T.astype(np.float64) @ (X.astype(np.float64) @ t64 - y) for X, y in shards]
    want = sum(sums) / m
    with np.errstate(all="ignore"):
        means = [s / n for s, n in zip(sums, sizes)]
        wrong = {
            f"that is Σ_j (mean over shard j) / k: you averaged twice — each rank divided by "
            f"its shard size, then the sum was divided by k = {k}. With shards of different "
            f"sizes ({sizes}) that weighs examples unequally: add the per-example gradients, "
            "add the ranks' sums, divide by m once": sum(means) / k,
            "that is the sum of the shards' means: each rank divided by its own shard size. "
            "Add the raw sums and divide by the total m once": sum(means),
            f"that is ∇J divided by k = {k} as well: the 1/m already averages over all "
            "examples, do not divide by the number of workers too": want / k,
            f"that is the sum over all m = {m} examples, not divided by m": want * m,
            "that is ∇J divided by m twice": want / m,
        }
    for r, (g, mutated) in enumerate(got):
        if mutated:
            fail(f"on rank {r}: {mutated}")
        if differs(want.astype(theta.dtype), g) is None:
            continue
        if as_array(g) is None:
            fail(returned_none(g, f"{name} on rank {r}", f"the gradient, an array of shape "
                               f"{want.shape}, on every rank") or
                 f"rank {r} returned {type(g).__name__}; return an array of shape {want.shape}.")
        if r > 0 and differs(want.astype(theta.dtype), got[0][0]) is None:
            fail(f"rank 0 holds ∇J but rank {r} returned {np.round(as_array(g), 4).tolist()}: "
                 "every rank needs the gradient for its own step — allreduce the sums, or "
                 "reduce then bcast.")
        hint = explain(g, wrong) or explain(g, {
            "each rank returned only its own shard's gradient: add the shards' sums over all "
            "ranks (comm.allreduce) before dividing": lambda v: any(
                differs(c, v) is None for c in (sums[r], means[r], sums[r] / m))})
        fail(f"rank {r} returned a wrong gradient: {hint or differs(want, g)}.")


# ------------------------------------------------------------ task 4: PageRank

@task("message_passing", refuses=(_PKG, "_pagerank_vertex", "pregel_pagerank"))
def pagerank_compute(my_pagerank_compute: Callable, seed: int = 0) -> None:
    """Lesson 04, task 4: the vertex program ``my_pagerank_compute(vertex, messages, ctx,
    damping)`` makes each Pregel superstep s produce power iterate s of PageRank, for any
    damping d, graph and number of workers."""
    trial = _trial("pagerank_compute", my_pagerank_compute, seed, table(
        "n pages dangling damping supersteps", (4, 24, 0.2, 0.85, 4), (3, 17, 0.3, 0.6, 4),
        (4, 31, 0.1, 0.9, 3)),
        lambda rng: {"n": int(rng.choice(WORLD_SIZES)), "pages": int(rng.integers(10, 40)),
                     "dangling": round(float(rng.uniform(0.05, 0.4)), 2),
                     "damping": round(float(rng.uniform(0.5, 0.95)), 3),
                     "supersteps": int(rng.integers(3, 6))})
    trial.passed(f"on {_each(trial, lambda case: _pagerank_one(trial, case))}, every superstep "
                 "matches power iteration on graphs of 17–39 pages with dangling pages, damping "
                 "0.6–0.9")


def _pagerank_one(trial: Trial, case: Any) -> None:
    from ddl_lab.message_passing.pregel import pagerank_step, run_pregel, web_graph
    p = case.params
    graph = web_graph(n=p["pages"], avg_degree=3.0, dangling=p["dangling"],
                      seed=int(case.rng.integers(1000)))
    d, steps = p["damping"], p["supersteps"]
    program = functools.partial(trial.fn, damping=d)
    parts, _ = _on_workers(trial, run_pregel, p["n"], graph, program, steps)
    values = np.full((steps, graph.n), np.nan)
    for part in parts:
        if len(part["snapshots"]):
            values[:len(part["snapshots"]), part["ids"]] = part["snapshots"]
    expected = [np.full(graph.n, 1.0 / graph.n)]
    for _ in range(steps - 1):
        expected.append(pagerank_step(graph, expected[-1], d))
    for s in range(steps):
        got, want = values[s], expected[s]
        if (diff := differs(want, got)) is None:
            continue
        where = f"after superstep {s}, the values differ from power iterate {s}: {diff}"
        if np.isnan(got).any():
            fail(f"the run stopped after {int(np.isnan(values[:, 0]).argmax())} supersteps "
                 f"instead of {steps}: did every vertex vote to halt? Vote to halt only when "
                 "the work is done (the check runs a fixed number of supersteps).")
        if s == 0:
            fail(f"{where}. In superstep 0 no messages have arrived yet: keep the initial "
                 "value 1/n and only send it (value / number of out-edges) along the edges.")
        prev, out = expected[s - 1], graph.out_degree()
        hint = explain(got, {
            f"the damping passed in is ignored (d = {d}): your values are those of d = 0.85 — "
            "use the `damping` argument": pagerank_step(graph, prev, 0.85) if d != 0.85 else None,
            "the (1 − d)/n term is missing (the random jump to any page)":
                pagerank_step(graph, prev, d, teleport=False),
            "the rank of the dangling vertices (no out-edges) is lost: in each superstep "
            "they must ctx.aggregate('dangling', value), and every vertex adds "
            "d · ctx.aggregated('dangling') / n": pagerank_step(graph, prev, d, dangling=False),
            "both the (1 − d)/n term and the dangling vertices' share are missing":
                pagerank_step(graph, prev, d, teleport=False, dangling=False),
            "the damping factor d is not applied (d = 1)": pagerank_step(graph, prev, 1.0),
            "the damping is applied to the messages but not to the dangling share":
                pagerank_step(graph, prev, d, dangling=False) + prev[out == 0].sum() / graph.n,
        })
        if hint:
            fail(f"{where}. Your values match a superstep where {hint}.")
        fail(f"{where}. The values add up to {np.nansum(got):.6f} (PageRank keeps the total "
             "at 1). new value = (1 − d)/n + d·(sum(messages) + ctx.aggregated('dangling')/n);"
             " then send value/len(out_edges) to each out-edge, or aggregate it as "
             "'dangling' if there are none.")


# ------------------------------------------------------- task 5: a binomial-tree gather

@task("message_passing")
def tree_gather(my_tree_gather: Callable, seed: int = 0) -> None:
    """Lesson 04, task 5: ``my_tree_gather(comm, value)`` gathers every rank's value on rank 0
    along the binomial tree: rank r ≠ 0 sends once, to r − 2^k (2^k its lowest set bit),
    the values of its subtree r … r + 2^k − 1; the root returns them in rank order."""
    trial = _trial("tree_gather", my_tree_gather, seed, [{"n": 4}, {"n": 3}],
                   lambda rng: {"n": int(rng.choice(WORLD_SIZES))})

    def one(case: Any) -> None:
        n, name = case.params["n"], trial.name
        values = [gather_value(r, case.index) for r in range(n)]
        out, _ = _on_workers(trial, logged, n, my_tree_gather, [(v,) for v in values],
                             send_recv_only=True)
        if fault := shape_fault([[(d, c) for op, d, c, _ in log if op == "send"]
                                 for _, log in out]):
            fail(f"{name} does not gather along the binomial tree ({n} ranks): {fault}")
        _judge_gather(name, [r for r, _ in out], values, 0, n)

    trial.passed(f"on {_each(trial, one)}, rank 0 got every value in rank order, each other rank "
                 "sending one message — its whole subtree — to its parent r − 2^k in the "
                 "binomial tree")


# ------------------------------------------------------- task 6: a tree gather's time

@task("message_passing")
def tree_gather_time(my_tree_gather_time: Callable, seed: int = 0) -> None:
    """Lesson 04, task 6: ``my_tree_gather_time(n, nbytes, alpha, beta)`` is the α–β time of
    a binomial-tree gather of S bytes per rank: ⌈log2 n⌉·α + (n − 1)·S·β."""
    trial = Trial("tree_gather_time", my_tree_gather_time, seed, table(
        "n nbytes alpha beta", (8, 1_000_000, 1e-5, 1e-9), (5, 4096, 5e-5, 1e-9),
        (1, 1_000_000, 1e-5, 1e-9), (6, 0, 2e-5, 1e-9), (13, 100_000, 0.0, 2e-9)), draws=5,
        draw=lambda rng: {"n": int(rng.choice([2, 3, 7, 12, 16, 31, 33, 100, 1000])),
                          "nbytes": int(10 ** rng.uniform(1, 8)),
                          "alpha": float(10 ** rng.uniform(-6, -3)),
                          "beta": float(10 ** rng.uniform(-11, -8))})
    formula_cases(trial, ("n", "nbytes", "alpha", "beta"), _tree_gather_seconds,
                  TREE_MISTAKES, "the predicted seconds as a number",
                  "count the rounds, and in each round the size of its longest message (how "
                  "many values its sender holds by then).")
    trial.passed(f"{len(trial)} cases (n = 1 to 1000, powers of two and not, S = 0 and α = 0 "
                 "included) match ⌈log2 n⌉·α + (n − 1)·S·β: the tree saves latency terms, not "
                 "the bytes that reach the root")


# ------------------------------------------------ task 7: a pipelined chain broadcast

@task("message_passing", refuses=(_PKG, "chain_bcast"))
def chain_bcast(my_chain_bcast: Callable, seed: int = 0) -> None:
    """Lesson 04, task 7: ``my_chain_bcast(comm, data, pieces)`` broadcasts rank 0's array
    down the chain 0 → 1 → … → n − 1 in ``pieces`` messages per link, each rank forwarding a
    piece before it receives the next; every rank returns the whole array. Judged by who
    actually sent each message and how many numbers it carried, not by the source a receive
    named."""
    trial = _trial("chain_bcast", my_chain_bcast, seed, table(
        "n numel pieces", (4, 1000, 5), (3, 7, 3), (4, 10, 1)), lambda rng: {
            "n": int(rng.choice(WORLD_SIZES)), "numel": int(rng.integers(1, 5000)),
            "pieces": int(rng.integers(2, 9))})

    def one(case: Any) -> None:
        n, numel, k = (case.params[key] for key in ("n", "numel", "pieces"))
        data = np.arange(numel, dtype=np.float64) * 0.5        # on rank 0 only
        out, _ = _on_workers(trial, logged, n, my_chain_bcast,
                             [(data if r == 0 else None, k) for r in range(n)], send_recv_only=True)
        if fault := chain_fault([log for _, log in out], k, numel):
            fail(f"{trial.name} does not pipeline down the chain ({n} ranks, {k} pieces of "
                 f"{numel} numbers): {fault}")
        for r, (got, _) in enumerate(out):
            if got is None or not np.array_equal(np.asarray(got), data):
                fail(f"rank {r} returned {describe_value(got)}, not the root's array of {numel} "
                     "numbers in order: every rank (the root too) returns the whole array, its "
                     "pieces joined in the order they were cut.")

    trial.passed(f"on {_each(trial, one)}, every rank got the root's array, each link carrying "
                 "one message per piece, each piece forwarded before the next came")


# ------------------------------------------------ task 8: pipelining a broadcast

@task("message_passing")
def pipeline_chunks(my_pipeline_chunks: Callable, seed: int = 0) -> None:
    """Lesson 04, task 8: ``my_pipeline_chunks(n, nbytes, alpha, beta)`` chooses how many
    pieces a broadcast down a chain of n ranks cuts its S bytes into. The broadcast runs on
    real workers; its α–β time, counted from the messages it sent, must be within 10 % of
    the fastest chunking's."""
    from ddl_lab.message_passing.pipeline import chain_time
    from ddl_lab.message_passing.trace import join_records
    from ddl_lab.message_passing.wire import encode
    header = encode(np.zeros(2))[1][0].nbytes             # the pickle around each piece
    trial = Trial("pipeline_chunks", my_pipeline_chunks, seed, PIPE_FIXED, draws=DRAWS,
                  draw=lambda rng: {
                      "n": int(rng.choice([3, 4, 5, 8, 16, 32, 64])),
                      "nbytes": 8 * int(10 ** rng.uniform(3.5, 6.5)),
                      "alpha": float(10 ** rng.uniform(-5.5, -2.5)),
                      "beta": float(10 ** rng.uniform(-10, -8.5))}, name="my_pipeline_chunks",
                  plan=True, timeout=_core.DEFAULT_TIMEOUT)
    name, shown, chosen, real = trial.name, [], [], REAL_DRAWS
    for case in trial:
        n, S, a, b = (case.params[k] for k in ("n", "nbytes", "alpha", "beta"))
        call = f"{name}(n={n}, nbytes={S}, alpha={a:.3g}, beta={b:.3g})"
        unseen = trial.unseen(case)
        k = pieces_of(trial.call(case, n, S, a, b, where=call), name, call, S // 8)
        chosen.append(k)
        t, sent = None, (n - 1) * k
        # run for real: every shown machine, and the first drawn one that the warm cluster
        # runs in a fraction of a second (n ≤ 4 ranks, ≤ 5 MB)
        if k <= MAX_PIECES and (not unseen or (real and n <= 4 and S <= 5_000_000)):
            real -= unseen                      # the first small unseen machine runs too
            ok, records = _on_workers(trial, pipeline_worker, n, S // 8, k)
            messages = join_records(records)
            if not all(ok):
                fail(f"the pipelined broadcast of {k} pieces did not deliver the message ({case}).")
            t, sent = chain_time(messages, a, b), len(messages)
        good, text = judge_pipeline(case, k, t, sent, header)
        if not good:
            note = (f" — a machine the prompt does not show: {answers.FUNCTION_OF_INPUTS}."
                    if unseen else "")
            fail(f"{call}: {text} ({case}){note}"
                 + answers.same_for_all(chosen, "number of pieces", "machines"))
        if not unseen:
            shown.append(text)
    trial.passed("; ".join(shown) + f"; and {DRAWS} machines the prompt does not show (3–64 "
                 f"ranks) — within {TARGET - 1:.0%} of the fastest chunking each time, the "
                 "time modelled (α–β, not a clock) from the messages the real workers sent")


# ------------------------------------------------------------------ the tree gather

def rounds(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


def _tree_gather_seconds(n: int, S: float, a: float, b: float) -> float:
    """⌈log2 n⌉ rounds; round k's longest message is rank 2^k's min(2^k, n − 2^k) values,
    and those add up to the n − 1 values the root receives."""
    return rounds(n) * a + (n - 1) * S * b


def _all_messages(n: int, S: float, a: float, b: float) -> float:
    """Every message of a round one after another (as if the round's messages queued)."""
    return sum(a + min(2 ** k, n - r) * S * b      # round k: rank r sends its values
               for k in range(rounds(n)) for r in range(2 ** k, n, 2 ** (k + 1)))


TREE_MISTAKES: dict[str, Callable[..., float | None]] = {
    "every message carries S bytes, but in round k a rank forwards everything it has "
    "gathered so far — its own value and its subtree's, up to 2^k values — so the "
    "messages grow from round to round": lambda n, S, a, b: rounds(n) * (a + S * b),
    "that is the flat gather (the lesson's Comm.gather: n − 1 messages, one after "
    "another, at the root); the tree needs only ⌈log2 n⌉ rounds":
        lambda n, S, a, b: (n - 1) * (a + S * b),
    "that holds when n is a power of two: in the last round rank 2^(L−1) holds only "
    "n − 2^(L−1) values, not 2^(L−1) — the root still receives n − 1 values in all":
        lambda n, S, a, b: rounds(n) * a + (2 ** rounds(n) - 1) * S * b,
    "the root's own value does not travel: n − 1 values arrive, not n":
        lambda n, S, a, b: rounds(n) * a + n * S * b,
    "the messages of one round travel at the same time, on different links: a round "
    "lasts as long as its longest message, not the sum of them": _all_messages,
    "a round count is a whole number: with n = 5 there are ⌈log2 5⌉ = 3 rounds, not "
    "⌊log2 5⌋ = 2": lambda n, S, a, b: math.floor(math.log2(n)) * a + (n - 1) * S * b
    if n > 1 else None,
    "a round count is a whole number (⌈log2 n⌉), not log2 n":
        lambda n, S, a, b: math.log2(n) * a + (n - 1) * S * b if n > 1 else None,
    "α and β are swapped: α is paid per message, β per byte":
        lambda n, S, a, b: rounds(n) * b + (n - 1) * S * a,
    "the latency term is missing: every round pays α": lambda n, S, a, b: (n - 1) * S * b,
    "the bandwidth term is missing: the values still have to cross the links, b bytes "
    "costing b·β": lambda n, S, a, b: rounds(n) * a,
}


# ------------------------------------------------------------------ the pipelined chain

PIPE_FIXED = table("n nbytes alpha beta", (4, 4_000_000, 5e-5, 1e-9),
                   (3, 262_144, 2e-3, 1e-9), (4, 2_000_000, 5e-6, 4e-10))
DRAWS = 5                # machines the prompt does not show, per call
REAL_DRAWS = 1           # of which run on real workers (the first small enough); the rest: model
TARGET = 1.10            # the pipeline must finish within 10 % of the fastest chunking
MAX_PIECES = 4096        # more pieces per link are judged by the model, not run


def pipeline_worker(comm: Any, numel: int, pieces: int) -> bool:
    """Worker: the package's chain broadcast of ``numel`` numbers in ``pieces`` pieces."""
    from ddl_lab.message_passing.pipeline import chain_bcast
    data = np.arange(numel, dtype=np.float64) if comm.rank == 0 else None
    out = chain_bcast(comm, data, pieces)
    return bool(out.shape == (numel,) and np.array_equal(out[[0, -1]], [0, numel - 1]))


def model_time(n: int, numel: int, pieces: int, a: float, b: float, header: int) -> float:
    """The α–β time of ``pieces`` pieces (the largest sets the pace) down n − 1 links."""
    return (n - 2 + pieces) * message_time(8 * math.ceil(numel / pieces) + header, a, b)


def fastest(n: int, numel: int, a: float, b: float, header: int) -> tuple[int, float]:
    """The number of pieces (1 … MAX_PIECES) with the least modelled time, and that time."""
    return min(((k, model_time(n, numel, k, a, b, header))
                for k in range(1, min(numel, MAX_PIECES) + 1)), key=lambda kt: kt[1])


def pieces_of(got: Any, name: str, call: str, numel: int) -> int:
    """The learner's answer as a whole number of pieces, or a failure saying what it was."""
    value = answers.scalar(got)
    if value is None:
        fail(f"{call} returned {describe_value(got)}; return the number of pieces, a whole "
             "number >= 1.")
    if not math.isfinite(value) or value != int(value) or value < 1:
        fail(f"{call} returned {value:g}; the message is cut into a whole number of pieces, "
             f"at least 1 — round your value (e.g. max(1, round(x))).")
    if value > numel:
        fail(f"{call} returned {int(value):,} pieces, but the message has only {numel:,} "
             "numbers to cut.")
    return int(value)


def judge_pipeline(case: Case, pieces: int, measured: float | None, sent: int,
                   header: int) -> tuple[bool, str]:
    """(True, what the run achieved) if its time (``measured`` from its messages; None: by
    the model) is within TARGET of the fastest chunking, else (False, why it is slow)."""
    n, S, a, b = (case.params[k] for k in ("n", "nbytes", "alpha", "beta"))
    numel = S // 8
    best_k, best_t = fastest(n, numel, a, b, header)
    t = measured if measured is not None else model_time(n, numel, pieces, a, b, header)
    if t <= TARGET * best_t:
        return True, (f"{S / 1e6:.3g} MB on {n} ranks in {pieces} piece(s): {sent} messages, "
                      f"α–β time {1e3 * t:.3g} ms with α = {a:.3g} s, β = {b:.3g} s/B "
                      f"(fastest {1e3 * best_t:.3g} ms)")
    did = (f"the broadcast sent {sent} messages of about {S / pieces:,.0f} bytes down the "
           f"{n - 1} links" if measured is not None else
           f"{pieces:,} pieces would send {pieces * (n - 1):,} messages (not run: the α–β "
           "model alone rules it out)")
    if pieces == 1:
        why = ("in one piece each rank must receive the whole message before it can forward "
               "any of it, so the links work one after another: (n − 1)·(α + S·β). Cut it "
               "so that the ranks down the chain work at the same time.")
    elif pieces < best_k:
        why = ("too few pieces: the first piece has to cross all n − 1 links before the last "
               "rank gets anything, and a large piece keeps the later links idle longer.")
    else:
        why = ("too many pieces: each piece pays α on every link, and with this α "
               f"({a:.3g} s) against S·β = {S * b:.3g} s the latency terms dominate.")
    return False, (f"with {pieces} piece(s) {did}; its α–β time is {1e3 * t:.4g} ms, while "
                   f"{best_k} piece(s) take {1e3 * best_t:.4g} ms: yours is "
                   f"{t / best_t - 1:.0%} slower (the target: within {TARGET - 1:.0%}) — {why}")


# ------------------------------------------------ communicators the checks watch

class Logged:
    """The learner's communicator, every send and receive logged in call order as
    ('send', destination, ranks carried, numbers carried) or ('recv', source asked for, ranks
    carried, numbers carried): who actually sent a message is in the sender's log."""

    def __init__(self, comm: Any):
        self._comm, self.log = comm, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        self.log.append(("send", int(dest), carried(obj), numbers(obj)))
        self._comm.send(obj, dest, tag)

    def recv(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
             timeout: float | None = None) -> Any:
        obj = self._comm.recv(source, tag, timeout)
        self.log.append(("recv", int(source), carried(obj), numbers(obj)))
        return obj


class LatestFirst(Logged):
    """The gather's root: ``recv(ANY_SOURCE)`` (any tag) returns the message of the highest
    rank not yet received from — an order MPI allows, so an answer that relies on arrival
    order fails every time, not when the scheduler happens to reorder the messages."""

    def __init__(self, comm: Any):
        super().__init__(comm)
        self._left = set(range(comm.size)) - {comm.rank}

    def recv(self, source: int = ANY_SOURCE, tag: int = ANY_TAG,
             timeout: float | None = None) -> Any:
        if source == ANY_SOURCE and tag == ANY_TAG and self._left:
            source = max(self._left)
        self._left.discard(source)
        return self._comm.recv(source, tag, timeout)


def gather_value(rank: int, case_index: int) -> dict:
    rng = np.random.default_rng([case_index, rank])
    return {"from rank": rank, "data": rng.integers(0, 100, size=int(rng.integers(0, 6)))}


def lowbit(r: int) -> int:
    return r & -r


def subtree(r: int, n: int) -> list[int]:
    """The ranks whose values rank r forwards in the binomial tree of n ranks."""
    return list(range(r, min(r + lowbit(r), n))) if r else list(range(n))


def carried(obj: Any, depth: int = 0) -> list[int]:
    """The ranks whose values (dicts with a 'from rank' key) are inside a message."""
    if depth > 6:
        return []
    if isinstance(obj, dict):
        if "from rank" in obj:
            return [obj["from rank"]]
        obj = list(obj.values())
    if isinstance(obj, (list, tuple, set)):
        return sorted(r for item in obj for r in carried(item, depth + 1))
    return []


def numbers(obj: Any, depth: int = 0) -> int:
    """How many numbers a message carries (arrays, tensors, lists of them, scalars)."""
    if depth > 6 or obj is None or isinstance(obj, (str, bytes)):
        return 0
    if isinstance(obj, dict):
        obj = list(obj.values())
    if isinstance(obj, (list, tuple, set)):
        return sum(numbers(item, depth + 1) for item in obj)
    a = as_array(obj)
    return 0 if a is None else int(a.size)


def logged(comm: Any, fn: Callable, args: list[tuple], latest_first: int | None = None
           ) -> tuple[Any, list]:
    """Worker: ``fn(comm, *args[rank])`` on a logged communicator (rank ``latest_first``'s
    answers its ANY_SOURCE receives latest rank first); (result, its log)."""
    comm = (LatestFirst if comm.rank == latest_first else Logged)(comm)
    return fn(comm, *args[comm.rank]), comm.log


def shape_fault(sends: list[list[tuple[int, list[int]]]]) -> str | None:
    """What the recorded sends show, if they are not the binomial tree's (None if they are)."""
    n = len(sends)
    tree = ("In the binomial tree rank r ≠ 0 sends exactly once, to r − 2^k where 2^k is the "
            "lowest set bit of r (1 → 0, 2 → 0, 3 → 2, 4 → 0, 5 → 4, …), and that one message "
            "carries everything it has collected: the values of ranks r … r + 2^k − 1.")
    if sends[0]:
        return f"rank 0, the root, sent {len(sends[0])} message(s); it only receives. {tree}"
    dests = {r: [d for d, _ in sends[r]] for r in range(1, n)}
    parent = {r: r - lowbit(r) for r in range(1, n)}
    if all(dests[r] == [parent[r]] and sends[r][0][1] == subtree(r, n) for r in range(1, n)):
        return None
    if all(d == [0] for d in dests.values()):
        return (f"every rank sent its value straight to rank 0 — a flat gather: the root takes "
                f"in n − 1 = {n - 1} messages one after another, (n − 1)·α, where the tree "
                f"needs ⌈log2 n⌉ rounds. {tree}")
    if all(d == [r - 1] for r, d in dests.items()):
        return (f"every rank sent to rank r − 1 — a chain: n − 1 = {n - 1} rounds, one after "
                f"another, where the tree needs ⌈log2 n⌉. {tree}")
    for r in range(1, n):
        if len(dests[r]) > 1 and set(dests[r]) == {parent[r]}:
            return (f"rank {r} sent {len(dests[r])} messages to rank {parent[r]}, carrying ranks "
                    f"{[c for _, c in sends[r]]}: send what you have collected in ONE message "
                    f"(each message pays α). {tree}")
    if wrong := [r for r in range(1, n) if dests[r] != [parent[r]]]:
        r = wrong[0]
        other = (" — a tree, but not the binomial one" if all(len(d) == 1 for d in dests.values())
                 else "")
        return (f"rank {r} sent to {dests[r] or 'nobody'}; its parent in the binomial tree is "
                f"rank {parent[r]}{other}. {tree}")
    r = next(r for r in range(1, n) if sends[r][0][1] != subtree(r, n))
    return (f"rank {r}'s message to rank {parent[r]} carried the values of ranks "
            f"{sends[r][0][1]}, not its subtree {subtree(r, n)}: it must first receive from "
            f"its children (r + 1, r + 2, r + 4, … below r + 2^k and n) and then forward all "
            f"of it. {tree}")


def chain_fault(logs: list[list[tuple]], pieces: int, numel: int) -> str | None:
    """What the logged calls show, if they are not a pipelined chain (None if they are):
    judged by who actually sent each message and how many numbers it carried (the senders'
    logs), not by the source a receive asked for — ANY_SOURCE is fine where only r − 1 sends."""
    chain = ("Down a chain rank r receives only from r − 1 and sends only to r + 1 (the last "
             "rank sends nothing), one message per piece, and forwards each piece before it "
             "receives the next, so all the links work at the same time.")
    n = len(logs)
    sent = [[(peer, size) for op, peer, _, size in log if op == "send"] for log in logs]
    for r in range(n):
        stray = sorted({peer for peer, _ in sent[r] if peer != r + 1}
                       | {s for s in range(n) if s != r - 1 and any(p == r for p, _ in sent[s])})
        if stray:
            dests = sorted({peer for peer, _ in sent[r]})
            if r == 0 and len(dests) > 1:
                return (f"rank 0 sent pieces straight to ranks {dests} — a flat broadcast, "
                        f"not a chain: the root's link carries every copy, (n − 1)·S bytes. "
                        f"{chain}")
            return f"rank {r} exchanged messages with rank(s) {stray}. {chain}"
    for r, log in enumerate(logs[:-1]):
        if len(sent[r]) != pieces:
            return (f"rank {r} sent {len(sent[r])} message(s) to rank {r + 1} for {pieces} "
                    f"pieces: forward each piece as its own message. {chain}")
        sizes = [size for _, size in sent[r]]
        if sum(sizes) > numel + 2 * pieces:          # a piece's index or length may ride along
            grows = sizes[-1] == numel and all(a < b for a, b in zip(sizes, sizes[1:]))
            return (f"rank {r}'s {pieces} messages to rank {r + 1} carried {sizes} numbers, "
                    f"{sum(sizes):,} in all for an array of {numel:,} — the link carried the "
                    f"array {sum(sizes) / numel:.1f} times over"
                    + (": each message carries everything received so far, not only the piece "
                       "that just came. Forward each piece as it came." if grows else
                       ": each number crosses each link once.") + f" {chain}")
        ops = [op for op, *_ in log]
        if r and ops != ["recv", "send"] * pieces:
            return f"{_lag(r, ops, pieces)} {chain}"
    return None


def _lag(r: int, ops: list[str], pieces: int) -> str:
    """What a middle rank's order of calls shows when it does not forward each piece at once."""
    shown = f"its calls: {' '.join(ops[:8])}{' …' if len(ops) > 8 else ''}"
    ahead, late = 0, 0            # pieces received and not yet forwarded, the most of them
    for op in ops:
        ahead += 1 if op == "recv" else -1
        late = max(late, ahead)
    first = ops.index("send") if "send" in ops else len(ops)
    if first >= pieces > 1:
        return (f"rank {r} received {first} pieces before it forwarded the first ({shown}) — "
                f"store and forward: rank {r + 1} waits for the whole message, and the links "
                "work one after another.")
    if ops[0] == "send" or late <= 1:
        return (f"rank {r}'s calls are not one receive and one forward per piece ({shown}): "
                "a middle rank receives a piece from rank r − 1, forwards it, then receives "
                "the next.")
    return (f"rank {r} forwards each piece {late - 1} step(s) late: it receives piece j + "
            f"{late - 1} before it forwards piece j ({shown}) — the links still overlap, but "
            f"rank {r + 1} waits {late - 1} piece(s) longer than it needs to at every step. "
            "Forward a piece as soon as it arrives.")
