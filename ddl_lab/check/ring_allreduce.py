"""Checks for lesson 06 (ring allreduce): the ring's cost, the learner's ring on real gloo
workers, the message size where the ring overtakes the tree, and the size of DDP-style
gradient buckets (run with the lesson's hooks on real workers, timed in the α–β model).

``ring_allreduce(my_ring_allreduce)`` runs the learner's function on seeded cases: world
sizes 2–5 and lengths that divide by n, that do not, primes, 1, 0 and fewer elements than
ranks, in float32 and float64. Inside each worker the runtime's ``Wiretap`` listens for the
duration of the call: it counts the bytes this rank sends (every ``dist.send``/``isend``/
``batch_isend_irecv`` goes through it, however it was imported), refuses a send/recv buffer
whose dtype is not the tensor's (gloo would kill the process on the size mismatch), and
records the built-in collectives called and every message's source and destination: a
ring sends only to (p+1) % n and receives only from (p−1) % n, and an all-to-all exchange
(the same 2(n−1)/n·S bytes, every rank talking to every rank) or a star through one rank
is named as such.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ddl_lab.ring_allreduce.cost import sent_bytes
from ddl_lab.runtime.worlds import MAX_WORLD, RankFailure, WorldFailed

from . import _answers as answers
from . import _ring_allreduce_beyond as beyond
from ._ring_allreduce_wire import DTYPE_MARK as _DTYPE_MARK
from ._ring_allreduce_wire import inputs as _inputs
from ._ring_allreduce_wire import run_case as _run_case
from . import _ring_allreduce_design as design
from ._core import call_local, fail, passed, run_cases, run_in_world, task
from ._diagnose import (Case, Cases, differs, explain, factor_of, only_right_for,
                        returned_none, tolerance)
from ._formula import formula_cases

__all__ = ["ring_cost", "ring_allreduce", "tree_ring_crossover", "bucket_bytes",
           "halving_doubling", "allreduce_choice"]


# ------------------------------------------------------------------ the cost model

def _ring_seconds(n: float, S: float, a: float, b: float) -> float:
    return 2 * (n - 1) * a + sent_bytes("all_reduce", n, S) * b


_COST_MISTAKES: dict[str, Callable[[float, float, float, float], float]] = {
    "the bandwidth term uses the whole tensor S per step: each of the 2(n−1) steps sends one "
    "chunk of S/n bytes, so the term is 2(n−1)/n · S·β":
        lambda n, S, a, b: 2 * (n - 1) * a + 2 * (n - 1) * S * b,
    "only one phase is counted: the ring has n−1 steps of share-reduce AND n−1 steps of "
    "share-only, hence the factor 2": lambda n, S, a, b: (n - 1) * a + (n - 1) / n * S * b,
    "the factor 2 is on the latency term only: both phases also send chunks, so the "
    "bandwidth term is 2(n−1)/n · S·β": lambda n, S, a, b: 2 * (n - 1) * a + (n - 1) / n * S * b,
    "there are n−1 steps per phase, not n": lambda n, S, a, b: 2 * n * a + 2 * S * b,
    "the latency term is missing: each of the 2(n−1) steps pays α":
        lambda n, S, a, b: 2 * (n - 1) / n * S * b,
    "the bandwidth term is missing: each step also sends S/n bytes at β seconds a byte":
        lambda n, S, a, b: 2 * (n - 1) * a,
    "α and β are swapped: α is paid per message, β per byte":
        lambda n, S, a, b: 2 * (n - 1) * b + 2 * (n - 1) / n * S * a,
    "the bytes were turned into bits (×8): nbytes and β are both per byte":
        lambda n, S, a, b: 2 * (n - 1) * a + 16 * (n - 1) / n * S * b,
}


def _cost_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"n": int(rng.choice([2, 3, 5, 6, 7, 12, 13, 31, 64])),
            "nbytes": int(10 ** rng.uniform(0, 9.5)),
            "alpha": float(10 ** rng.uniform(-7, -3)), "beta": float(10 ** rng.uniform(-11, -8))}


@task("ring_allreduce", refuses=("ddl_lab.ring_allreduce", "cost_model", "ring_bytes",
                                 "sent_bytes"))
def ring_cost(my_ring_cost: Callable, seed: int = 0) -> None:
    """Lesson 06, task 1: ``my_ring_cost(n, nbytes, alpha, beta)`` returns the seconds of a
    ring allreduce in the α–β model: 2(n−1)·α + 2(n−1)/n · S·β (0 for one rank)."""
    name = getattr(my_ring_cost, "__name__", "your function")
    cases = Cases("ring_cost", seed, [
        {"n": 4, "nbytes": 64_000_000, "alpha": 5e-5, "beta": 2e-10},
        {"n": 1, "nbytes": 1_000_000, "alpha": 1e-5, "beta": 1e-9},
        {"n": 3, "nbytes": 0, "alpha": 2e-5, "beta": 1e-9},
        {"n": 5, "nbytes": 10 ** 9, "alpha": 0.0, "beta": 1e-10}], draws=6, draw=_cost_draw)
    right: list[str] = []
    for case in cases:
        n, S, a, b = (case.params[k] for k in ("n", "nbytes", "alpha", "beta"))
        call = f"{name}(n={n}, nbytes={S}, alpha={a:.3g}, beta={b:.3g})"
        try:
            got = my_ring_cost(n, S, a, b)
        except ZeroDivisionError:
            fail(f"{call} divided by zero ({case}): with one rank nothing is sent, and the "
                 "formula gives 0 without any special case; divide by n only.")
        except Exception:
            got = call_local(my_ring_cost, n, S, a, b)
        value = answers.scalar(got)
        if value is None:
            fail(returned_none(got, name, "the predicted seconds as a number") or
                 f"{call} returned {got!r}; return the predicted seconds as a number.")
        want = _ring_seconds(n, S, a, b)
        rel = max(1e-7, tolerance(got))            # a float32 answer: float32's tolerance
        if math.isclose(value, want, rel_tol=rel, abs_tol=1e-18):
            right.append(f"n = {n}")
            continue
        why = next((msg for msg, f in _COST_MISTAKES.items()
                    if math.isclose(value, f(n, S, a, b), rel_tol=rel, abs_tol=1e-18)), None)
        if why is None:
            fixed = [k for k in range(1, 65) if k != n
                     and math.isclose(value, _ring_seconds(k, S, a, b), rel_tol=rel)]
            why = (f"that is the cost for n = {fixed[0]} ranks: use the n you are given."
                   + only_right_for(right, f"n = {n}") if fixed else
                   "compare with 2(n−1)·α + 2(n−1)/n · S·β.")
        fail(f"{call} returned {value:.6g} s, expected {want:.6g} s ({case}): "
             + (why if why[-1] in ".?" else why + "."))
    passed("ring_cost", f"matches 2(n−1)·α + 2(n−1)/n·S·β on {len(cases)} cases (n = 1 to "
           "64, S = 0 to 3 GB, α = 0 included)")


# ------------------------------------------------------------------ the ring

_FIXED = [  # ordered so that a failure's message can say which sizes worked
    {"n": 4, "length": 12, "dtype": "float32"},          # divisible
    {"n": 3, "length": 12, "dtype": "float32"},          # divisible, another n
    {"n": 3, "length": 10, "dtype": "float32"},          # not a multiple
    {"n": 2, "length": 7, "dtype": "float64"},           # two ranks, a prime
    {"n": 4, "length": 5, "dtype": "float32"},           # tensor.chunk(4) gives 3 chunks
    {"n": 5, "length": 3, "dtype": "float64"},           # fewer elements than ranks
    {"n": 4, "length": 1, "dtype": "float32"},
    {"n": 2, "length": 0, "dtype": "float32"},
    {"n": 5, "length": 65_537, "dtype": "float64"},      # large, prime: the bytes sent
]
_LENGTHS = [2, 11, 13, 97, 101, 257, 1009, 4099]


def _ring_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"n": int(rng.integers(2, 6)), "length": int(rng.choice(_LENGTHS)),
            "dtype": str(rng.choice(["float32", "float64"]))}


def _where(case: Case) -> str:
    p = case.params
    what = f"{p['n']} ranks and a {p['dtype']} tensor of {p['length']:,} elements"
    if p["length"] % p["n"]:
        what += f" (not a multiple of {p['n']})"
    return f"with {what} — {case}"


@task("ring_allreduce", refuses=("ddl_lab.ring_allreduce", "ring_allreduce", "allreduce",
                                 "tree_allreduce", "reduce_broadcast_allreduce",
                                 "builtin_allreduce", "shm_allreduce"))
def ring_allreduce(my_ring_allreduce: Callable, seed: int = 0, timeout: float = 60.0) -> None:
    """Lesson 06, task 2: ``my_ring_allreduce(tensor)`` sums in place over the default group,
    with point-to-point messages only, sending 2(n−1)/n·S bytes per rank (bandwidth-optimal).
    """
    name = getattr(my_ring_allreduce, "__name__", "your function")
    cases = list(Cases("ring_allreduce", seed, _FIXED, draws=3, draw=_ring_draw))
    seeds = [int(case.rng.integers(1 << 30)) for case in cases]
    try:
        outcomes = run_cases(_run_case, [
            (c.params["n"], (my_ring_allreduce, c.params["length"], c.params["dtype"], s))
            for c, s in zip(cases, seeds)], fn=my_ring_allreduce, timeout=timeout)
    except WorldFailed as e:
        fail(_failure_message(e.failure, name, None, []))
    right: list[tuple[int, int]] = []
    ratios: dict[int, float] = {}
    for case, data_seed, outcome in zip(cases, seeds, outcomes):
        n, length, dtype = (case.params[k] for k in ("n", "length", "dtype"))
        if outcome.failure:
            fail(_failure_message(outcome.failure, name, case, right))
        got = outcome.results
        _judge(got, name, case, data_seed, right)
        right.append((n, length))
        if length >= 1000:
            ratios[n] = max(g["sent"] for g in got) / (length * (4 if dtype == "float32" else 8))
    shown = ", ".join(f"{r:.3f}·S on {k} ranks (2(n−1)/n = {2 * (k - 1) / k:.3f})"
                      for k, r in sorted(ratios.items()))
    passed("ring_allreduce", f"exact sums in {len(cases)} cases (2–5 ranks; lengths 0, 1, "
           f"fewer than n, primes, multiples of n or not; float32 and float64); the busiest "
           f"rank sent {shown}; point-to-point messages only, each rank sending only to "
           "(p+1) % n and receiving only from (p−1) % n")


def _judge(got: list[dict], name: str, case: Case, data_seed: int,
           right: list[tuple[int, int]]) -> None:
    """Fail with a named fault if the ranks' results, calls or bytes are wrong."""
    n, length, dtype = (case.params[k] for k in ("n", "length", "dtype"))
    where = _where(case)
    used = sorted({u for g in got for u in g["used"]})
    if used:
        fail(f"{name} called {', '.join('dist.' + u for u in used)} ({where}): a hand-written "
             "allreduce may use only point-to-point messages (dist.send, dist.recv, "
             "dist.isend, dist.irecv). Build the ring from those.")
    shape = _shape_fault(got, n)
    if shape:
        fail(f"{name} is not a ring ({where}): {shape}")
    expected = sum(_inputs(length, r, dtype, data_seed).double() for r in range(n)).numpy()
    for rank, g in enumerate(got):
        if g["unchanged"] and g["returned"] is not None \
                and differs(expected, g["returned"], rtol=0.0) is None and length:
            fail(f"{name} returned the sum in a new tensor but left the tensor it was given "
                 f"unchanged ({where}): write the result into `tensor` itself (in place, as "
                 "dist.all_reduce does), e.g. with `+=`, `.add_()` or `.copy_()`.")
        diff = differs(expected, g["result"], rtol=0.0)
        if diff:
            fail(f"{where}: rank {rank} ends with a wrong sum: {diff}."
                 + _wrong_sum_hint(expected, g["result"], rank, case, data_seed, right))
    esize = 4 if dtype == "float32" else 8
    S = length * esize
    allowed = 2 * (n - 1) * math.ceil(length / n) * esize
    worst = max(range(n), key=lambda r: got[r]["sent"])
    if S and got[worst]["sent"] > allowed:
        fail(f"{name} gives the right sum but is not bandwidth-optimal ({where}, S = {S:,} "
             f"bytes): rank {worst} sent {got[worst]['sent']:,} bytes = "
             f"{got[worst]['sent'] / S:.2f}·S, while a ring sends 2(n−1)/n·S = "
             f"{2 * (n - 1) / n:.2f}·S ≈ {2 * (n - 1) * S // n:,} bytes per rank. Passing the "
             "whole tensor from rank to rank costs (n−1)·S or more: cut it into n chunks and "
             "send one chunk (S/n bytes) per step, n−1 steps of share-reduce then n−1 steps "
             "of share-only.")


