"""Lesson 02's reasoning and design checks (``check/parallel_models.py`` exports them):
Amdahl's serial fraction from one measured speedup and the speedup it allows on more cores;
the dynamic schedule's chunk size for an uneven loop, run on real threads.

The chunk check runs the loop with the package's ``parallel_for(schedule="dynamic")`` on real
threads (each iteration sleeps its cost, so the threads overlap even on busy cores) and
counts the chunks the dispenser handed out. The balance it judges is that of those chunks
when each thread claims the next one the moment it is free — what the schedule does on free
cores — so a busy machine's scheduling noise cannot flip the verdict; the split the threads
really did is quoted beside it.
"""
from __future__ import annotations

import math
import threading
import time
from typing import Any, Callable

import numpy as np

from . import _answers as answers
from ._core import call_local, fail, passed, task
from ._diagnose import (Case, Cases, describe_value, returned_arrays, returned_none, same,
                        tolerance)

# ------------------------------------------------------------------ Amdahl's bound


def _amdahl_case(rng: np.random.Generator) -> dict[str, Any]:
    n = int(rng.integers(2, 33))
    return {"n": n, "speedup": float(f"{rng.uniform(1.05, 0.95 * n):.3g}"),
            "cores": int(2 ** rng.uniform(1, 12))}


@task("parallel_models", refuses=("ddl_lab.parallel_models", "amdahl", "fit_parallel_fraction"))
def amdahl_bound(my_amdahl_bound: Callable, seed: int = 0) -> None:
    """Lesson 02, task 3: ``my_amdahl_bound(n, speedup, cores)`` — a speedup measured on n
    workers — returns ``(serial_fraction, speedup_on_cores)``: f = (n/S − 1)/(n − 1) from
    Amdahl's S = 1/(f + (1 − f)/n), and 1/(f + (1 − f)/cores)."""
    fn = my_amdahl_bound
    name = getattr(fn, "__name__", "my_amdahl_bound")
    fixed = [{"n": 4, "speedup": 3.0, "cores": 16}, {"n": 2, "speedup": 2.0, "cores": 64},
             {"n": 8, "speedup": 1.0, "cores": 3}, {"n": 2, "speedup": 1.6, "cores": 1024},
             {"n": 6, "speedup": 2.2, "cores": 6}]
    cases = Cases("amdahl_bound", seed, fixed, draws=3, draw=_amdahl_case)
    for case in cases:
        n, s, cores = case.params["n"], case.params["speedup"], case.params["cores"]
        got = call_local(fn, n, s, cores)
        f, sp = two_numbers(got, ("serial_fraction", "speedup"), name, case)
        rtol = answer_rtol(got)
        want_f = (n / s - 1) / (n - 1)
        want_s = 1 / (want_f + (1 - want_f) / cores)
        if not same(want_f, f, rtol=rtol, scale=1.0):
            fail(f"measured S({n}) = {s:g}: serial fraction {f:.6g}, expected "
                 f"(n/S − 1)/(n − 1) = {want_f:.6g} — {_fraction_fault(f, n, s)} [{case}].")
        if not same(want_s, sp, rtol=rtol):
            fail(f"the serial fraction {f:.4g} is right; the speedup on {cores} cores is "
                 f"{sp:.6g}, expected 1/(f + (1 − f)/{cores}) = {want_s:.6g} — "
                 f"{_speedup_fault(sp, f, n, s, cores)} [{case}].")
    passed("amdahl_bound", f"on {len(cases)} measurements (perfect, none, 2–32 workers, up to "
           "4096 cores): f = (n/S − 1)/(n − 1) and S(cores) = 1/(f + (1 − f)/cores) ≤ 1/f")


def answer_rtol(got: Any) -> float:
    """1e-6, or the tolerance of the learner's dtype if looser (a float32 pair): the raw
    answer's dtype sets it, before ``two_numbers`` makes Python floats of it."""
    parts = list(got) if isinstance(got, (tuple, list)) else [got]
    return max(1e-6, tolerance(*parts))


