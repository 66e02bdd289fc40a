"""Checks for lesson 06 (ring allreduce): the ring's α–β cost; the learner's ring and §7's
halving/doubling on real workers, wiretapped; the tree/ring crossover; buckets; the algorithm."""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator

import numpy as np

from ddl_lab.ring_allreduce.cost import cost_model
from ddl_lab.runtime.costs import ring_time, tree_time
from ddl_lab.runtime.worlds import MAX_WORLD, RankFailure

from . import _answers as answers
from ._core import call_local, fail, task
from ._diagnose import Case, describe_value, differs, explain, factor_of, only_right_for, table
from .message_passing import rounds
from ._trial import Trial, formula_cases

__all__ = ["ring_cost", "ring_allreduce", "tree_ring_crossover", "bucket_bytes",
           "halving_doubling", "allreduce_choice"]

TARGET = 1.10                 # a bucket size, or a choice, within 10 % of the best passes
_PKG = "ddl_lab.ring_allreduce"


# ------------------------------------------------------------------ the cost model

_COST_MISTAKES: dict[str, Callable[[float, float, float, float], float]] = {
    "the bandwidth term uses the whole tensor S per step: each of the 2(n−1) steps sends one "
    "chunk of S/n bytes, so the term is 2(n−1)/n · S·β":
        lambda n, S, a, b: ring_time(n, n * S, a, b),
    "only one phase is counted: the ring has n−1 steps of share-reduce AND n−1 steps of "
    "share-only, hence the factor 2": lambda n, S, a, b: ring_time(n, S, a, b) / 2,
    "the factor 2 is on the latency term only: both phases also send chunks, so the "
    "bandwidth term is 2(n−1)/n · S·β": lambda n, S, a, b: ring_time(n, S / 2, a, b),
    "there are n−1 steps per phase, not n": lambda n, S, a, b: 2 * n * a + 2 * S * b,
    "the latency term is missing: each of the 2(n−1) steps pays α":
        lambda n, S, a, b: ring_time(n, S, 0.0, b),
    "the bandwidth term is missing: each step also sends S/n bytes at β seconds a byte":
        lambda n, S, a, b: ring_time(n, S, a, 0.0),
    "α and β are swapped: α is paid per message, β per byte":
        lambda n, S, a, b: ring_time(n, S, b, a),
    "the bytes were turned into bits (×8): nbytes and β are both per byte":
        lambda n, S, a, b: ring_time(n, 8 * S, a, b),
}


@task("ring_allreduce", refuses=(_PKG, "cost_model", "ring_bytes", "sent_bytes", "ring_time"))
def ring_cost(my_ring_cost: Callable, seed: int = 0) -> None:
    """Lesson 06, task 1: ``my_ring_cost(n, nbytes, alpha, beta)`` returns the seconds of a
    ring allreduce in the α–β model: 2(n−1)·α + 2(n−1)/n · S·β (0 for one rank)."""
    trial = Trial("ring_cost", my_ring_cost, seed, table(
        "n nbytes alpha beta", (4, 64_000_000, 5e-5, 2e-10), (1, 1_000_000, 1e-5, 1e-9),
        (3, 0, 2e-5, 1e-9), (5, 10 ** 9, 0.0, 1e-10)), draws=6, draw=lambda rng: {
            "n": int(rng.choice([2, 3, 5, 6, 7, 12, 13, 31, 64])),
            "nbytes": int(10 ** rng.uniform(0, 9.5)),
            "alpha": float(10 ** rng.uniform(-7, -3)), "beta": float(10 ** rng.uniform(-11, -8))})

    def other_n(value: float, args: list) -> str | None:
        n, S, a, b = args
        return next((f"that is the cost for n = {k} ranks: use the n you are given."
                     for k in range(1, 65) if k != n
                     and math.isclose(value, ring_time(k, S, a, b), rel_tol=1e-6)), None)
    formula_cases(trial, ("n", "nbytes", "alpha", "beta"), ring_time, _COST_MISTAKES,
                  "the predicted seconds as a number", "compare with 2(n−1)·α + 2(n−1)/n · "
                  "S·β.", guess=other_n, zero_division="with one rank nothing is sent, and "
                  "the formula gives 0 without any special case; divide by n only.")
    trial.passed(f"matches 2(n−1)·α + 2(n−1)/n·S·β on {len(trial)} cases (n = 1 to 64, S = 0 "
                 "to 3 GB, α = 0 included)")


# ------------------------------------------------- what a hand-written allreduce did

DTYPE_MARK = "[dtype]"       # starts the message of a buffer-dtype refusal on a worker


def inputs(length: int, rank: int, dtype: str, seed: int):
    """Rank ``rank``'s tensor: multiples of 1/4, so every order of summing is exact."""
    import torch
    g = torch.Generator().manual_seed(seed * 101 + rank)
    return torch.randint(-40, 40, (length,), generator=g).to(getattr(torch, dtype)) / 4