def _shape_fault(got: list[dict], n: int) -> str | None:
    """What the messages' sources and destinations show, if they are not a ring's: each rank
    p sends only to (p+1) % n and receives only from (p−1) % n (lesson 06 §1)."""
    if n < 3:                             # with two ranks every pattern is a ring
        return None
    links = [(op, s, d) for g in got for op, s, d in g["messages"]]
    stray = sorted({(s, d) for op, s, d in links if s is not None and d is not None
                    and not ((op == "send" and d == (s + 1) % n) or
                             (op == "recv" and s == (d - 1) % n))})
    anywhere = sorted({d for op, s, d in links if op == "recv" and s is None})
    if not stray and not anywhere:
        return None
    pairs = {(s, d) for op, s, d in links if s is not None and d is not None}
    hubs = [h for h in range(n) if all(h in pair for pair in pairs)]
    to = {r: {d for op, s, d in links if op == "send" and s == r} - {r} for r in range(n)}
    ring = ("A ring's rank p talks only to its two neighbours — sends to (p+1) % n, "
            "receives from (p−1) % n — so it needs n links, each carrying one chunk per step.")
    if hubs and len({x for pair in pairs for x in pair}) == n:
        return (f"every message goes to or from rank {hubs[0]} — a star. Rank {hubs[0]} then "
                f"sends and receives (n−1)·S bytes, n/2 times what a ring rank moves, and "
                f"its link carries every byte while the others idle. {ring}")
    if all(len(to[r]) == n - 1 for r in range(n)):
        return ("every rank sent messages straight to every other rank — an all-to-all "
                "exchange (each chunk to the rank that owns it, then the sums straight back). "
                "It moves the same 2(n−1)/n·S bytes, but it needs a link between every pair "
                f"of ranks (n(n−1)/2 = {n * (n - 1) // 2}) and each rank's sends of a phase "
                f"contend for its one link. {ring}")
    if anywhere:
        return (f"rank {anywhere[0]} received from any source (src=None): which chunk "
                f"arrives would then depend on timing. Receive from (p−1) % n by name. {ring}")
    if all(d == (s - 1) % n for s, d in stray):
        return (f"it sends to (p−1) % n and receives from (p+1) % n — the ring runs the other "
                f"way round. The task (and the check's invariant) is the ring of lesson 06: "
                f"send to the right, (p+1) % n. {ring}")
    s, d = stray[0]
    return (f"rank {s} exchanged a message with rank {d} (among {len(stray)} such "
            f"(from, to) pairs: {stray[:6]}), which is not its neighbour. {ring}")