def two_numbers(got: Any, names: tuple[str, str], name: str, case: Case) -> tuple[float, float]:
    """The learner's pair of finite numbers (``_answers.pair``: a tuple or list of two, an
    array or tensor of two), or a CheckFailed saying what came back instead (lessons 01 and
    02's reasoning tasks)."""
    both = answers.pair(got)
    if both is not None and all(math.isfinite(v) for v in both):
        return both
    if isinstance(got, np.ndarray) and got.shape == (2,):
        got = tuple(got)
    parts = returned_arrays(got, names, name)
    if isinstance(parts, str):
        fail(f"{parts} [{case}]")
    fail(f"{name} returned {describe_value(got)}; return two finite numbers "
         f"({', '.join(names)}) [{case}].")


def _named(got: float, right: float, named: dict[str, float]) -> str | None:
    return next((why for why, v in named.items() if not same(v, right, rtol=1e-6, scale=1.0)
                 and same(v, got, rtol=1e-6, scale=1.0)), None)


def _fraction_fault(f: float, n: int, s: float) -> str:
    right = (n / s - 1) / (n - 1)
    return _named(f, right, {
        "that is 1 − S/n, one minus the efficiency: idle time is not the serial fraction. "
        "Solve S = 1/(f + (1 − f)/n) for f": 1 - s / n,
        "that is the parallel fraction p = 1 − f; the serial fraction is what is left": 1 - right,
        "divide by n − 1, not n: 1/S = f + (1 − f)/n ⇒ n/S − 1 = f·(n − 1)":
            (n / s - 1) / n,
        "1/S is the time on n workers as a fraction of one, not the serial fraction": 1 / s,
    }) or "solve Amdahl's law S = 1/(f + (1 − f)/n) for f"


def _speedup_fault(sp: float, f: float, n: int, s: float, cores: int) -> str:
    right = 1 / (f + (1 - f) / cores)
    return _named(sp, right, {
        "that scales the measured speedup linearly (S·cores/n): the serial part does not "
        "shrink with more cores": s * cores / n,
        "1/f is the limit for infinitely many cores, not for this many": 1 / f if f else math.inf,
        "that divides the serial part by the cores: it is the parallel part (1 − f) that "
        "shrinks": 1 / ((1 - f) + f / cores),
        "that is Gustafson's scaled speedup f + (1 − f)·cores, for a problem that grows with "
        "the machine; Amdahl's law keeps the problem fixed": f + (1 - f) * cores,
    }) or "plug the serial fraction into S = 1/(f + (1 − f)/cores)"


# ------------------------------------------------------------------ a dynamic chunk size

UNIT_S = 5e-5                   # seconds a unit of cost sleeps in the real run
CHUNK_CASES = [
    {"loop": "triangular", "n": 120, "threads": 4, "max_claims": 30, "max_imbalance": 1.13},
    {"loop": "uniform", "n": 120, "threads": 4, "max_claims": 10, "max_imbalance": 1.05},
]


def loop_costs(case: Case) -> np.ndarray:
    """The cost of each iteration: 1, 2, …, n (triangular), 60 each (uniform), or a heavy
    tail drawn from the case's generator (random)."""
    p = case.params
    if p["loop"] == "triangular":
        return np.arange(1, p["n"] + 1)
    if p["loop"] == "uniform":
        return np.full(p["n"], 60)
    return np.minimum(1 + np.floor(5 * case.rng.pareto(1.5, p["n"])), 200).astype(int)


def balance(costs: np.ndarray, threads: int, chunk: int) -> tuple[float, list[float]]:
    """Busiest thread's work over the mean, and each thread's work, when the chunks of a
    dynamic schedule go in order to whichever thread is free first (ties: the lowest)."""
    finish = [0.0] * threads
    for lo in range(0, len(costs), chunk):
        t = finish.index(min(finish))
        finish[t] += float(costs[lo:lo + chunk].sum())
    return max(finish) / (sum(finish) / threads), finish