def run_case(fn: Callable, length: int, dtype: str, seed: int) -> dict:
    """Worker: call ``fn(tensor)`` with the process group wiretapped; report what it did."""
    import torch
    import torch.distributed as dist
    from ddl_lab.runtime.wiretap import Wiretap
    tensor = inputs(length, dist.get_rank(), dtype, seed)
    before, used = tensor.clone(), []

    def watch(op: Any, args: tuple) -> None:
        if op.method in ("send", "recv"):       # a buffer of another dtype is refused
            if (t := next((b for b in args[0] if b.dtype != tensor.dtype), None)) is not None:
                raise TypeError(
                    f"{DTYPE_MARK} called dist.{op.method} with a {str(t.dtype)[6:]} buffer "
                    f"while the tensor being summed is {str(tensor.dtype)[6:]}: a message must "
                    "land in a buffer of the same dtype and length as the chunk sent "
                    "(torch.empty_like(chunk)), or gloo reads the bytes wrongly.")
        elif op.op not in ("send", "recv", "barrier"):      # a built-in collective
            used.append(op.call or op.op)

    with Wiretap(on_op=watch, refuse_new_group=(
            "dist.new_group was called: the ring runs on the group it is given (the default "
            "group, dist.get_world_size() ranks) — a group of your own would talk past the "
            "check. Send to your neighbours with dist.send/recv or isend/irecv.")) as tap:
        returned = fn(tensor)
    other = (returned.detach().double().cpu().numpy().copy()
             if isinstance(returned, torch.Tensor) and returned is not tensor
             and returned.numel() == length else None)
    return {"result": tensor.double().cpu().numpy(), "returned": other,
            "sent": tap.payload["send"], "used": sorted(set(used)),
            "messages": [(op.op, op.src, op.dst) for op in tap.ops
                         if op.op in ("send", "recv") and not op.refused],
            "unchanged": bool(torch.equal(tensor, before))}


# ------------------------------------------------------------------ the ring

def _where(case: Case) -> str:
    p = case.params
    what = f"{p['n']} ranks and a {p['dtype']} tensor of {p['length']:,} elements"
    if p["length"] % p["n"]:
        what += f" (not a multiple of {p['n']})"
    return f"with {what} — {case}"


def _allreduces(trial: Trial, p2p_only: str) -> Iterator[tuple[Case, int, list[dict]]]:
    """Each case of a hand-written allreduce (ring or halving/doubling), run on its world with
    ``run_case``: (case, its data's seed, what each rank did), the sums already right and
    no built-in collective called (``p2p_only`` ends that message); the case is added to
    ``trial.right`` once the caller's own judge has passed it."""
    seeds = [int(case.rng.integers(1 << 30)) for case in trial]
    outcomes = trial.run(run_case, [(c.params["n"], (trial.fn, c.params["length"],
                                                    c.params["dtype"], s))
                                    for c, s in zip(trial, seeds)])
    for case, data_seed, outcome in zip(trial, seeds, outcomes):
        got, where = trial.results(outcome, case), _where(case)
        if used := sorted({u for g in got for u in g["used"]}):
            fail(f"{trial.name} called {', '.join('dist.' + u for u in used)} ({where}): "
                 + p2p_only)
        yield case, data_seed, got
        trial.right.append((case.params["n"], case.params["length"]))


def _sum_fault(trial: Trial, got: list[dict], case: Case, data_seed: int) -> str | None:
    """A rank that ends with a wrong sum, and the likely reason."""
    n, length, dtype = (case.params[k] for k in ("n", "length", "dtype"))
    expected = sum(inputs(length, r, dtype, data_seed).double() for r in range(n)).numpy()
    for rank, g in enumerate(got):
        if g["unchanged"] and g["returned"] is not None \
                and differs(expected, g["returned"], rtol=0.0) is None and length:
            return (f"{trial.name} returned the sum in a new tensor but left the tensor it was "
                    f"given unchanged ({_where(case)}): write the result into `tensor` itself "
                    "(in place, as dist.all_reduce does), e.g. with `+=`, `.add_()` or "
                    "`.copy_()`.")
        if diff := differs(expected, g["result"], rtol=0.0):
            return (f"{_where(case)}: rank {rank} ends with a wrong sum: {diff}."
                    + _wrong_sum_hint(expected, g["result"], rank, case, data_seed, trial.right))
    return None


@task("ring_allreduce", refuses=(_PKG, "ring_allreduce", "allreduce", "tree_allreduce",
                                 "reduce_broadcast_allreduce", "builtin_allreduce",
                                 "shm_allreduce"))