def _failure_message(f: RankFailure, name: str, case: Case | None,
                     right: list[tuple[int, int]]) -> str:
    if f.kind == "stub":
        return f.line
    if _DTYPE_MARK in f.line:
        return f"{name} {f.line.split(_DTYPE_MARK, 1)[1].strip()} ({_where(case)}, rank {f.rank})"
    if case is None:                      # a killed worker, or the whole check's time limit
        return f.message(name, 0) + (
            ". gloo kills a process whose dist.recv gets a message longer than its buffer: "
            "each receive buffer must have exactly the length and dtype of the chunk its "
            "neighbour sends." if f.kind == "died" else "")
    n, length = case.params["n"], case.params["length"]
    if f.kind == "deadlock":
        return (f"{f.message(name, n)} ({_where(case)}.) In a ring every rank sends to "
                "(rank+1) % n and receives from (rank−1) % n in the same step. gloo's blocking "
                "dist.send waits until the receiver calls recv, so if every rank sends first, "
                "all of them wait forever. Start the send with dist.isend (or the receive with "
                "dist.irecv), then wait on both.")
    hint = ""
    if f.line.startswith("IndexError"):
        import torch
        parts = len(torch.empty(length).chunk(n))
        if parts < n:
            hint = (f" Cutting {length} elements with tensor.chunk({n}) gives only {parts} "
                    f"chunks (chunk makes pieces of ⌈{length}/{n}⌉ and stops when the tensor "
                    f"runs out), so chunk index {parts} does not exist: "
                    f"torch.tensor_split(tensor, {n}) always gives {n} chunks, some one "
                    "element longer, some possibly empty.")
    sizes = {k for k, _ in right}
    if not hint and n not in sizes:
        hint = only_right_for([f"{k} ranks" for k in sorted(sizes)], f"{n} ranks")
    return f"{f.message(name, n)} ({_where(case)}).{hint}"


