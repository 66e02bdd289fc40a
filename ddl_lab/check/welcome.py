"""Checks for lesson 00 (welcome): ranks, and one all_reduce of offsets (on 4 ranks, then 3:
a hard-coded world size shows); darts per rank for a Monte Carlo π of a given standard error;
a plan of workers × darts that lands within a tolerance of π in most runs (1–4 ranks)."""
from __future__ import annotations

import math
from typing import Any, Callable

from ddl_lab.runtime.worlds import WorldFailed

from . import _answers as answers
from . import _core
from ._core import fail, failed_on_workers, judge, passed, run_cases, task
from ._diagnose import only_right_for, returned_none, table
from ._trial import Trial

__all__ = ["rank", "offsets", "darts_per_rank", "pi_plan"]

WORLD_SIZES = (4, 3)


def _ints(name: str, n: int, r: int, value: Any, pair: bool = False) -> Any:
    """Rank r's answer as an int (``pair``: a tuple of two, (start, total)), or the check
    fails naming what it returned."""
    parts = list(value) if pair and isinstance(value, (tuple, list)) else [value]
    if len(parts) != 1 + pair or any(answers.whole(v) is None for v in parts):
        what = ("None: the function has no `return`" if value is None else
                f"{value!r:.{60 if pair else 40}} ({type(value).__name__})")
        fail(f"{name} on rank {r} of {n} returned {what}; " + (
            "return two plain ints, (start, total)." if pair else "return the value as a plain "
            "int, e.g. `return dist.get_rank()` or `int(t.item())`."))
    ints = tuple(answers.whole(v) for v in parts)
    return ints if pair else ints[0]


def _on_worlds(body: Callable, fn: Callable, cases: list[tuple[int, tuple]]):
    """``body(*args)`` for each case (n, args) on an n-rank world in turn: (n, the ranks'
    results), or the check fails as the first failing world did."""
    try:
        outcomes = run_cases(body, cases, fn=fn, timeout=_core.DEFAULT_TIMEOUT)
    except WorldFailed as e:
        failed_on_workers(e.failure, fn, 0)
    for outcome in outcomes:
        if outcome.failure is not None:
            failed_on_workers(outcome.failure, fn, outcome.n)
        yield outcome.n, outcome.results


# ------------------------------------------------------------------ task 1

@task("welcome")
def rank(my_rank: Callable[[], int], world_sizes: tuple[int, ...] = WORLD_SIZES) -> None:
    """Lesson 00, task 1: ``my_rank()`` run on every worker returns that worker's rank."""
    name, right = getattr(my_rank, "__name__", "my_rank"), []
    for n, got in _on_worlds(my_rank, my_rank, [(n, ()) for n in world_sizes]):
        values = [_ints(name, n, r, v) for r, v in enumerate(got)]
        if values == list(range(n)):
            right.append(f"{n} ranks")
            continue
        hint = (" — that is the world size, not the rank" if all(v == n for v in values) else
                " — ranks counted from 1? They start at 0" if values == list(range(1, n + 1))
                else " — every rank returned the same number" if len(set(values)) == 1 else "")
        bad = next(r for r, v in enumerate(values) if v != r)
        fail(f"with {n} ranks, rank {bad} returned {values[bad]}, expected {bad}{hint}. "
             f"All ranks returned {values}." + only_right_for(right, f"{n} ranks"))
    passed("rank", f"every worker returned its own rank, with {' and '.join(right)}")


# ------------------------------------------------------------------ task 2

OFFSET_SEED = 35


def _counts(n: int) -> list[int]:
    """The examples each of n ranks holds: seeded, uneven, never shown by the prompt."""
    import random
    rng = random.Random(OFFSET_SEED * 100 + n)
    return [rng.randrange(1, 1000) for _ in range(n)]


