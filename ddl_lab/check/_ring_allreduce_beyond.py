"""Lesson 06 §7's graded tasks, the judging half: the learner's recursive halving/doubling
(its structure, rounds and bytes read off the wiretapped messages) and the choice of an
allreduce algorithm for (n, S, α, β), judged against the α–β models of ``cost.py``."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ddl_lab.ring_allreduce.cost import cost_model

CHOICES = ("tree", "ring", "halving_doubling", "pipelined_tree")
TARGET = 1.10                 # a choice within 10 % of the best model time passes
REAL_SLACK = 1.5              # the real run: the choice within 1.5× of the model's best, timed

HD_FIXED = [  # world sizes 1, 2, 4 (powers of two up to the check's 5 ranks)
    {"n": 4, "length": 16, "dtype": "float32"},
    {"n": 4, "length": 13, "dtype": "float64"},          # not a multiple of n, a prime
    {"n": 2, "length": 7, "dtype": "float32"},
    {"n": 4, "length": 3, "dtype": "float32"},           # fewer elements than ranks
    {"n": 4, "length": 0, "dtype": "float64"},
    {"n": 1, "length": 5, "dtype": "float32"},
    {"n": 4, "length": 40_009, "dtype": "float32"},      # large, prime: the bytes sent
]


def hd_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"n": int(rng.choice([2, 4])), "length": int(rng.choice([11, 97, 257, 1009, 4099])),
            "dtype": str(rng.choice(["float32", "float64"]))}


def hd_bytes_allowed(n: int, length: int, esize: int) -> int:
    """Most bytes a rank may send: 2·Σ_k ⌈L/2^(k+1)⌉ elements (halves of uneven lengths)."""
    rounds = n.bit_length() - 1
    return 2 * esize * sum(-(-length // (1 << (k + 1))) for k in range(rounds))


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
    if got[worst]["sent"] >= rounds * S and got[worst]["sent"] > hd_bytes_allowed(n, length,
                                                                                  esize):
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


# ---------------------------------------------------------------- the design task

def modelled(n: int, S: float, a: float, b: float) -> dict[str, float]:
    """Seconds of each choice in the α–β models (the pipelined tree with its best pieces)."""
    return {c: cost_model(c, n, S, a, b) for c in CHOICES}


CHOICE_FIXED = [  # the prompt's cases
    {"n": 8, "nbytes": 1 << 10, "alpha": 2e-5, "beta": 1e-9},
    {"n": 8, "nbytes": 64 << 20, "alpha": 2e-5, "beta": 1e-9},
    {"n": 6, "nbytes": 256 << 10, "alpha": 5e-6, "beta": 1e-10},
]
REAL_CASE = {"n": 4, "nbytes": 4 << 20, "alpha": 5e-5, "beta": 1e-9}   # a clear choice


def choice_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"n": int(rng.choice([3, 5, 6, 7, 12, 16, 24, 64, 100, 256, 1000])),
            "nbytes": int(10 ** rng.uniform(1, 9.5)),
            "alpha": float(10 ** rng.uniform(-6.5, -3.5)),
            "beta": float(10 ** rng.uniform(-11, -8.5))}


def clear(case: dict[str, Any]) -> bool:
    """A draw where the best choice beats every choice outside the 10 % band by ≥ 20 %
    (so the verdict does not hinge on rounding)."""
    times = sorted(modelled(*(case[k] for k in ("n", "nbytes", "alpha", "beta"))).values())
    best = times[0]
    return all(t <= best * TARGET or t >= best * TARGET * 1.2 for t in times)


def judge_choice(got: Any, case: dict[str, Any]) -> tuple[str | None, str]:
    """(fault or None, one line): the chosen algorithm against the models' best."""
    n, S, a, b = (case[k] for k in ("n", "nbytes", "alpha", "beta"))
    times = modelled(n, S, a, b)
    best = min(times, key=times.get)
    if not isinstance(got, str) or got not in CHOICES:
        return (f"returned {got!r}: return one of {list(CHOICES)}", "")
    ratio = times[got] / times[best]
    line = (f"n = {n}, S = {S:,} B: {got} {_ms(times[got])} vs best {best} "
            f"{_ms(times[best])}")
    if ratio <= TARGET:
        return None, line
    why = {"ring": "its 2(n−1) rounds of α dominate at this size",
           "tree": "it sends the whole tensor in each of its 2⌈log2 n⌉ rounds",
           "pipelined_tree": "its inner ranks send every byte three times (to a parent and "
                             "two children)",
           "halving_doubling": "with n not a power of two its fold sends S twice more"
           if n & (n - 1) else "its log2 n rounds are not what this size needs"}[got]
    return (f"{got} takes {_ms(times[got])} in the model, {ratio:.2f}× the best, {best} "
            f"({_ms(times[best])}; α·rounds = {_ms(a * _rounds(best, n))}, S·β = "
            f"{_ms(S * b)}): {why}", line)


def _rounds(algorithm: str, n: int) -> int:
    p = 1 << (n.bit_length() - 1)
    return {"ring": 2 * (n - 1), "tree": 2 * math.ceil(math.log2(n)),
            "halving_doubling": 2 * (p.bit_length() - 1) + (2 if n > p else 0),
            "pipelined_tree": 2 * (n.bit_length() - 1)}[algorithm]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"