def _wrong_sum_hint(expected: np.ndarray, got: np.ndarray, rank: int, case: Case,
                    data_seed: int, right: list[tuple[int, int]]) -> str:
    n, length, dtype = (case.params[k] for k in ("n", "length", "dtype"))
    own = _inputs(length, rank, dtype, data_seed).double().numpy()
    bad = ~np.isclose(got, expected, rtol=0, atol=1e-9)
    tail = length - length % n
    named = explain(got, {
        " It still holds only its own data: nothing was added or received into the tensor "
        "(are you working on a copy, e.g. after .tolist(), .clone() or torch.cat?).": own,
        " It holds the sum of the OTHER ranks' data: its own part is missing (add what you "
        "receive to your chunk, do not overwrite it).": expected - own,
    }, rtol=0.0)
    if named:
        return named
    if length % n and bad[tail:].all() and not bad[:tail].any():
        return (f" Only the last {length % n} element(s) are wrong: with a length that is not "
                f"a multiple of {n}, your chunks leave the remainder out. Some chunks must be "
                "one element longer (torch.tensor_split(tensor, n) gives such chunks).")
    if length % n and any(k % m == 0 for m, k in right):
        return (f" The length is not a multiple of {n}, and it works when it is: chunks must "
                "cover every element; some chunks are one element longer (torch.tensor_split"
                "(tensor, n) gives such chunks).")
    c = factor_of(expected, got, rtol=0.0)
    if c is not None:
        return f" It is {c:g} × the sum: is something added more than once (or divided)?"
    sizes = {k for k, _ in right}
    if sizes and n not in sizes:
        return only_right_for([f"{k} ranks" for k in sorted(sizes)], f"{n} ranks")
    bounds = np.cumsum([0] + [len(c) for c in np.array_split(np.zeros(length), n)])
    good = [c for c in range(n) if bounds[c + 1] > bounds[c]
            and not bad[bounds[c]:bounds[c + 1]].any()]
    if len(good) == 1:
        return (f" Exactly one chunk (chunk {good[0]}) is right on rank {rank}: the "
                "share-reduce phase works, the share-only phase does not. In share-only the "
                "chunk a rank receives is already the full sum: copy it over its own chunk "
                "(do not add it) and pass it on.")
    return (" Check the ring's invariant: rank p starts by sending its own chunk p; after k "
            "share-reduce steps the chunk it has just added into holds the sum of ranks "
            "p − k … p, so after n − 1 steps rank p owns the complete chunk (p + 1) % n.")