def _spied_offsets(fn: Callable, counts: list[int]) -> tuple[Any, list[tuple[str, str]]]:
    """On a worker: ``fn(this rank's count)`` with every collective it calls recorded as
    (the torch.distributed call, the reduce op or "")."""
    import torch.distributed as dist
    from ddl_lab.runtime.wiretap import Wiretap
    calls: list[tuple[str, str]] = []

    def spy(op: Any, args: tuple) -> None:
        if not op.method.startswith(("send", "recv", "barrier")):
            reduce_op = getattr(args[1], "reduceOp", "") if len(args) > 1 else ""
            calls.append((op.method, str(getattr(reduce_op, "op", reduce_op)).rsplit(".", 1)[-1]))

    with Wiretap(on_op=spy):
        return fn(counts[dist.get_rank()]), calls


@task("welcome")
def offsets(my_offsets: Callable[[int], tuple[int, int]],
            world_sizes: tuple[int, ...] = WORLD_SIZES) -> None:
    """Lesson 00, task 2: each rank holds ``count`` examples (uneven, drawn by the check);
    ``my_offsets(count)`` returns (where this rank's examples start when all ranks' are laid
    end to end in rank order, how many there are in all), with ONE ``dist.all_reduce``."""
    name, right, runs = getattr(my_offsets, "__name__", "my_offsets"), [], []
    for n, out in _on_worlds(_spied_offsets, my_offsets,
                             [(n, (my_offsets, _counts(n))) for n in world_sizes]):
        counts = _counts(n)
        want = [(sum(counts[:r]), sum(counts)) for r in range(n)]
        got = [_ints(name, n, r, v, pair=True) for r, (v, _) in enumerate(out)]
        runs.append((n, [c for _, c in out]))
        if got != want:
            fail(f"with {n} ranks holding {counts} examples, the ranks returned {got}, "
                 f"expected {want}. " + _offset_hint(got, counts, [c for _, c in out], right))
        right.append(f"{n} ranks")
    for n, calls in runs:
        judge(_allreduce_fault(name, calls, n))
    passed("offsets", "one all_reduce gave every rank its start and the total — "
           + ", ".join(f"{n} ranks: {_counts(n)}" for n in world_sizes))


def _allreduce_fault(name: str, calls: list[list], n: int) -> str | None:
    """What is wrong with the collectives of a run whose results were right."""
    if others := sorted({m for c in calls for m, _ in c if m != "allreduce"}):
        return (f"with {n} ranks {name} called {others[0]}: the task is one dist.all_reduce "
                "and nothing else — lay the counts out so that a sum gives every rank all "
                "of them.")
    counts = [len(c) for c in calls]
    if any(k != 1 for k in counts):
        return (f"with {n} ranks, the ranks called dist.all_reduce {counts} times: one "
                "all_reduce is enough for both numbers.")
    if ops := sorted({c[0][1] for c in calls if not c[0][1].endswith("SUM")}):
        return (f"with {n} ranks the all_reduce used op={ops[0]}, which happens to give the "
                "answer here: use the default op, ReduceOp.SUM.")
    return None


def _offset_hint(got: list[tuple[int, int]], counts: list[int], calls: list[list],
                 right: list[str]) -> str:
    n = len(counts)
    if not any(calls):
        return "dist.all_reduce was never called: no rank can know the others' counts without it."
    other = sorted({op for c in calls for m, op in c if m == "allreduce" and op
                    and not op.endswith("SUM")})
    if other:
        return f"The all_reduce used op={other[0]}: use the default op, ReduceOp.SUM."
    starts, totals = [s for s, _ in got], [t for _, t in got]
    if len(set(totals)) > 1:
        return ("The ranks disagree on the total: every rank must take part in the same "
                "all_reduce and read the total from its result.")
    if starts == [sum(counts[:r + 1]) for r in range(n)]:
        return "Each start counts the rank's own examples too: it is where they begin, not end."
    if starts == [sum(counts[r + 1:]) for r in range(n)]:
        return "Each start counts the ranks above it: data is laid out in rank order, 0 first."
    if totals[0] == sum(counts) and starts != [sum(counts[:r]) for r in range(n)]:
        return ("The total is right but the starts are not: one summed number cannot tell "
                "a rank how many examples the ranks below it hold.")
    return only_right_for(right, f"{n} ranks").strip() or "Compare your starts with the sums above."


# ------------------------------------------------------------------ task 3: darts per rank