def ring_allreduce(my_ring_allreduce: Callable, seed: int = 0, timeout: float = 60.0) -> None:
    """Lesson 06, task 2: ``my_ring_allreduce(tensor)`` sums in place over the default group,
    with point-to-point messages only, sending 2(n−1)/n·S bytes per rank (bandwidth-optimal).
    """
    trial = Trial("ring_allreduce", my_ring_allreduce, seed, table(
        "n length dtype",     # ordered so that a failure's message can say which sizes worked
        (4, 12, "float32"),                     # divisible
        (3, 12, "float32"),                     # divisible, another n
        (3, 10, "float32"),                     # not a multiple
        (2, 7, "float64"),                      # two ranks, a prime
        (4, 5, "float32"),                      # tensor.chunk(4) gives 3 chunks
        (5, 3, "float64"),                      # fewer elements than ranks
        (4, 1, "float32"), (2, 0, "float32"),
        (5, 65_537, "float64")),                # large, prime: the bytes sent
        draws=3, draw=lambda rng: {
            "n": int(rng.integers(2, 6)),
            "length": int(rng.choice([2, 11, 13, 97, 101, 257, 1009, 4099])),
            "dtype": str(rng.choice(["float32", "float64"]))},
        timeout=timeout, word=lambda f, case: _failure_message(f, trial, case))
    ratios: dict[int, float] = {}
    for case, data_seed, got in _allreduces(trial, (
            "a hand-written allreduce may use only point-to-point messages (dist.send, "
            "dist.recv, dist.isend, dist.irecv). Build the ring from those.")):
        n, length, dtype = (case.params[k] for k in ("n", "length", "dtype"))
        if shape := _shape_fault(got, n):
            fail(f"{trial.name} is not a ring ({_where(case)}): {shape}")
        trial.judge(_sum_fault(trial, got, case, data_seed) or
                    _bandwidth_fault(trial.name, got, case))
        if length >= 1000:
            ratios[n] = max(g["sent"] for g in got) / (length * (4 if dtype == "float32" else 8))
    shown = ", ".join(f"{r:.3f}·S on {k} ranks (2(n−1)/n = {2 * (k - 1) / k:.3f})"
                      for k, r in sorted(ratios.items()))
    trial.passed(f"exact sums in {len(trial)} cases (2–5 ranks; lengths 0, 1, fewer than n, "
                 f"primes, multiples of n or not; float32 and float64); the busiest rank sent "
                 f"{shown}; point-to-point messages only, each rank sending only to (p+1) % n "
                 "and receiving only from (p−1) % n")