def _random_chunk_case(rng: np.random.Generator) -> dict[str, Any]:
    """A heavy-tailed loop whose bound some chunk within the claims meets (by 0.05)."""
    n, threads = int(rng.integers(60, 161)), int(rng.integers(2, 7))
    max_claims = math.ceil(n / int(rng.integers(2, 7)))
    return {"loop": "random", "n": n, "threads": threads, "max_claims": max_claims,
            "max_imbalance": None}


def _paper_chunk_case(rng: np.random.Generator) -> dict[str, Any]:
    """A loop judged on paper, far from the prompt's: triangular, uniform or heavy-tailed,
    40–400 iterations, 2–8 threads, 2–8 claims per thread's share."""
    n, threads = int(rng.integers(40, 401)), int(rng.integers(2, 9))
    return {"loop": str(rng.choice(["triangular", "uniform", "random"])), "n": n,
            "threads": threads, "max_claims": math.ceil(n / int(rng.integers(2, 9))),
            "max_imbalance": None}


CHUNK_REAL = len(CHUNK_CASES) + 1     # the prompt's two loops and one drawn run on threads


def _chunk_cases(seed: int) -> list[tuple[Case, np.ndarray]]:
    """The cases with their loops' costs: the prompt's two, one drawn heavy-tailed loop (run
    on real threads) and four drawn loops judged on paper; a drawn loop's bound is set 0.05
    above the best balance a chunk within its claims reaches."""
    out = []
    kinds = iter([_random_chunk_case] + [_paper_chunk_case] * 4)
    for case in Cases("dynamic_chunk", seed, CHUNK_CASES, draws=5,
                      draw=lambda rng: next(kinds)(rng)):
        p, costs = case.params, loop_costs(case)
        if p["max_imbalance"] is None:
            best = min(balance(costs, p["threads"], c)[0]
                       for c in range(math.ceil(p["n"] / p["max_claims"]), p["n"] + 1))
            p["max_imbalance"] = math.ceil(100 * (best + 0.05)) / 100
        out.append((case, costs))
    return out


def _run_threads(costs: np.ndarray, threads: int, chunk: int) -> tuple[int, list[float]]:
    """The loop on real threads, schedule(dynamic, chunk): chunks claimed, work per thread."""
    from ddl_lab.parallel_models.threads import parallel_for
    work: dict[int, float] = {}
    guard = threading.Lock()

    def body(i: int) -> None:
        time.sleep(float(costs[i]) * UNIT_S)
        me = threading.get_ident()
        with guard:
            work[me] = work.get(me, 0.0) + float(costs[i])

    result = parallel_for(body, len(costs), num_threads=threads, schedule="dynamic",
                          chunk=chunk, timeout=30.0)
    split = sorted(work.values(), reverse=True) + [0.0] * (threads - len(work))
    return len(result.chunks), split