PI_VARIANCE = math.pi * (4 - math.pi)   # one dart's 4·hit has variance 16·p(1 − p), p = π/4


def _standard_error(total_darts: float) -> float:
    """The standard error of the combined π estimate from ``total_darts`` darts."""
    return math.sqrt(PI_VARIANCE / total_darts)


@task("welcome")
def darts_per_rank(my_darts_per_rank: Callable[[float, int], int], seed: int = 0) -> None:
    """Lesson 00, task 3: ``my_darts_per_rank(eps, workers)`` is the fewest darts each of
    ``workers`` ranks must throw so that the combined estimate 4·hits/N has a standard error
    √(π(4−π)/N) ≤ eps: ⌈π(4−π) / (workers·eps²)⌉ (one more is accepted)."""
    fixed = table("eps workers", (0.01, 4), (0.001, 1), (0.05, 3), (0.2, 7))
    trial = Trial("darts_per_rank", my_darts_per_rank, seed, fixed, draws=3, draw=lambda rng: {
        "eps": float(f"{10 ** rng.uniform(-3.3, -1):.3g}"), "workers": int(rng.integers(1, 17))},
        name="my_darts_per_rank")
    for case in trial:
        eps, w = case.params["eps"], case.params["workers"]
        got = trial.call(case, eps, w)
        n = answers.scalar(got)
        if n is None or not math.isfinite(n):
            fail(returned_none(got, trial.name, "the number of darts per rank",
                               "a number of darts (an int)") + f" [{case}].")
        need = PI_VARIANCE / (w * eps ** 2)
        if need * (1 - 1e-9) <= n <= math.ceil(need) + 1:
            continue
        fail(f"{trial.name}({eps:g}, {w}) returned {n:,.6g} darts per rank, expected "
             f"⌈π(4−π)/(workers·eps²)⌉ = {math.ceil(need):,}: "
             f"{_darts_fault(n, need, w, eps)} [{case}].")
    trial.passed(f"on {len(trial)} cases (eps from 0.2 down to 0.0005, 1–16 workers): "
                 "N = π(4−π)/eps² darts in all, shared by the ranks, rounded up")


def _darts_fault(n: float, need: float, workers: int, eps: float) -> str:
    """What a wrong number of darts per rank says about the reasoning behind it."""
    named = {
        "that is the total for all ranks — the all_reduce pools every rank's hits, so each "
        "rank throws 1/workers of it": need * workers,
        "that is p(1 − p)/eps², the variance of one hit (0 or 1) with p = π/4; the estimate "
        "is 4·hits/N, so one dart contributes 16·p(1 − p) = π(4 − π)": need / 16,
        "that uses the standard deviation √(π(4−π)) where the variance π(4−π) belongs: "
        "√(π(4−π)/N) ≤ eps ⇔ N ≥ π(4−π)/eps²": need / math.sqrt(PI_VARIANCE),
        "eps must be squared: the standard error falls as 1/√N, so N ≥ π(4−π)/eps²":
            need * eps,
        "you divided by the number of workers twice": need / workers,
    }
    for why, value in named.items():
        if abs(n - value) <= 1 + 1e-6 * value and abs(value - need) > 1 + 1e-6 * need:
            return why
    se = _standard_error(n * workers)
    if n < need:
        return (f"with {n:,.6g} darts on each of {workers} ranks the standard error is "
                f"{se:.4g} > eps = {eps:g}" + (" — round up, not down" if n >= need - 1 else ""))
    return (f"more than needed: the standard error would be {se:.4g}, below eps = {eps:g} — "
            "ask for the fewest darts that reach it")


# ------------------------------------------------------------------ task 4: a plan for π

PI_WORKERS = 4          # the lesson's cluster: a plan may use 1–4 of its ranks
PI_RUNS = 200           # seeded runs per case: seeds 0…199 of the lesson's monte_carlo_pi
PI_SHARE = 0.8          # the fraction of runs that must land within tol
PI_PREDICTED = 0.85     # the share a plan judged on paper must promise (z ≥ 1.44)