def _bandwidth_fault(name: str, got: list[dict], case: Case) -> str | None:
    n, length, dtype = (case.params[k] for k in ("n", "length", "dtype"))
    esize = 4 if dtype == "float32" else 8
    S = length * esize
    worst = max(range(n), key=lambda r: got[r]["sent"])
    if not S or got[worst]["sent"] <= 2 * (n - 1) * math.ceil(length / n) * esize:
        return None
    return (f"{name} gives the right sum but is not bandwidth-optimal ({_where(case)}, S = "
            f"{S:,} bytes): rank {worst} sent {got[worst]['sent']:,} bytes = "
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


def _failure_message(f: RankFailure, trial: Trial, case: Case | None) -> str:
    """A failure on the workers in words, with the sizes that were right so far."""
    name, right = trial.name, trial.right
    if DTYPE_MARK in f.line:
        return f"{name} {f.line.split(DTYPE_MARK, 1)[1].strip()} ({_where(case)}, rank {f.rank})"
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
    own = inputs(length, rank, dtype, data_seed).double().numpy()
    bad = ~np.isclose(got, expected, rtol=0, atol=1e-9)
    tail = length - length % n
    if named := explain(got, {
        " It still holds only its own data: nothing was added or received into the tensor "
        "(are you working on a copy, e.g. after .tolist(), .clone() or torch.cat?).": own,
        " It holds the sum of the OTHER ranks' data: its own part is missing (add what you "
        "receive to your chunk, do not overwrite it).": expected - own,
    }, rtol=0.0):
        return named
    if length % n and bad[tail:].all() and not bad[:tail].any():
        return (f" Only the last {length % n} element(s) are wrong: with a length that is not "
                f"a multiple of {n}, your chunks leave the remainder out. Some chunks must be "
                "one element longer (torch.tensor_split(tensor, n) gives such chunks).")
    if length % n and any(k % m == 0 for m, k in right):
        return (f" The length is not a multiple of {n}, and it works when it is: chunks must "
                "cover every element; some chunks are one element longer (torch.tensor_split"
                "(tensor, n) gives such chunks).")
    if (c := factor_of(expected, got, rtol=0.0)) is not None:
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

def _solve(n: int, a: float, b: float, tree: float | None = None, ring_lat: float | None = None,
           ring_bw: float | None = None) -> float | None:
    """S where tree·(α + S·β) = ring_lat·α + ring_bw·S·β (by default the right terms), if
    the tree's bandwidth term is the larger (else None: no crossover of that shape)."""
    tree = 2 * rounds(n) if tree is None else tree
    ring_lat = 2 * (n - 1) if ring_lat is None else ring_lat
    ring_bw = 2 * (n - 1) / n if ring_bw is None else ring_bw
    return None if tree <= ring_bw else (ring_lat - tree) * a / ((tree - ring_bw) * b)


def crossover(n: int, a: float, b: float) -> float:
    """Tree 2⌈log2 n⌉·(α + S·β) = ring 2(n−1)·α + 2(n−1)/n·S·β (0: the tree never wins)."""
    return max(_solve(n, a, b), 0.0)


CROSSOVER_MISTAKES: dict[str, Callable[..., float | None]] = {
    "the tree never wins only while its 2⌈log2 n⌉ rounds are no fewer than the ring's 2(n−1) "
    "steps (n ≤ 3); here it has fewer, so it is faster for small enough messages — return the "
    "S where the two times meet": lambda n, a, b: 0.0 if n > 3 else None,
    "that is the crossover of a tree that only reduces: the tree allreduce reduces to the "
    "root and broadcasts back down, 2⌈log2 n⌉ rounds of α + S·β":
        lambda n, a, b: _solve(n, a, b, tree=rounds(n)),
    "the tree needs ⌈log2 n⌉ rounds each way — a whole number — not log2 n":
        lambda n, a, b: _solve(n, a, b, tree=2 * math.log2(n)),
    "α and β are swapped: α is paid per message, β per byte":
        lambda n, a, b: crossover(n, b, a),
    "that is the time at the crossover, in seconds: return the message size S, in bytes":
        lambda n, a, b: tree_time(n, crossover(n, a, b), a, b),
    "that is the size in bits: return bytes (α + S·β with β in seconds per byte)":
        lambda n, a, b: 8 * crossover(n, a, b),
    "the ring's latency term is 2(n−1)·α — both phases pay α at each step":
        lambda n, a, b: _solve(n, a, b, ring_lat=n - 1),
    "the ring's bandwidth term is 2(n−1)/n·S·β — both phases send chunks":
        lambda n, a, b: _solve(n, a, b, ring_bw=(n - 1) / n),
}


@task("ring_allreduce")
def tree_ring_crossover(my_tree_ring_crossover: Callable, seed: int = 0) -> None:
    """Lesson 06, task 3: ``my_tree_ring_crossover(n, alpha, beta)`` is the message size S*
    (bytes) below which the tree allreduce beats the ring in the α–β model, 0 if it never
    does: 2⌈log2 n⌉·(α + S·β) = 2(n−1)·α + 2(n−1)/n·S·β."""
    trial = Trial("tree_ring_crossover", my_tree_ring_crossover, seed, table(
        "n alpha beta", (4, 5e-5, 1e-9), (8, 2e-5, 4e-10), (5, 1e-4, 1e-9), (3, 5e-5, 1e-9),
        (2, 1e-5, 1e-9), (64, 1e-6, 1e-10)),
        draws=4, draw=lambda rng: {"n": int(rng.choice([6, 7, 12, 16, 24, 33, 100, 256])),
                                   "alpha": float(10 ** rng.uniform(-6.5, -3.5)),
                                   "beta": float(10 ** rng.uniform(-10.5, -8.5))})
    formula_cases(trial, ("n", "alpha", "beta"), crossover, CROSSOVER_MISTAKES,
                  "the message size in bytes, as a number",
                  "set the tree's time equal to the ring's (lesson 06 §4) and solve for S; "
                  "where the tree never wins, return 0.", unit=" bytes")
    trial.passed(f"{len(trial)} cases (n = 2 to 256, powers of two and not): below S* the "
                 "tree's fewer rounds win, above it the ring's 2(n−1)/n·S bytes; for n ≤ 3 "
                 "the tree has no fewer rounds, and never wins")


# ------------------------------------------------------------------ gradient buckets

BUCKET_CASES = table(  # widths of a chain of Linear layers; the α–β machine; backward s per byte
    "n widths alpha beta compute", (4, [64, 256, 256, 128, 128, 64, 10], 2e-5, 2e-9, 2e-9),
    (3, [32, 512, 256, 256, 64, 10], 2e-4, 5e-10, 2e-9),
    (5, [64, 256, 256, 256, 256, 256, 10], 4e-5, 1e-9, 3e-9))

REAL_DRAWS = 1                # drawn cases run on real workers too (n <= 5); the rest: model


def bucket_draw(rng: np.random.Generator) -> dict[str, Any]:
    """A network and machine the prompt does not show: 3–8 layers of 8–1024 units, 2–64
    ranks, α 1 µs–1 ms, β 0.1–10 ns/byte, backward 0.3–10 ns/byte."""
    layers = int(rng.integers(3, 9))
    return {"n": int(rng.choice([2, 3, 4, 5, 8, 16, 64])),
            "widths": [int(2 ** rng.uniform(3, 10)) for _ in range(layers + 1)],
            "alpha": float(f"{10 ** rng.uniform(-6, -3):.2g}"),
            "beta": float(f"{10 ** rng.uniform(-10, -8):.2g}"),
            "compute": float(f"{10 ** rng.uniform(-9.5, -8):.2g}")}


def grad_bytes(widths: list[int]) -> list[int]:
    """float32 gradient sizes in the order the backward pass produces them (last layer
    first; a layer's bias, then its weight)."""
    return [x for a, b in reversed(list(zip(widths, widths[1:]))) for x in (4 * b, 4 * a * b)]


def buckets_of(grads: list[int], bucket_bytes: int) -> list[int]:
    """The bytes of each bucket GradientBuckets makes of gradients of ``grads`` bytes."""
    from ddl_lab.ring_allreduce.buckets import bucket_indices
    return [sum(grads[i] for i in b) for b in bucket_indices(grads, bucket_bytes)]


def step_time(sizes: list[int], n: int, a: float, b: float, compute: float) -> float:
    """Bucket j's allreduce (a ring) starts when backward has produced its gradients and the
    previous allreduce is done; the step ends with the last allreduce."""
    done = ready = 0.0
    for s in sizes:
        ready += compute * s
        done = max(done, ready) + ring_time(n, s, a, b)
    return done


def best_bucket(grads: list[int], n: int, a: float, b: float,
                compute: float) -> tuple[int, list[int], float]:
    """The bucket size (among all the partitions the rule can make) with the least step
    time: (bytes, bucket sizes, seconds)."""
    runs = {sum(grads[i:j]) for i in range(len(grads)) for j in range(i + 1, len(grads) + 1)}
    t, size = min((step_time(buckets_of(grads, s), n, a, b, compute), s) for s in sorted(runs))
    return size, buckets_of(grads, size), t


def bucket_bytes_of(got: Any, call: str) -> int:
    """The learner's bucket size as a whole number of bytes >= 1, or a failure."""
    value = answers.scalar(got)
    if value is None or isinstance(got, (bool, np.bool_)):
        fail(f"{call} returned {describe_value(got)}; return the bucket size in bytes, a "
             "whole number >= 1.")
    if value < 1 or value != int(value):
        fail(f"{call} returned {value:g}; a bucket size is a whole number of bytes, at least 1.")
    return int(value)


def bucket_run(widths: list[int], bucket_bytes: int) -> list[int]:
    """Worker: one backward pass of a chain of Linear layers with the lesson's
    GradientBuckets; the bytes of each allreduce its hooks launched, in order."""
    import torch

    from ddl_lab.ring_allreduce.buckets import GradientBuckets
    from ddl_lab.runtime.wiretap import Wiretap
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(a, b) for a, b in zip(widths, widths[1:])])
    with Wiretap() as tap:
        buckets = GradientBuckets(model, bucket_bytes)
        model(torch.randn(8, widths[0])).pow(2).mean().backward()
        buckets.wait()
        buckets.remove()
    return [op.nbytes for op in tap.ops if op.method == "allreduce"]