# ------------------------------------------------------- where the ring overtakes the tree

@task("ring_allreduce")
def tree_ring_crossover(my_tree_ring_crossover: Callable, seed: int = 0) -> None:
    """Lesson 06, task 3: ``my_tree_ring_crossover(n, alpha, beta)`` is the message size S*
    (bytes) below which the tree allreduce beats the ring in the α–β model, 0 if it never
    does: 2⌈log2 n⌉·(α + S·β) = 2(n−1)·α + 2(n−1)/n·S·β."""
    cases = Cases("tree_ring_crossover", seed, design.CROSSOVER_FIXED, draws=4,
                  draw=design.crossover_draw)
    formula_cases(my_tree_ring_crossover, cases, ("n", "alpha", "beta"), design.crossover,
                  design.CROSSOVER_MISTAKES, "the message size in bytes, as a number",
                  "set the tree's time equal to the ring's (lesson 06 §4) and solve for S; "
                  "where the tree never wins, return 0.", unit=" bytes")
    passed("tree_ring_crossover", f"{len(cases)} cases (n = 2 to 256, powers of two and not): "
           "below S* the tree's fewer rounds win, above it the ring's 2(n−1)/n·S bytes; for "
           "n ≤ 3 the tree has no fewer rounds, and never wins")


# ------------------------------------------------------------ gradient buckets