def _pi_runs(darts: int, runs: int) -> list[float]:
    """On the ranks of one world: the lesson's Monte Carlo π with seeds 0…runs−1."""
    from ddl_lab.welcome import monte_carlo_pi
    return [monte_carlo_pi(darts, seed)["pi"] for seed in range(runs)]


def _pi_case(rng: Any) -> dict[str, Any]:
    return _pi_limits(float(f"{rng.uniform(0.012, 0.03):.3g}"), float(rng.uniform(1.5, 3.5)))


def _pi_paper_case(rng: Any) -> dict[str, Any]:
    """Limits judged by their arithmetic only, far from the real runs': tol 0.002–0.1, a 90 %
    plan needing 1–2.6 ranks' worth of darts, a budget 1.5–3 × that (room for 95 % too)."""
    tol = float(f"{10 ** rng.uniform(-2.7, -1):.3g}")
    n90 = _pi_total(tol)
    return {"tol": tol, "per_rank_max": int(n90 / rng.uniform(1, 2.6)) + 1,
            "budget": math.ceil(n90 * rng.uniform(1.5, 3)) + PI_WORKERS}


def _pi_limits(tol: float, spread: float) -> dict[str, Any]:
    """A case whose 90 % plan needs ``spread`` ranks' worth of darts: per_rank_max is
    1/spread of it, and the budget three times what 80 % needs."""
    n90 = _pi_total(tol)
    return {"tol": tol, "per_rank_max": int(round(n90 / spread, -2)),
            "budget": int(round(3 * 1.2816 ** 2 * PI_VARIANCE / tol ** 2, -3))}


@task("welcome")
def pi_plan(my_pi_plan: Callable[[float, int, int], tuple[int, int]], seed: int = 0) -> None:
    """Lesson 00, task 4: ``my_pi_plan(tol, per_rank_max, budget)`` returns ``(workers,
    darts)`` — 1–4 workers, at most per_rank_max darts each, at most budget in all — and the
    lesson's ``monte_carlo_pi``, run for real on that many ranks with seeds 0…199, lands
    within tol of π in at least 80 % of the runs."""
    fixed = [_pi_limits(0.02, 2.0), _pi_limits(0.01, 2.5)]
    kinds = iter([_pi_case] + [_pi_paper_case] * 5)
    everything = Trial("pi_plan", my_pi_plan, seed, fixed, draws=6, name="my_pi_plan",
                       plan=True, draw=lambda rng: next(kinds)(rng), timeout=60.0)
    name = everything.name
    cases, paper = everything[:3], everything[3:]   # three run for real, five judged on paper
    limits = [(c.params["tol"], c.params["per_rank_max"], c.params["budget"]) for c in everything]
    outs = [everything.call(c, *args, where=f"tol = {args[0]:g}, per_rank_max = {args[1]:,}, "
                            f"budget = {args[2]:,}") for c, args in zip(everything, limits)]
    same = answers.same_for_all(outs)          # every plan first: one for all budgets is named
    plans = [_pi_valid_plan(name, out, c, same) for out, c in zip(outs, everything)]
    outcomes = everything.run(_pi_runs, [(w, (d, PI_RUNS)) for w, d in plans[:len(cases)]])
    report = []
    for case, (w, d), outcome in zip(cases, plans, outcomes):
        if outcome.failure is not None:
            fail(f"the workers failed running monte_carlo_pi({d}, seed) on {w} ranks: "
                 f"{outcome.failure.line} [{case}]")
        tol = case.params["tol"]
        within = sum(abs(e - math.pi) <= tol for e in outcome.results[0])
        if within < PI_SHARE * PI_RUNS:
            fail(_pi_short(name, w, d, within, tol, case))
        report.append(f"{w} × {d:,} darts: {within} of {PI_RUNS} within {tol:g}")
    for (w, d), case in zip(plans[len(cases):], paper):     # far from the real runs
        tol = case.params["tol"]
        se, z, share = _normal(w * d, tol)
        if share < PI_PREDICTED:
            fail(f"{name} planned {w} × {d:,} = {w * d:,} darts for tol = {tol:g}: a standard "
                 f"error of {se:.4g} = tol/{z:.2f}, so only about {100 * share:.0f} % of runs "
                 f"land within tol (at least {PI_PREDICTED:.0%} needed; aim for 90 %, "
                 f"tol/1.645).{same} [{case}]")
    passed("pi_plan", f"on real workers, seeds 0–{PI_RUNS - 1}: " + "; ".join(report)
           + f"; within the limits, and ≥ {PI_PREDICTED:.0%} of runs within tol by the normal "
           f"approximation, for {len(paper)} more drawn far from them (tol down to 0.002)")