def judge_buckets(case: dict, bucket_bytes: int, launched: list[int]) -> tuple[bool, str]:
    """(True, what the run achieved) if the step time of the allreduces the hooks launched
    is within TARGET of the best bucket size's, else (False, what happened and why)."""
    n, a, b, c = (case[k] for k in ("n", "alpha", "beta", "compute"))
    grads = grad_bytes(case["widths"])
    t = step_time(launched, n, a, b, c)
    best, best_sizes, best_t = best_bucket(grads, n, a, b, c)
    ran = (f"buckets of {bucket_bytes:,} bytes: the hooks launched {len(launched)} "
           f"allreduce(s), the step ends at {1e3 * t:.3g} ms")
    if t <= TARGET * best_t:
        return True, f"{ran} (best {1e3 * best_t:.3g} ms)"
    start = 2 * (n - 1) * a
    if len(launched) == 1:
        why = ("one bucket: its allreduce can start only when backward has finished, so none "
               "of the communication overlaps the backward pass.")
    elif len(launched) > len(best_sizes):
        why = (f"too many small buckets: every allreduce pays 2(n−1)·α = {1e6 * start:.3g} µs, "
               "and the allreduces fall behind the backward pass.")
    else:
        why = ("too few, too large buckets: the last one starts only when backward ends, and "
               "its allreduce is not hidden behind anything.")
    count = "1 allreduce" if len(best_sizes) == 1 else f"{len(best_sizes)} allreduces"
    return False, (f"{ran} in the α–β model, while buckets of {best:,} bytes "
                   f"({count}) end at {1e3 * best_t:.3g} ms: yours is "
                   f"{t / best_t - 1:.0%} slower (the target: within {TARGET - 1:.0%}) — {why}")

