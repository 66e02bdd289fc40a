"""Checks for lesson 12 (transformers), tasks 3–4: the bytes a rank sends in one training step
and the activations it keeps, for a drawn TP × SP × CP configuration (reasoning), and a
choice of the three degrees under a per-rank memory budget (design).

The accounting (``_costs``, private: it answers task 3 as it stands) is the lesson's
formulas put together: tensor parallelism of t
ranks with its sequence-parallel form in the paper's shape (``tensor.tp_bytes``,
``sequence.activation_bytes`` with ``regather``: every activation cut t-fold), on the s/c
tokens a rank of a context-parallel group of c holds; the ring's K/V blocks of the rank's
a/t heads, forward and backward (``ring.ring_bytes``); and, because the c ranks of a ring
hold the same weights, the allreduce of the rank's gradients over them. A context-parallel
rank keeps what the model keeps for a sequence of s/c tokens (the ring holds one s/c × s/c
block of scores at a time). One configuration of each task runs on real workers
(``tensor.tp_step``: bytes by the wiretap, activations by saved-tensor hooks, the loss and
gradients against one process); those cases have c = 1, since context parallelism runs
here as ring attention alone, not inside a whole model: c > 1 is judged by the accounting.

A private module: the lead folds it into ``check/transformers.py``.
"""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np
import torch

from ddl_lab.runtime.costs import sent_bytes

from . import _answers as answers
from ._core import fail, judge, on_workers
from ._diagnose import Case, apart, explain, returned_none
from ._trial import Trial

__all__ = ["rank_params", "transformer_bytes", "parallel_plan"]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
_ARGS = ("vocab", "s", "b", "h", "a", "L", "dtype", "tp", "sp", "cp")


def rank_params(vocab: int, s: int, h: int, L: int, t: int) -> int:
    """Parameters rank 0 of a TP group of t holds: its vocabulary rows (tied head), the
    position table, per block two LayerNorms, its rows of qkv and fc and columns of both
    projections (their biases whole), and ``ln_f``."""
    from ddl_lab.transformers.vocab import vocab_range
    start, end = vocab_range(vocab, 0, t)
    block = 4 * h + (3 * h * h + 3 * h) // t + h * h // t + h + (4 * h * h + 4 * h) // t \
        + 4 * h * h // t + h
    return (end - start) * h + s * h + L * block + 2 * h