def _pi_valid_plan(name: str, plan: Any, case: Any, same: str = "") -> tuple[int, int]:
    """The learner's (workers, darts) as ints, or a CheckFailed naming the broken limit."""
    p = case.params
    if not isinstance(plan, (tuple, list)) or len(plan) != 2:
        fail(returned_none(plan, name, "a pair (workers, darts)", "a pair (workers, darts)")
             + f" [{case}].")
    w, d = (answers.whole(v) for v in plan)
    if w is None or d is None or min(w, d) < 1:
        fail(f"{name} returned {tuple(plan)!r}; workers and darts must be whole numbers ≥ 1 "
             f"[{case}].")
    if w > PI_WORKERS:
        fail(f"{name} asked for {w} workers; the lesson's cluster has {PI_WORKERS}.{same} [{case}]")
    if w * d > p["budget"]:
        total = _pi_total(p["tol"])
        hint = (f" — that is about the total the plan needs ({total:,.0f}) on EVERY rank: "
                "the all_reduce pools the ranks' darts, so divide it among them"
                if w > 1 and abs(d - total) < 0.35 * total else
                ": a smaller standard error than tol needs is wasted darts")
        fail(f"{name} planned {w} × {d:,} = {w * d:,} darts, over the budget of "
             f"{p['budget']:,}{hint}.{same} [{case}]")
    if d > p["per_rank_max"]:
        short = (f" ({w} = ⌊{w * d:,}/{p['per_rank_max']:,}⌋ workers: rounding down is right "
                 "only when per_rank_max divides the darts — round the workers up)"
                 if w * d // p["per_rank_max"] == w and w < PI_WORKERS else "")
        fail(f"{name} asked for {d:,} darts per rank, but a rank can throw at most "
             f"per_rank_max = {p['per_rank_max']:,} in the time there is: share the darts "
             f"over more workers{short}.{same} [{case}]")
    return w, d


def _normal(darts: int, tol: float) -> tuple[float, float, float]:
    """The standard error of π from ``darts`` in all, tol in standard errors (z), and the
    share of runs a normal estimate lands within tol."""
    se = _standard_error(darts)
    return se, tol / se, math.erf(tol / se / math.sqrt(2))


def _pi_total(tol: float, z: float = 1.6449) -> float:
    """Darts in all for a standard error of tol/z (z = 1.645: 90 % of runs within tol)."""
    return z ** 2 * PI_VARIANCE / tol ** 2


def _pi_short(name: str, w: int, d: int, within: int, tol: float, case: Any) -> str:
    """The message for a plan whose runs landed within tol too rarely."""
    se, z, share = _normal(w * d, tol)
    hint = (" That is about the standard error you get from p(1 − p) without the factor "
            "16: the estimate is 4·hits/N, its variance π(4 − π)/N." if z < 0.45 else
            " A standard error equal to tol keeps only about 68 % of the runs within tol"
            " (one standard error each side)." if 0.9 <= z <= 1.1 else "")
    return (f"{name}'s plan, {w} × {d:,} = {w * d:,} darts, landed within {tol:g} of π in "
            f"{within} of {PI_RUNS} runs ({100 * within / PI_RUNS:.0f} %); at least "
            f"{PI_SHARE * PI_RUNS:.0f} must. Its standard error is √(π(4−π)/N) = {se:.4g} = "
            f"tol/{z:.2f}, and a normal estimate lands within {z:.2f} standard errors in "
            f"about {100 * share:.0f} % of runs.{hint} Aim for 90 % (tol/1.645) to leave a "
            f"margin for the luck of {PI_RUNS} runs [{case}].")