@task("ring_allreduce")
def bucket_bytes(my_bucket_bytes: Callable, seed: int = 0, timeout: float = 60.0) -> None:
    """Lesson 06, task 4: ``my_bucket_bytes(grads, n, alpha, beta, compute)`` chooses the
    bucket size of DDP-style gradient buckets. The lesson's GradientBuckets runs one backward
    pass with it on real workers; the allreduces its hooks launch, timed in the α–β model
    against the backward pass, must end within 10 % of the best bucket size's — for the
    prompt's three networks and for drawn ones it does not show (one run for real, the
    others by the rule's buckets in the model)."""
    trial = Trial("bucket_bytes", my_bucket_bytes, seed, BUCKET_CASES, draws=4,
                  draw=bucket_draw, name="my_bucket_bytes", plan=True, timeout=timeout)
    chosen: list[int] = []
    for case in trial:
        n, a, b, c = (case.params[k] for k in ("n", "alpha", "beta", "compute"))
        grads = grad_bytes(case.params["widths"])
        call = f"{trial.name}(grads={grads[:3]}…, n={n}, alpha={a:g}, beta={b:g}, compute={c:g})"
        chosen.append(bucket_bytes_of(trial.call(case, list(grads), n, a, b, c, where=call), call))
    real = [c for c in trial if not trial.unseen(c) or c.params["n"] <= MAX_WORLD]
    real = real[:trial.shown + REAL_DRAWS]
    outcomes = trial.run(bucket_run, [(c.params["n"], (c.params["widths"], chosen[c.index]))
                                      for c in real])
    launched = {c.index: o for c, o in zip(real, outcomes)}
    shown = []
    for case, size in zip(trial, chosen):
        p, outcome = case.params, launched.get(case.index)
        sizes = (trial.results(outcome, case)[0] if outcome is not None else
                 buckets_of(grad_bytes(p["widths"]), size))
        good, text = judge_buckets(p, size, sizes)
        if not good:
            unseen = (" — a network and machine the prompt does not show: "
                      f"{answers.FUNCTION_OF_INPUTS}" if trial.unseen(case) else "")
            fail(f"a {len(p['widths']) - 1}-layer network on {p['n']} ranks (α = {p['alpha']:g} "
                 f"s, β = {p['beta']:g} s/byte, backward {p['compute']:g} s/byte): "
                 f"{text.rstrip('.')}{unseen}."
                 + answers.same_for_all(chosen[:case.index + 1], "bucket size",
                                        "networks and machines"))
        shown.append(text)
    trial.passed("; ".join(shown[:trial.shown]) + f"; and {len(trial) - trial.shown} networks "
                 f"and machines the prompt does not show ({len(real) - trial.shown} run for "
                 f"real) — within {TARGET - 1:.0%} of the best bucket size each time, counted "
                 "from the allreduces the real hooks launched")


# --------------------------------------------------- §7: recursive halving and doubling

CHOICES = ("tree", "ring", "halving_doubling", "pipelined_tree")
REAL_SLACK = 1.5              # the real run: the choice within 1.5× of the model's best, timed