def _costs(vocab: int, s: int, b: int, h: int, a: int, L: int, dtype: str, tp: int, sp: bool,
          cp: int, mistake: str = "") -> tuple[float, float]:
    """(bytes rank 0 sends in one forward and backward, activation bytes it keeps after the
    forward) by the lesson's accounting; ``mistake`` names a wrong accounting the checks
    recognise (see ``_MISTAKES``)."""
    from ddl_lab.ml.gpt import GPTConfig
    from ddl_lab.transformers.ring import ring_bytes
    from ddl_lab.transformers.sequence import activation_bytes
    from ddl_lab.transformers.tensor import tp_bytes
    dt = torch.float32 if mistake == "bf16 as 4" else DTYPES[dtype]
    e = torch.empty((), dtype=dt).element_size()
    cfg = GPTConfig(vocab=vocab, seq=s, hidden=h, heads=a, layers=L)
    local = s // cp
    tp_sent = tp_bytes(cfg, b, tp, dt, sp, regather=sp, s=local)
    if mistake == "no sp grads" and sp:
        tp_sent["backward"].pop("all_reduce")
    sent = sum(tp_sent["forward"].values())
    if mistake != "forward only":
        sent += sum(tp_sent["backward"].values())
        if sp and tp > 1 and mistake == "sp grads without positions":
            sent -= sent_bytes("all_reduce", tp, s * h * e)
    if cp > 1:
        ring = functools.partial(ring_bytes, s, cp, b, a // tp, h // a, e)
        sent += L * ring()[0]
        if mistake not in ("forward only", "kv once"):
            sent += L * ring(backward=True)[0]
        if mistake not in ("forward only", "no cp grads"):
            sent += sent_bytes("all_reduce", cp, rank_params(vocab, s, h, L, tp) * e)
    kept = activation_bytes(cfg, b, tp, dt, sp and mistake != "sp keeps all",
                            regather=sp and mistake not in ("sp keeps all", "sp norms only"),
                            s=s if mistake == "cp keeps all" else local)
    return float(sent), float(kept)


# What each named mistake's accounting says (its sent bytes, its activation bytes, or both).
_MISTAKES = {
    "forward only": "only the forward pass was counted: backward sends as much again "
                    "(the f operators' allreduces, the gathers and scatters reversed, the "
                    "ring's K/V again with their gradients)",
    "no sp grads": "sequence parallelism's extra allreduce in backward is missing: the "
                   "parameters applied to sequence shards (LayerNorms, the row-parallel "
                   "biases, the position table) see only this rank's tokens, so their "
                   "gradients are summed over the t ranks",
    "sp grads without positions": "sequence parallelism's gradient allreduce is mis-sized: "
                                  "the position table (s × h) is applied to sequence shards "
                                  "too, beside the LayerNorms and row-parallel biases",
    "bf16 as 4": "bf16 was counted as 4 bytes: it is 2 bytes an element (the cross-entropy's "
                 "numbers stay fp32)",
    "kv once": "the ring's K/V blocks were counted once: backward sends them round the ring "
               "again, with their gradients",
    "no cp grads": "the gradient allreduce of context parallelism is missing: the c ranks of "
                   "a ring hold the same weights, so their gradients are summed over them",
    "sp keeps all": "the activations were not divided by t under sequence parallelism: it "
                    "shards the LayerNorm and dropout regions along the sequence and keeps "
                    "only the shard of each column-parallel layer's input",
    "sp norms only": "only the LayerNorm regions were cut by t: sequence parallelism in the "
                     "paper's form keeps the shard of each column-parallel layer's input too "
                     "(gathered again in backward), so every activation is divided by t",
    "cp keeps all": "the activations were not divided by c: a context-parallel rank holds "
                    "s/c of the tokens",
}


def _call(name: str, p: dict) -> str:
    return f"{name}({', '.join(f'{k}={p[k]!r}' for k in _ARGS)})"


def _answer(got: Any, name: str, call: str, case: Case) -> tuple[float, float]:
    if not (isinstance(got, dict) and {"sent", "activations"} <= set(got)):
        fail(returned_none(got, name, 'a dict with "sent" and "activations"',
                           f'a dict {{"sent": bytes, "activations": bytes}} ({case}).', call))
    values = [answers.scalar(got[k]) for k in ("sent", "activations")]
    for key, v in zip(("sent", "activations"), values):
        if v is None or not math.isfinite(v):
            fail(f"{call} returned {key} = {got[key]!r:.60}: a number of bytes ({case}).")
    return values[0], values[1]


def _same(x: float, y: float) -> bool:
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=0.5)


def _judge_bytes(name: str, case: Case, sent: float, kept: float,
                 want: tuple[float, float], how: str) -> None:
    p, call = case.params, _call(name, case.params)
    for what, got, right, index in (("sent", sent, want[0], 0),
                                    ("activations", kept, want[1], 1)):
        if _same(got, right):
            continue
        hint = explain(got, [(msg, _costs(*(p[k] for k in _ARGS), mistake=m)[index])
                             for m, msg in _MISTAKES.items()], rtol=1e-6, right=right)
        shown, wanted = apart(got, right, ",")
        fail(f"{call} returned {what} = {shown} bytes, {how} {wanted} ({case})"
             + (f": {hint}." if hint else "."))


# ------------------------------------------------------------ task 3 (reasoning): bytes

