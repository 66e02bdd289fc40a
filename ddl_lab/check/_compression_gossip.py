"""Lesson 08's gossip task (``check/compression.py`` exports it): one D-PSGD averaging step on
a ring, ``my_gossip_step(tensor)``, run on 2–5 real workers for three steps in a row.

Judged in order: the structure (the wiretap records whom each rank talks to: a collective,
or a message to or from a rank that is not a ring neighbour, is refused and named), the
replicas' mean (a doubly stochastic step keeps it: it must stay the average of the
inputs), the consensus distance (it must shrink as fast as the ring's W does, by |λ₂| per
step on the slowest mode), then every rank's values against W applied step by step."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from ddl_lab.compression.gossip import mixing_matrix, neighbours, second_eigenvalue
from ddl_lab.runtime.worlds import RankFailure, WorldFailed

from ._core import fail, passed, run_cases, task
from ._diagnose import Case, Cases, differs, same

STEPS = 3
_COLLECTIVES = {"all_reduce", "all_gather", "broadcast", "reduce", "reduce_scatter",
                "all_to_all", "gather", "scatter", "barrier"}
_FIXED = [{"n": 4, "length": 1000, "dtype": "float32"},
          {"n": 5, "length": 13, "dtype": "float64"},
          {"n": 3, "length": 1, "dtype": "float32"},
          {"n": 2, "length": 7, "dtype": "float64"},
          {"n": 5, "length": 0, "dtype": "float32"}]


def _draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"n": int(rng.integers(2, 6)), "length": int(rng.choice([2, 11, 97, 257, 4099])),
            "dtype": str(rng.choice(["float32", "float64"]))}


def _start(n: int, length: int, seed: int) -> np.ndarray:
    """(n, length) starting replicas: a common part, the ring's slowest mode cos(2πr/n)·a
    (what gossip removes last) and a little of every other mode."""
    rng = np.random.default_rng(seed)
    common, a, noise = (rng.uniform(-2, 2, length) for _ in range(3))
    mode = np.cos(2 * np.pi * np.arange(n) / n)[:, None]
    return common + 3 * mode * a + 0.3 * rng.standard_normal((n, length)) * noise


def _gossip_case(fn: Callable, x0: np.ndarray, dtype: str, steps: int) -> dict:
    """Worker: ``fn(tensor)`` ``steps`` times (in place, or its returned tensor kept) with the
    process group wiretapped; the values after each step and whom this rank talked to."""
    import torch
    import torch.distributed as dist
    from ddl_lab.runtime.wiretap import Wiretap
    x = torch.tensor(x0[dist.get_rank()], dtype=getattr(torch, dtype))
    values, used = [], []

    def watch(op: Any, args: tuple) -> None:
        if op.op in _COLLECTIVES:
            used.append(op.op)

    with Wiretap(on_op=watch, refuse_new_group=(
            "dist.new_group was called: gossip runs on the group it is given (the default "
            "group); talk to your two ring neighbours with isend/irecv or send/recv.")) as tap:
        for _ in range(steps):
            out = fn(x)
            if isinstance(out, torch.Tensor) and out is not x and out.shape == x.shape:
                x = out
            values.append(x.detach().double().cpu().numpy().copy())
    return {"values": values, "used": sorted(set(used)),
            "messages": [(op.op, op.src, op.dst) for op in tap.ops
                         if op.op in ("send", "recv") and not op.refused]}


def _consensus(x: np.ndarray) -> float:
    return float(np.sqrt(((x - x.mean(0)) ** 2).sum(1).mean()))


def _mistakes(n: int) -> dict[str, np.ndarray]:
    """Named wrong W's: what the learner's first step may have applied instead."""
    eye, left = np.eye(n), np.roll(np.eye(n), -1, axis=1)      # (left @ x)[i] = x[i−1]
    right = left.T
    out = {"the values were summed, not averaged: divide by the number of values added "
           "(yourself and your distinct neighbours)": eye + (left + right if n > 2 else left),
           "each rank took only its neighbours' mean and left its own value out — on an even "
           "ring the replicas then swap between two states and never agree": (
               (left + right) / 2 if n > 2 else left),
           "each rank averaged with one neighbour only (the left, rank − 1): still an "
           "average, but the spread shrinks by cos(π/n) per step instead of |λ₂|":
               (eye + left) / 2,
           "each rank averaged with one neighbour only (the right, rank + 1): still an "
           "average, but the spread shrinks by cos(π/n) per step instead of |λ₂|":
               (eye + right) / 2,
           "you divided by the world size n, not by the number of values averaged":
               (eye + (left + right if n > 2 else left)) / n}
    if n == 2:
        out["on 2 ranks the left and the right neighbour are the same rank: you counted it "
            "twice, (x + 2·x_other)/3; average over the DISTINCT neighbours"] = (eye + 2 * left) / 3
    return {k: v for k, v in out.items() if not np.allclose(v, mixing_matrix(n))}


def _where(case: Case) -> str:
    p = case.params
    return f"{p['n']} ranks, a {p['dtype']} tensor of {p['length']:,} elements — {case}"


def _structure_fault(got: list[dict], n: int) -> str | None:
    used = sorted({u for g in got for u in g["used"]})
    if used:
        return (f"it called {', '.join('dist.' + u for u in used)}: a gossip step talks to its "
                "two ring neighbours only, with point-to-point messages (isend/irecv or "
                "send/recv). A collective makes every rank wait for all the others — the "
                "global step gossip exists to avoid")
    for r, g in enumerate(got):
        near = neighbours(r, n)
        for op, s, d in g["messages"]:
            peer = d if op == "send" else s
            if peer is None:
                return (f"rank {r} received from any source (src=None): name the neighbour, "
                        f"one of {near}, or the values arriving depend on timing")
            if peer not in near:
                return (f"rank {r} {'sent to' if op == 'send' else 'received from'} rank "
                        f"{peer}, which is not one of its ring neighbours {near} on {n} ranks: "
                        "gossip talks to (rank − 1) % n and (rank + 1) % n only")
    if n > 1 and not any(g["messages"] for g in got):
        return "no rank sent or received anything: each rank must exchange with its neighbours"
    return None


def _value_fault(got: np.ndarray, x0: np.ndarray, n: int, rtol: float) -> str | None:
    """The first step's fault (mean, then a named W, then the first wrong value), or None."""
    W = mixing_matrix(n)
    scale = float(np.abs(x0).max(initial=1.0))
    named = next((text for text, M in _mistakes(n).items()
                  if same(M @ x0, got[0], rtol=rtol, scale=scale)), None)
    mean0, mean1 = x0.mean(0), got[0].mean(0)
    if not same(mean0, mean1, rtol=rtol, scale=scale):
        return (f"after one step the replicas' mean is no longer the average of the inputs "
                f"({differs(mean0, mean1, rtol=rtol, scale=scale)}): a gossip step must keep "
                "it (W is doubly stochastic)" + (f"; {named}" if named else ""))
    want = W @ x0
    if named or not same(want, got[0], rtol=rtol, scale=scale):
        r = next(r for r in range(n) if not same(want[r], got[0][r], rtol=rtol, scale=scale))
        return named or (f"rank {r} after one step: {differs(want[r], got[0][r], rtol=rtol, scale=scale)}"
                         f"; expected the mean of its own value and its ring neighbours' "
                         f"{neighbours(r, n)}")
    return None