def hd_bytes_allowed(n: int, length: int, esize: int) -> int:
    """Most bytes a rank may send: 2·Σ_k ⌈L/2^(k+1)⌉ elements (halves of uneven lengths)."""
    return 2 * esize * sum(-(-length // (1 << (k + 1))) for k in range(n.bit_length() - 1))


def hd_shape_fault(got: list[dict], n: int, length: int, esize: int) -> str | None:
    """What the messages show, if they are not recursive halving then doubling: rank p
    talks in round k only to p XOR 2^k, sends 2·log2 n messages, 2(n−1)/n·S bytes."""
    if n < 2:
        return None
    rounds, S = n.bit_length() - 1, length * esize
    links = [(op, s, d) for g in got for op, s, d in g["messages"]]
    stray = sorted({(s, d) for _, s, d in links if s is not None and d is not None
                    and bin(s ^ d).count("1") != 1})
    xor = (f"In round k rank p exchanges with p XOR 2^k only (for n = {n}: "
           + ", ".join(f"k = {k}: 0↔{1 << k}" for k in range(rounds)) + ").")
    if stray:
        if all(d == (s + 1) % n for s, d in stray):
            return ("it sends to (p+1) % n — a ring. The ring needs 2(n−1) rounds; recursive "
                    f"halving/doubling needs 2·log2 n = {2 * rounds}. {xor}")
        s, d = stray[0]
        return f"rank {s} exchanged a message with rank {d}, which is not p XOR 2^k. {xor}"
    if length < n:
        return None
    worst = max(range(n), key=lambda r: got[r]["sent"])
    sends = [d for op, s, d in got[worst]["messages"] if op == "send" and s == worst]
    if got[worst]["sent"] >= rounds * S and got[worst]["sent"] > hd_bytes_allowed(n, length, esize):
        tree = len({sum(op == "send" and s == r for op, s, _ in g["messages"])
                    for r, g in enumerate(got)}) > 1       # ranks send unequally: a tree
        kind = ("a binomial tree (reduce up, broadcast down)" if tree else
                "recursive doubling of the whole tensor")
        return (f"every message carries the whole tensor: rank {worst} sent "
                f"{got[worst]['sent']:,} bytes = {got[worst]['sent'] / S:.2f}·S — {kind}. "
                "Halve the segment each round: send the half your partner keeps, add the "
                "half it sends you, so the rounds carry S/2, S/4, … and the total is "
                f"(n−1)/n·S per phase ({2 * (n - 1) / n:.2f}·S in all). {xor}")
    want = sorted(2 * [worst ^ (1 << k) for k in range(rounds)])
    if sorted(sends) != want:
        return (f"rank {worst} sent {len(sends)} messages, to ranks {sends}: recursive "
                f"halving then doubling sends {2 * rounds} — one to each of "
                f"{sorted(set(want))} while halving, and again while doubling. {xor}")
    if got[worst]["sent"] > hd_bytes_allowed(n, length, esize):
        return (f"rank {worst} sent {got[worst]['sent']:,} bytes = "
                f"{got[worst]['sent'] / S:.2f}·S, more than 2(n−1)/n·S = "
                f"{2 * (n - 1) / n:.2f}·S: send only the half your partner keeps.")
    return None

@task("ring_allreduce", refuses=(_PKG, "_halving_doubling", "allreduce", "_ring_allreduce",
                                 "tree_allreduce", "pipelined_tree_allreduce",
                                 "two_level_allreduce", "builtin_allreduce"))
def halving_doubling(my_halving_doubling: Callable, seed: int = 0,
                     timeout: float = 60.0) -> None:
    """Lesson 06, task 5: ``my_halving_doubling(tensor)`` sums in place over a power-of-two
    world with recursive halving (reduce-scatter), then recursive doubling (all-gather):
    in round k rank p talks only to p XOR 2^k; 2·log2 n messages and 2(n−1)/n·S bytes."""
    trial = Trial("halving_doubling", my_halving_doubling, seed, table(
        "n length dtype",     # world sizes 1, 2, 4 (powers of two up to the check's 5 ranks)
        (4, 16, "float32"),
        (4, 13, "float64"),                     # not a multiple of n, a prime
        (2, 7, "float32"),
        (4, 3, "float32"),                      # fewer elements than ranks
        (4, 0, "float64"), (1, 5, "float32"),
        (4, 40_009, "float32")),                # large, prime: the bytes sent
        draws=3, draw=lambda rng: {"n": int(rng.choice([2, 4])),
                                   "length": int(rng.choice([11, 97, 257, 1009, 4099])),
                                   "dtype": str(rng.choice(["float32", "float64"]))},
        timeout=timeout, word=lambda f, case: _failure_message(f, trial, case))
    for case, data_seed, got in _allreduces(trial, "build the allreduce from dist.send/recv "
                                            "or isend/irecv only."):
        n, length, dtype = (case.params[k] for k in ("n", "length", "dtype"))
        trial.judge(_sum_fault(trial, got, case, data_seed))
        if shape := hd_shape_fault(got, n, length, 4 if dtype == "float32" else 8):
            fail(f"{trial.name} is not recursive halving/doubling ({_where(case)}): {shape}")
    trial.passed(f"exact sums in {len(trial)} cases (1, 2 and 4 ranks; lengths 0, 1, fewer "
                 "than n, primes); in round k every rank talked only to p XOR 2^k, 2·log2 n "
                 "messages and at most 2(n−1)/n·S bytes per rank")


# ------------------------------------------------------ §7: choosing the algorithm

def modelled(n: int, S: float, a: float, b: float) -> dict[str, float]:
    """Seconds of each choice in the α–β models (the pipelined tree with its best pieces)."""
    return {c: cost_model(c, n, S, a, b) for c in CHOICES}


CHOICE_FIXED = table("n nbytes alpha beta", (8, 1 << 10, 2e-5, 1e-9),   # the prompt's cases
                     (8, 64 << 20, 2e-5, 1e-9), (6, 256 << 10, 5e-6, 1e-10))
REAL_CASE = {"n": 4, "nbytes": 4 << 20, "alpha": 5e-5, "beta": 1e-9}   # a clear choice


def clear(case: dict[str, Any]) -> bool:
    """A draw where the best choice beats every choice outside the 10 % band by ≥ 20 %
    (so the verdict does not hinge on rounding)."""
    times = sorted(modelled(*(case[k] for k in ("n", "nbytes", "alpha", "beta"))).values())
    best = times[0]
    return all(t <= best * TARGET or t >= best * TARGET * 1.2 for t in times)


def judge_choice(got: Any, case: dict[str, Any]) -> tuple[str | None, str, str]:
    """(fault or None, one line, the best): the chosen algorithm against the models' best."""
    n, S, a, b = (case[k] for k in ("n", "nbytes", "alpha", "beta"))
    times = modelled(n, S, a, b)
    best = min(times, key=times.get)
    if not isinstance(got, str) or got not in CHOICES:
        return f"returned {got!r}: return one of {list(CHOICES)}", "", best
    ratio = times[got] / times[best]
    line = f"n = {n}, S = {S:,} B: {got} {_ms(times[got])} vs best {best} {_ms(times[best])}"
    if ratio <= TARGET:
        return None, line, best
    why = {"ring": "its 2(n−1) rounds of α dominate at this size",
           "tree": "it sends the whole tensor in each of its 2⌈log2 n⌉ rounds",
           "pipelined_tree": "its inner ranks send every byte three times (to a parent and "
                             "two children)",
           "halving_doubling": "with n not a power of two its fold sends S twice more"
           if n & (n - 1) else "its log2 n rounds are not what this size needs"}[got]
    return (f"{got} takes {_ms(times[got])} in the model, {ratio:.2f}× the best, {best} "
            f"({_ms(times[best])}; α·rounds = {_ms(a * _rounds(best, n))}, S·β = "
            f"{_ms(S * b)}): {why}", line, best)


def _rounds(algorithm: str, n: int) -> int:
    return {"ring": 2 * (n - 1), "tree": 2 * rounds(n),
            "halving_doubling": 2 * (n.bit_length() - 1) + (2 if n & (n - 1) else 0),
            "pipelined_tree": 2 * (n.bit_length() - 1)}[algorithm]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"

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
    trial = Trial("allreduce_choice", my_allreduce_choice, seed, CHOICE_FIXED, draws=40,
                  draw=lambda rng: {
                      "n": int(rng.choice([3, 5, 6, 7, 12, 16, 24, 64, 100, 256, 1000])),
                      "nbytes": int(10 ** rng.uniform(1, 9.5)),
                      "alpha": float(10 ** rng.uniform(-6.5, -3.5)),
                      "beta": float(10 ** rng.uniform(-11, -8.5))},
                  name="my_allreduce_choice", plan=True, timeout=timeout)
    trial.cases[trial.shown:] = [c for c in trial.cases[trial.shown:] if clear(c.params)][:8]
    chosen: list[Any] = []
    for case in trial:
        args = tuple(case.params[k] for k in ("n", "nbytes", "alpha", "beta"))
        call = (f"{trial.name}(n={args[0]}, nbytes={args[1]:,}, alpha={args[2]:.3g}, "
                f"beta={args[3]:.3g})")
        chosen.append(got := trial.call(case, *args, where=call))
        fault, *_ = judge_choice(got, case.params)
        if fault:
            unseen = f" — a case the prompt does not show: {answers.FUNCTION_OF_INPUTS}" \
                if trial.unseen(case) else ""
            fail(f"{call} {fault}{unseen}."
                 + answers.same_for_all(chosen, "choice", "message sizes and machines"))
    real = REAL_CASE
    got = call_local(my_allreduce_choice, *(real[k] for k in ("n", "nbytes", "alpha", "beta")))
    fault, line, best = judge_choice(got, real)
    if fault:
        fail(f"{trial.name}(n=4, nbytes={real['nbytes']:,}, alpha={real['alpha']:g}, "
             f"beta={real['beta']:g}) {fault}.")
    ran = trial.world(_time_choice, real["n"], sorted({got, best}), real["nbytes"])
    measured = {a: min(max(ts) for ts in zip(*(r[a] for r in ran))) for a in ran[0]}
    if measured[got] > REAL_SLACK * measured[best]:
        fail(f"on 4 real ranks with {real['nbytes'] >> 20} MiB, {got} took "
             f"{measured[got] * 1e3:.3g} ms against {best}'s {measured[best] * 1e3:.3g} ms: "
             "choose by the model's terms, rounds·α against bytes·β.")
    trial.passed(f"within {TARGET - 1:.0%} of the model's best on {len(trial)} cases "
                 f"({len(trial) - trial.shown} the prompt does not show); run for real "
                 f"({line}): measured {measured[got] * 1e3:.3g} ms")