# The configuration that runs on the workers: c = 1 (see the module's docstring).
REAL = {"vocab": 48, "s": 16, "b": 3, "h": 32, "a": 4, "L": 2, "dtype": "fp32", "tp": 2,
        "sp": True, "cp": 1}
FIXED_BYTES = [
    {"vocab": 50304, "s": 2048, "b": 1, "h": 4096, "a": 32, "L": 32, "dtype": "bf16",
     "tp": 8, "sp": True, "cp": 1},
    {"vocab": 32000, "s": 32768, "b": 1, "h": 2048, "a": 16, "L": 24, "dtype": "bf16",
     "tp": 2, "sp": False, "cp": 4}]


def _draw_bytes(rng: np.random.Generator) -> dict[str, Any]:
    t, c = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4, 8]))
    if t == c == 1:
        t = 2
    a = int(rng.choice([8, 16, 32, 64]))
    return {"vocab": 1024 * int(rng.integers(8, 64)), "s": 2 ** int(rng.integers(9, 16)),
            "b": int(rng.integers(1, 9)), "h": a * int(rng.choice([64, 128])), "a": a,
            "L": int(rng.integers(2, 49)), "dtype": str(rng.choice(["fp32", "bf16"])),
            "tp": t, "sp": bool(rng.integers(0, 2)) and t > 1, "cp": c}


@functools.lru_cache(maxsize=8)
def _measured(vocab: int, s: int, b: int, h: int, a: int, L: int, dtype: str, tp: int,
              sp: bool, seed: int = 0) -> tuple[float, float, bool]:
    """(most bytes a rank sent, most activation bytes a rank kept, loss and gradients equal
    to one process) of one real step of the lesson's TP(/SP) GPT on ``tp`` workers."""
    from ddl_lab.ml.gpt import GPTConfig
    from ddl_lab.transformers.tensor import differences, one_process, tp_step
    cfg, dt = GPTConfig(vocab=vocab, seq=s, hidden=h, heads=a, layers=L), DTYPES[dtype]
    runs = on_workers(tp_step, tp, cfg, b, seed, sp, dt, sp, fn=tp_step)
    sent = max(sum(r["forward"].values()) + sum(r["backward"].values()) for r in runs)
    same = not differences(runs, one_process(cfg, b, seed, dt), rtol=1e-4, atol=1e-5)
    return float(sent), float(max(r["activations"] for r in runs)), same


def transformer_bytes(my_transformer_bytes: Callable, seed: int = 0) -> None:
    """Lesson 12, task 3 (reasoning): ``my_transformer_bytes(vocab, s, b, h, a, L, dtype, tp,
    sp, cp)`` returns {"sent": bytes one rank puts on the wire in one training step (forward
    and backward, the ring model of lesson 06), "activations": bytes it keeps for backward
    after the forward} for the lesson's GPT (no dropout) over tp × cp ranks: tensor
    parallelism of degree tp (``sp``: its sequence-parallel form, the column-parallel inputs
    kept as shards), context parallelism of degree cp by ring attention. Judged against
    the accounting on drawn configurations, and on one that runs on real workers."""
    trial = Trial("transformer_bytes", my_transformer_bytes, seed, [REAL, *FIXED_BYTES],
                  draws=10, draw=_draw_bytes)
    name = trial.name
    for case in trial:
        p = case.params
        sent, kept = _answer(trial.call(case, *(p[k] for k in _ARGS)), name,
                             _call(name, p), case)
        want = _costs(*(p[k] for k in _ARGS))
        _judge_bytes(name, case, sent, kept, want, "the lesson's accounting says")
        if case.index == 0:
            m_sent, m_kept, _ = _measured(*(p[k] for k in _ARGS[:-1]))
            _judge_bytes(name, case, sent, kept, (m_sent, m_kept), "measured on the workers:")
    trial.passed(f"one configuration measured on {REAL['tp']} workers (wiretap and saved-"
                 f"tensor hooks) and {len(trial) - 1} more (TP up to 8, SP on and off, CP up "
                 "to 8, fp32 and bf16) match the lesson's accounting")