def _judge(got: list[dict], x0: np.ndarray, case: Case, name: str) -> float:
    """Fail with the named fault; else the consensus distance's mean factor per step."""
    n, length = case.params["n"], case.params["length"]
    rtol = 2e-5 if case.params["dtype"] == "float32" else 1e-10
    if fault := _structure_fault(got, n):
        fail(f"{name} is not a gossip step ({_where(case)}): {fault}.")
    if not length:
        return math.nan
    values = [np.stack([g["values"][t] for g in got]) for t in range(STEPS)]
    if fault := _value_fault(values, x0, n, rtol):
        fail(f"{name}: {fault} ({_where(case)}).")
    want = np.linalg.matrix_power(mixing_matrix(n), STEPS) @ x0
    c0, c_got, c_want = _consensus(x0), _consensus(values[-1]), _consensus(want)
    if c_got > c_want * (1 + 1e-3) + rtol * c0:
        fail(f"{name}: the consensus distance fell from {c0:.4g} to {c_got:.4g} in {STEPS} "
             f"steps; the ring's W brings it to {c_want:.4g} (≤ |λ₂|^{STEPS} = "
             f"{second_eigenvalue(n) ** STEPS:.3g} of the start) — steps after the first "
             f"must average the values of the step before ({_where(case)}).")
    for t in range(STEPS):
        w = np.linalg.matrix_power(mixing_matrix(n), t + 1) @ x0
        if not same(w, values[t], rtol=rtol * (t + 1), scale=float(np.abs(x0).max())):
            fail(f"{name}: step {t + 1} is wrong ({differs(w, values[t], rtol=rtol)}): each call "
                 f"must average the tensor as it is now ({_where(case)}).")
    return (c_got / c0) ** (1 / STEPS) if c0 else math.nan


def _failure(f: RankFailure, name: str, case: Case | None) -> str:
    if f.kind == "stub":
        return f.line
    where = f" ({_where(case)})" if case is not None else ""
    return f.message(name, case.params["n"] if case else 0) + where + (
        ". A receive buffer must have the length and dtype of what the neighbour sends "
        "(torch.empty_like(tensor))." if f.kind == "died" else "")


@task("compression", refuses=("ddl_lab.compression", "_gossip_average", "gossip_worker"))
def gossip_step(my_gossip_step: Callable, seed: int = 0, timeout: float = 60.0) -> None:
    """Lesson 08, task 7: ``my_gossip_step(tensor)`` replaces this rank's tensor (in place, or
    returns the new one) by the mean of itself and its distinct ring neighbours'
    ((rank ± 1) % n), with point-to-point messages to those neighbours only."""
    name = getattr(my_gossip_step, "__name__", "your function")
    cases = list(Cases("gossip_step", seed, _FIXED, draws=3, draw=_draw))
    starts = [_start(c.params["n"], c.params["length"], int(c.rng.integers(1 << 30)))
              for c in cases]
    try:
        outcomes = run_cases(_gossip_case, [
            (c.params["n"], (my_gossip_step, x0, c.params["dtype"], STEPS))
            for c, x0 in zip(cases, starts)], fn=my_gossip_step, timeout=timeout)
    except WorldFailed as e:
        fail(_failure(e.failure, name, None))
    rates: dict[int, float] = {}
    for case, x0, outcome in zip(cases, starts, outcomes):
        if outcome.failure:
            fail(_failure(outcome.failure, name, case))
        rate = _judge(outcome.results, x0, case, name)
        if case.params["n"] > 2 and not math.isnan(rate):
            rates[case.params["n"]] = rate
    shown = ", ".join(f"×{r:.3f} per step on {k} ranks (|λ₂| = {second_eigenvalue(k):.3f})"
                      for k, r in sorted(rates.items()))
    passed("gossip_step", f"{len(cases)} cases (2–5 ranks, lengths 0 to 4,099, float32 and "
           f"float64), {STEPS} steps each: messages to ring neighbours only, no collective; the "
           f"replicas' mean stayed the average and the consensus distance shrank {shown}")