@task("ring_allreduce")
def bucket_bytes(my_bucket_bytes: Callable, seed: int = 0, timeout: float = 60.0) -> None:
    """Lesson 06, task 4: ``my_bucket_bytes(grads, n, alpha, beta, compute)`` chooses the
    bucket size of DDP-style gradient buckets. The lesson's GradientBuckets runs one backward
    pass with it on real workers; the allreduces its hooks launch, timed in the α–β model
    against the backward pass, must end within 10 % of the best bucket size's — for the
    prompt's three networks and for drawn ones it does not show (one run for real, the
    others by the rule's buckets in the model)."""
    name = getattr(my_bucket_bytes, "__name__", "my_bucket_bytes")
    fixed = len(design.BUCKET_CASES)
    cases = [c.params for c in Cases("bucket_bytes", seed, design.BUCKET_CASES, draws=4,
                                     draw=design.bucket_draw)]
    chosen: list[int] = []
    for i, case in enumerate(cases):
        n, a, b, c = (case[k] for k in ("n", "alpha", "beta", "compute"))
        grads = design.grad_bytes(case["widths"])
        call = f"{name}(grads={grads[:3]}…, n={n}, alpha={a:g}, beta={b:g}, compute={c:g})"
        args = (list(grads), n, a, b, c)
        got = call_local(my_bucket_bytes, *args) if i < fixed else \
            answers.plan_call(my_bucket_bytes, args, name, call)
        chosen.append(design.bucket_bytes_of(got, call))
    real = [i for i, c in enumerate(cases) if i < fixed or c["n"] <= MAX_WORLD]
    real = real[:fixed + design.REAL_DRAWS]
    try:
        outcomes = run_cases(design.bucket_run, [
            (cases[i]["n"], (cases[i]["widths"], chosen[i])) for i in real],
            fn=my_bucket_bytes, timeout=timeout)
    except WorldFailed as e:
        fail(e.failure.message(name, 0))
    launched = {i: o for i, o in zip(real, outcomes)}
    shown = []
    for i, (case, size) in enumerate(zip(cases, chosen)):
        outcome = launched.get(i)
        if outcome is not None and outcome.failure is not None:
            fail(outcome.failure.message(name, case["n"]))
        sizes = (outcome.results[0] if outcome is not None else
                 design.buckets_of(design.grad_bytes(case["widths"]), size))
        good, text = design.judge_buckets(case, size, sizes)
        if not good:
            p = case
            unseen = (" — a network and machine the prompt does not show: "
                      f"{answers.FUNCTION_OF_INPUTS}" if i >= fixed else "")
            fail(f"a {len(p['widths']) - 1}-layer network on {p['n']} ranks (α = {p['alpha']:g} "
                 f"s, β = {p['beta']:g} s/byte, backward {p['compute']:g} s/byte): "
                 f"{text.rstrip('.')}{unseen}."
                 + answers.same_for_all(chosen[:i + 1], "bucket size", "networks and machines"))
        shown.append(text)
    passed("bucket_bytes", "; ".join(shown[:fixed]) + f"; and {len(cases) - fixed} networks "
           f"and machines the prompt does not show ({len(real) - fixed} run for real) — within "
           f"{design.TARGET - 1:.0%} of the best bucket size each time, counted from the "
           "allreduces the real hooks launched")