# --------------------------------------------------------------- task 4 (design): a plan

OVER = 0.10                        # a plan may send up to 10 % more than the least that fits
_PLAN_ARGS = ("vocab", "s", "b", "h", "a", "L", "dtype", "ranks", "budget")


def options(p: dict) -> list[tuple[int, bool, int]]:
    """Every (tp, sp, cp) with tp · cp = ranks that the model allows: whole heads per rank,
    the sequence split evenly (sequence parallelism: s/cp divisible by tp)."""
    n, out = p["ranks"], []
    for t in (d for d in range(1, n + 1) if n % d == 0 and p["a"] % d == 0):
        c = n // t
        if p["s"] % c:
            continue
        out += [(t, sp, c) for sp in ((False, True) if t > 1 and (p["s"] // c) % t == 0
                                      else (False,))]
    return out


def _plan_costs(p: dict, plan: tuple[int, bool, int]) -> tuple[float, float]:
    return _costs(*(p[k] for k in _PLAN_ARGS[:7]), *plan)


def _budget(p: dict, rng: np.random.Generator, real: bool) -> dict | None:
    """A budget that some options meet with 6 % to spare and others miss by as much, such
    that the fitting options' bytes are either within 5 % of the least or 15 % over it; for
    ``real``, one that only plans without context parallelism meet."""
    opts = options(p)
    cost = {o: _plan_costs(p, o) for o in opts}
    kept = sorted({k for _, k in cost.values()})
    if len(kept) < 2:
        return None
    budget = kept[int(rng.integers(1, len(kept)))] * float(rng.uniform(1.07, 1.3))
    if any(budget / 1.06 < k < budget * 1.06 for k in kept) or kept[0] > budget:
        return None
    fits = [o for o in opts if cost[o][1] <= budget]
    least = min(cost[o][0] for o in fits)
    good = [o for o in fits if cost[o][0] <= (1 + OVER) * least]
    if any(1.05 * least < cost[o][0] < 1.15 * least for o in fits) or len(good) == len(opts):
        return None
    if real and any(c > 1 for _, _, c in good):
        return None
    return {**p, "budget": int(budget)}


def _plan_draw(rng: np.random.Generator, real: bool) -> dict[str, Any]:
    while True:
        if real:
            n = int(rng.choice([2, 4]))
            p = {"vocab": 16 * int(rng.integers(3, 6)), "s": int(rng.choice([16, 32])),
                 "b": int(rng.integers(2, 4)), "h": 32, "a": 4, "L": 2, "dtype": "fp32",
                 "ranks": n}
        else:
            a = int(rng.choice([16, 32, 64]))
            p = {"vocab": 1024 * int(rng.integers(16, 64)), "s": 2 ** int(rng.integers(11, 18)),
                 "b": int(rng.integers(1, 5)), "h": a * 128, "a": a,
                 "L": int(rng.integers(8, 65)), "dtype": "bf16",
                 "ranks": int(rng.choice([4, 8, 16]))}
        if (case := _budget(p, rng, real)) is not None:
            return case


def _draws() -> Callable[[np.random.Generator], dict[str, Any]]:
    count = iter(range(10 ** 6))
    return lambda rng: _plan_draw(rng, real=next(count) == 0)


def _choice(out: Any, name: str, case: Case) -> tuple[int, bool, int]:
    judge(answers.plan(out, name, {"tp": "the TP degree", "sp": "True or False",
                                   "cp": "the CP degree"}, f" ({case})"))
    t, c, sp = answers.whole(out["tp"]), answers.whole(out["cp"]), out["sp"]
    if not isinstance(sp, (bool, np.bool_)):
        fail(f"{name} chose sp = {sp!r}: say True or False ({case}).")
    if t is None or c is None or t < 1 or c < 1:
        fail(f"{name} chose tp = {out['tp']!r}, cp = {out['cp']!r}: whole degrees ≥ 1 "
             f"({case}).")
    return t, bool(sp) and t > 1, c            # one rank has no sequence to shard


def parallel_plan(my_parallel_plan: Callable, seed: int = 0) -> None:
    """Lesson 12, task 4 (design): ``my_parallel_plan(vocab, s, b, h, a, L, dtype, ranks,
    budget)`` returns {"tp": t, "sp": bool, "cp": c} with t · c = ranks for the lesson's GPT
    (no dropout) such that no rank keeps more than ``budget`` bytes of activations, sending
    no more than 10 % over the least any fitting plan sends. The first case runs on real
    workers (activations, bytes, and loss and gradients equal to one process); the others,
    drawn far from the lesson's sizes, are judged by the accounting."""
    trial = Trial("parallel_plan", my_parallel_plan, seed, draws=6, draw=_draws(), plan=True)
    name = trial.name
    plans = [_choice(trial.call(c, *(c.params[k] for k in _PLAN_ARGS),
                                where=f"{name}({', '.join(f'{k}={c.params[k]!r}' for k in _PLAN_ARGS)})"),
                     name, c) for c in trial]
    for case, plan in zip(trial, plans):
        _judge_plan(name, case, plan, None, plans)
    p, plan = trial.cases[0].params, plans[0]
    sent, kept, same = _measured(*(p[k] for k in _PLAN_ARGS[:7]), plan[0], plan[1])
    _judge_plan(name, trial.cases[0], plan, (sent, kept, same), plans)
    trial.passed(f"on {p['ranks']} real workers tp={plan[0]}, sp={plan[1]} kept "
                 f"{kept / p['budget']:.0%} of the budget and equalled one process; "
                 f"{len(trial) - 1} more budgets (up to 16 ranks, sequences up to 128k) met by "
                 "the accounting")


def _judge_plan(name: str, case: Case, plan: tuple[int, bool, int],
                measured: tuple[float, float, bool] | None, plans: list) -> None:
    p = case.params
    t, sp, c = plan
    chose = f"{name}(…) chose tp={t}, sp={sp}, cp={c}"
    unseen = answers.same_for_all(plans) + f" ({case})"
    if t * c != p["ranks"]:
        fail(f"{chose}: tp · cp must be the {p['ranks']} ranks given.{unseen}")
    if plan not in options(p):
        fail(f"{chose}: not a plan this model allows — tp must divide the {p['a']} heads, cp "
             f"the sequence of {p['s']} and, with sp, tp the cp-th of it.{unseen}")
    sent, kept = _plan_costs(p, plan)
    how = "by the lesson's accounting"
    if measured is not None:
        sent, kept, same = measured
        how = "measured on the workers"
        if not same:
            fail(f"{chose}: its loss or gradients differ from one process's.{unseen}")
    if kept > p["budget"]:
        fail(f"{chose}: a rank keeps {kept:,.0f} bytes of activations ({how}), over the "
             f"budget of {p['budget']:,}. Sequence parallelism cuts every activation by t; "
             f"context parallelism cuts the tokens a rank holds by c.{unseen}")
    fits = [o for o in options(p) if _plan_costs(p, o)[1] <= p["budget"]]
    best = min(fits, key=lambda o: _plan_costs(p, o)[0])
    least = _plan_costs(p, best)[0]
    if sent > (1 + OVER) * least * (1 + 1e-9):
        fail(f"{chose}: a rank sends {sent:,.0f} bytes a step ({how}), "
             f"{sent / least - 1:.0%} more than tp={best[0]}, sp={best[1]}, cp={best[2]} "
             f"({least:,.0f}), which fits the budget too. Tensor parallelism's bytes grow "
             "with b·s·h per layer and do not shrink with more ranks; the ring's with the "
             f"rank's heads' K/V, and context parallelism sums its ranks' gradients.{unseen}")