@task("parallel_models")
def dynamic_chunk(my_dynamic_chunk: Callable, seed: int = 0) -> None:
    """Lesson 02, task 4: ``my_dynamic_chunk(costs, num_threads, max_claims, max_imbalance)``
    returns a chunk size with which ``schedule(dynamic, chunk)`` hands out at most
    max_claims chunks and leaves the busiest thread at most max_imbalance × the mean work
    (each chunk going to the first free thread): on real threads for a triangular, a uniform
    and a random heavy-tailed loop, on paper for four more loops drawn far from them (40–400
    iterations, 2–8 threads), so that the chunk must be computed from its inputs."""
    fn = my_dynamic_chunk
    name = getattr(fn, "__name__", "my_dynamic_chunk")
    cases = _chunk_cases(seed)
    outs = [call_local(fn, costs.copy(), c.params["threads"], c.params["max_claims"],
                       c.params["max_imbalance"]) if k < len(CHUNK_CASES) else
            answers.plan_call(fn, (costs.copy(), c.params["threads"], c.params["max_claims"],
                                   c.params["max_imbalance"]), name, _loop_words(c))
            for k, (c, costs) in enumerate(cases)]
    same = answers.same_for_all([answers.whole(o) for o in outs])
    report = []
    for k, ((case, costs), got) in enumerate(zip(cases, outs)):
        p = case.params
        chunk = answers.whole(got)
        if chunk is None or not 1 <= chunk <= p["n"]:
            fail((returned_none(got, name, "a chunk size") or
                  f"{name} returned {describe_value(got)}; the chunk is a whole number of "
                  f"iterations from 1 to n = {p['n']}") + f"{same} [{case}].")
        real = k < CHUNK_REAL
        claims, split = _run_threads(costs, p["threads"], chunk) if real else \
            (math.ceil(p["n"] / chunk), None)
        ratio = balance(costs, p["threads"], chunk)[0]
        measured = f" (on the real threads, busy as this machine is: " \
                   f"{max(split) / (sum(split) / p['threads']):.2f}×)" if real else ""
        if claims > p["max_claims"]:
            floor = (f" (⌊n/max_claims⌋ = {chunk} is enough only when max_claims divides n "
                     f"= {p['n']}: round up)" if chunk == p["n"] // p["max_claims"] else "")
            fail(f"chunk {chunk}: the dispenser handed out {claims} chunks, more than "
                 f"max_claims = {p['max_claims']} — every claim is a trip through the lock: "
                 f"a chunk of at least ⌈n/max_claims⌉ = {math.ceil(p['n'] / p['max_claims'])}"
                 f"{floor}.{same} [{case}]")
        if ratio > p["max_imbalance"]:
            fail(f"chunk {chunk}: {claims} claims (≤ {p['max_claims']}), but the busiest "
                 f"thread gets {ratio:.3f}× the mean work, over max_imbalance = "
                 f"{p['max_imbalance']:g} — {_balance_fault(costs, p['threads'], chunk)}"
                 f"{measured}.{same} [{case}]")
        if real:
            report.append(f"{p['loop']}: chunk {chunk}, {claims} claims, {ratio:.3f}×{measured}")
    passed("dynamic_chunk", "on real threads — " + "; ".join(report) + f"; and on paper for "
           f"{len(cases) - CHUNK_REAL} more loops drawn far from them")


def _loop_words(case: Case) -> str:
    p = case.params
    return (f"a {p['loop']} loop of {p['n']} iterations on {p['threads']} threads, max_claims = "
            f"{p['max_claims']}, max_imbalance = {p['max_imbalance']:g}")


def _balance_fault(costs: np.ndarray, threads: int, chunk: int) -> str:
    """Why the threads' shares of a dynamic schedule came out uneven."""
    pieces = [float(costs[lo:lo + chunk].sum()) for lo in range(0, len(costs), chunk)]
    share = sum(pieces) / threads
    if len(pieces) <= threads:
        return (f"{len(pieces)} chunk(s) for {threads} threads is a static split in disguise: "
                "nothing is left to balance once the first claims are made")
    if max(pieces) / min(pieces[:-1] or pieces) < 1.5 and len(pieces) % threads:
        short = threads - len(pieces) % threads
        return (f"the {len(pieces)} chunks are about equal, but {len(pieces)} is not a "
                f"multiple of {threads}: in the last round {short} thread(s) get nothing — "
                "choose a chunk whose number of chunks the threads share evenly")
    return (f"the largest chunk costs {max(pieces) / share:.0%} of a thread's fair share "
            f"({share:.0f} units): near the end of the loop, chunks that big cannot be evened "
            "out — simulate the claims (each chunk to the first free thread) for a few sizes")