# --------------------------------------------------- §7: recursive halving and doubling

@task("ring_allreduce", refuses=("ddl_lab.ring_allreduce", "_halving_doubling", "allreduce",
                                 "_ring_allreduce", "tree_allreduce", "pipelined_tree_allreduce",
                                 "two_level_allreduce", "builtin_allreduce"))
def halving_doubling(my_halving_doubling: Callable, seed: int = 0,
                     timeout: float = 60.0) -> None:
    """Lesson 06, task 5: ``my_halving_doubling(tensor)`` sums in place over a power-of-two
    world with recursive halving (reduce-scatter), then recursive doubling (all-gather):
    in round k rank p talks only to p XOR 2^k; 2·log2 n messages and 2(n−1)/n·S bytes."""
    name = getattr(my_halving_doubling, "__name__", "your function")
    cases = list(Cases("halving_doubling", seed, beyond.HD_FIXED, draws=3, draw=beyond.hd_draw))
    seeds = [int(case.rng.integers(1 << 30)) for case in cases]
    try:
        outcomes = run_cases(_run_case, [
            (c.params["n"], (my_halving_doubling, c.params["length"], c.params["dtype"], s))
            for c, s in zip(cases, seeds)], fn=my_halving_doubling, timeout=timeout)
    except WorldFailed as e:
        fail(_failure_message(e.failure, name, None, []))
    right: list[tuple[int, int]] = []
    for case, data_seed, outcome in zip(cases, seeds, outcomes):
        n, length, dtype = (case.params[k] for k in ("n", "length", "dtype"))
        if outcome.failure:
            fail(_failure_message(outcome.failure, name, case, right))
        got, where = outcome.results, _where(case)
        used = sorted({u for g in got for u in g["used"]})
        if used:
            fail(f"{name} called {', '.join('dist.' + u for u in used)} ({where}): build the "
                 "allreduce from dist.send/recv or isend/irecv only.")
        expected = sum(_inputs(length, r, dtype, data_seed).double() for r in range(n)).numpy()
        for rank, g in enumerate(got):
            diff = differs(expected, g["result"], rtol=0.0)
            if diff:
                fail(f"{where}: rank {rank} ends with a wrong sum: {diff}."
                     + _wrong_sum_hint(expected, g["result"], rank, case, data_seed, right))
        shape = beyond.hd_shape_fault(got, n, length, 4 if dtype == "float32" else 8)
        if shape:
            fail(f"{name} is not recursive halving/doubling ({where}): {shape}")
        right.append((n, length))
    passed("halving_doubling", f"exact sums in {len(cases)} cases (1, 2 and 4 ranks; lengths "
           "0, 1, fewer than n, primes); in round k every rank talked only to p XOR 2^k, "
           "2·log2 n messages and at most 2(n−1)/n·S bytes per rank")


