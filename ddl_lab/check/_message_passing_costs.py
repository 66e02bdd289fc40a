"""Lesson 04's reasoning and design tasks on what messages cost: the α–β time of a
binomial-tree gather (and the mistakes that give other times), and a broadcast pipelined
down a chain of real workers, its chunking chosen by the learner and its time counted
from the messages it sent."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import _answers as answers
from ._core import fail
from ._diagnose import Case, describe_value

TARGET = 1.10            # the pipeline must finish within 10 % of the fastest chunking
MAX_PIECES = 4096        # more pieces per link are judged by the model, not run


# ------------------------------------------------------------------ the tree gather

def rounds(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


def tree_gather(n: int, S: float, a: float, b: float) -> float:
    """⌈log2 n⌉ rounds; round k's longest message is rank 2^k's min(2^k, n − 2^k) values,
    and those add up to the n − 1 values the root receives."""
    return rounds(n) * a + (n - 1) * S * b


def _all_messages(n: int, S: float, a: float, b: float) -> float:
    """Every message of a round one after another (as if the round's messages queued)."""
    total = 0.0
    for k in range(rounds(n)):
        senders = range(2 ** k, n, 2 ** (k + 1))
        total += sum(a + min(2 ** k, n - r) * S * b for r in senders)
    return total


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


def tree_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"n": int(rng.choice([2, 3, 7, 12, 16, 31, 33, 100, 1000])),
            "nbytes": int(10 ** rng.uniform(1, 8)),
            "alpha": float(10 ** rng.uniform(-6, -3)), "beta": float(10 ** rng.uniform(-11, -8))}


TREE_FIXED = [{"n": 8, "nbytes": 1_000_000, "alpha": 1e-5, "beta": 1e-9},
              {"n": 5, "nbytes": 4096, "alpha": 5e-5, "beta": 1e-9},
              {"n": 1, "nbytes": 1_000_000, "alpha": 1e-5, "beta": 1e-9},
              {"n": 6, "nbytes": 0, "alpha": 2e-5, "beta": 1e-9},
              {"n": 13, "nbytes": 100_000, "alpha": 0.0, "beta": 2e-9}]


# ------------------------------------------------------------------ the pipelined chain

PIPE_FIXED = [{"n": 4, "nbytes": 4_000_000, "alpha": 5e-5, "beta": 1e-9},
              {"n": 3, "nbytes": 262_144, "alpha": 2e-3, "beta": 1e-9},
              {"n": 4, "nbytes": 2_000_000, "alpha": 5e-6, "beta": 4e-10}]


DRAWS = 5                # machines the prompt does not show, per call
REAL_DRAWS = 1           # of which run on real workers (the first small enough); the rest: model


def pipe_draw(rng: np.random.Generator) -> dict[str, Any]:
    """A machine the prompt does not show: 3–64 ranks, 25 KB–25 MB, α 3 µs–3 ms."""
    return {"n": int(rng.choice([3, 4, 5, 8, 16, 32, 64])),
            "nbytes": 8 * int(10 ** rng.uniform(3.5, 6.5)),
            "alpha": float(10 ** rng.uniform(-5.5, -2.5)),
            "beta": float(10 ** rng.uniform(-10, -8.5))}


def runs_for_real(params: dict[str, Any], pieces: int) -> bool:
    """Small enough to run on the warm cluster in a fraction of a second."""
    return params["n"] <= 4 and params["nbytes"] <= 5_000_000 and pieces <= MAX_PIECES


def pipeline_worker(comm: Any, numel: int, pieces: int) -> bool:
    """Worker: the package's chain broadcast of ``numel`` numbers in ``pieces`` pieces."""
    from ddl_lab.message_passing.pipeline import chain_bcast
    data = np.arange(numel, dtype=np.float64) if comm.rank == 0 else None
    out = chain_bcast(comm, data, pieces)
    return bool(out.shape == (numel,) and np.array_equal(out[[0, -1]], [0, numel - 1]))


def model_time(n: int, numel: int, pieces: int, a: float, b: float, header: int) -> float:
    """The α–β time of ``pieces`` pieces (the largest sets the pace) down n − 1 links."""
    largest = 8 * math.ceil(numel / pieces) + header
    return (n - 2 + pieces) * (a + largest * b)


def fastest(n: int, numel: int, a: float, b: float, header: int) -> tuple[int, float]:
    """The number of pieces (1 … MAX_PIECES) with the least modelled time, and that time."""
    k = np.arange(1, min(numel, MAX_PIECES) + 1)
    t = (n - 2 + k) * (a + (8 * np.ceil(numel / k) + header) * b)
    best = int(np.argmin(t))
    return int(k[best]), float(t[best])


def pieces_of(got: Any, name: str, call: str, numel: int) -> int:
    """The learner's answer as a whole number of pieces, or a failure saying what it was."""
    value = answers.scalar(got)
    if value is None:
        fail(f"{call} returned {describe_value(got)}; return the number of pieces, a whole "
             "number >= 1.")
    if value != int(value) or value < 1:
        fail(f"{call} returned {value:g}; the message is cut into a whole number of pieces, "
             f"at least 1 — round your value (e.g. max(1, round(x))).")
    if value > numel:
        fail(f"{call} returned {int(value):,} pieces, but the message has only {numel:,} "
             "numbers to cut.")
    return int(value)


def judge_pipeline(case: Case, pieces: int, measured: float | None, sent: int,
                   header: int) -> tuple[bool, str]:
    """(True, what the run achieved) if its time (``measured`` from its messages; None: not
    run, judged by the model) is within TARGET of the fastest chunking, else (False, what
    the run did and why it is slow)."""
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