# ------------------------------------------------------ §7: choosing the algorithm

def _time_choice(algorithms: list[str], nbytes: int) -> dict[str, list[float]]:
    """Worker: each algorithm timed (3 runs after a warm-up) on this world."""
    from ddl_lab.ring_allreduce.engine import time_allreduce
    return {a: time_allreduce(a, nbytes, repeats=3) for a in algorithms}


@task("ring_allreduce")
def allreduce_choice(my_allreduce_choice: Callable, seed: int = 0,
                     timeout: float = 60.0) -> None:
    """Lesson 06, task 6: ``my_allreduce_choice(n, nbytes, alpha, beta)`` names the allreduce
    to run — "tree", "ring", "halving_doubling" or "pipelined_tree" — and must come within
    10 % of the best in the α–β models, on the prompt's cases and on draws it does not
    show; at one size where the choice is clear it is also run on real workers."""
    name = getattr(my_allreduce_choice, "__name__", "my_allreduce_choice")
    fixed = len(beyond.CHOICE_FIXED)
    draws = Cases("allreduce_choice", seed, [], draws=40, draw=beyond.choice_draw)
    cases = beyond.CHOICE_FIXED + [c.params for c in draws if beyond.clear(c.params)][:8]
    chosen: list[Any] = []
    for i, case in enumerate(cases):
        args = tuple(case[k] for k in ("n", "nbytes", "alpha", "beta"))
        call = (f"{name}(n={args[0]}, nbytes={args[1]:,}, alpha={args[2]:.3g}, "
                f"beta={args[3]:.3g})")
        got = call_local(my_allreduce_choice, *args) if i < fixed else \
            answers.plan_call(my_allreduce_choice, args, name, call)
        chosen.append(got)
        fault, _ = beyond.judge_choice(got, case)
        if fault:
            unseen = f" — a case the prompt does not show: {answers.FUNCTION_OF_INPUTS}" \
                if i >= fixed else ""
            fail(f"{call} {fault}{unseen}."
                 + answers.same_for_all(chosen, "choice", "message sizes and machines"))
    real = beyond.REAL_CASE
    got = call_local(my_allreduce_choice, *(real[k] for k in ("n", "nbytes", "alpha", "beta")))
    fault, line = beyond.judge_choice(got, real)
    if fault:
        fail(f"{name}(n=4, nbytes={real['nbytes']:,}, alpha={real['alpha']:g}, "
             f"beta={real['beta']:g}) {fault}.")
    times = beyond.modelled(real["n"], real["nbytes"], real["alpha"], real["beta"])
    best = min(times, key=times.get)
    try:
        ran = run_in_world(_time_choice, real["n"], sorted({got, best}), real["nbytes"],
                           fn=my_allreduce_choice, timeout=timeout)
    except WorldFailed as e:
        fail(e.failure.message(name, real["n"]))
    measured = {a: min(max(ts) for ts in zip(*(r[a] for r in ran))) for a in ran[0]}
    if measured[got] > beyond.REAL_SLACK * measured[best]:
        fail(f"on 4 real ranks with {real['nbytes'] >> 20} MiB, {got} took "
             f"{measured[got] * 1e3:.3g} ms against {best}'s {measured[best] * 1e3:.3g} ms: "
             "choose by the model's terms, rounds·α against bytes·β.")
    passed("allreduce_choice", f"within {beyond.TARGET - 1:.0%} of the model's best on "
           f"{len(cases)} cases ({len(cases) - fixed} the prompt does not show); run for "
           f"real ({line}): measured {measured[got] * 1e3:.3g} ms")
