"""Checks for lesson 15, the capstone: the bytes a local-SGD plan puts on the wire (reasoning); a
training plan run on 4 real workers through the capstone's meter, judged on its budget (design)."""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, Callable

import numpy as np

from ddl_lab.runtime.costs import sent_bytes
from ddl_lab.capstone.budget import BUDGET, Budget, size_text
from ddl_lab.capstone.meter import PlanFailed, Result, fp32_allreduce_bytes, measure
from ._answers import scalar, whole
from ._core import fail, passed, run_beside, task, worded
from ._diagnose import Case, Cases, apart, as_array, explain, returned_none, same
from ._trial import Trial

__all__ = ["budget_bytes", "capstone", "capstone_gpt"]

_PACKAGE = "ddl_lab.capstone"

# ----------------------------------------------------------------- task 1: the arithmetic

_BYTES_FIXED = [{"params": 9930, "workers": 4, "steps": 150, "period": 4, "value_bytes": 4},
                {"params": 9930, "workers": 4, "steps": 150, "period": 30, "value_bytes": 2},
                {"params": 1000, "workers": 1, "steps": 10, "period": 2, "value_bytes": 4},
                {"params": 5000, "workers": 3, "steps": 5, "period": 8, "value_bytes": 4}]


def _plan_bytes(params: int, workers: int, steps: int, period: int, value_bytes: int,
                rounds: Callable[[float], float] = math.ceil, share: float | None = None) -> float:
    """ceil(steps/period) averagings, each an allreduce of params·value_bytes bytes that the
    ring charges 2(n−1)/n of (``rounds`` and ``share`` make the named mistakes)."""
    share = sent_bytes("all_reduce", workers, 1) if share is None else share
    return rounds(steps / period) * share * params * value_bytes


def _bytes_mistakes(p: dict[str, Any]) -> dict[str, float]:
    n, S = p["workers"], p["params"] * p["value_bytes"]
    ring = _plan_bytes(**p)
    return {
        "you counted ⌊steps/period⌋ averagings: when steps is not a multiple of the period "
        "the plan averages once more after its last step, so that the workers end with one "
        "model — ⌈steps/period⌉ allreduces":
            _plan_bytes(**p, rounds=math.floor),
        "you counted the whole tensor in each of the ring's 2(n−1) steps: each step carries "
        "one chunk of S/n, so an allreduce costs a worker 2(n−1)/n·S, not 2(n−1)·S":
            _plan_bytes(**p, share=2 * (n - 1)),
        "you charged S per allreduce: in the ring each worker sends 2(n−1)/n·S (lesson 06) — "
        "share-reduce and share-only each move (n−1)/n·S":
            _plan_bytes(**p, share=1.0),
        "you charged 2S per allreduce: that is the ring's bound for large n; it sends "
        "2(n−1)/n·S (lesson 06)":
            _plan_bytes(**p, share=2.0),
        "you charged (n−1)·S per averaging: that is every worker sending its whole model to "
        "every other (an all-gather); the ring allreduce sends 2(n−1)/n·S":
            _plan_bytes(**p, share=float(n - 1)),
        "you summed over all the workers: the budget is per worker": n * ring,
        "your answer is in bits: count bytes (value_bytes is already bytes per value)": 8 * ring,
        "you averaged at every step: the plan averages once every `period` steps":
            p["steps"] * sent_bytes("all_reduce", n, S),
        "you used 4 bytes per value whatever value_bytes says (2 for fp16, 8 for fp64)":
            _plan_bytes(**{**p, "value_bytes": 4}),
    }


@task("capstone", refuses=(_PACKAGE, "fp32_allreduce_bytes"))
def budget_bytes(my_budget_bytes: Callable, seed: int = 0) -> None:
    """Lesson 15, task 1: ``my_budget_bytes(params, workers, steps, period, value_bytes)``
    returns the bytes each worker sends when local SGD averages the whole model with a ring
    allreduce every ``period`` steps (and after the last step), each parameter
    ``value_bytes`` bytes on the wire: ⌈steps/period⌉ · 2(n−1)/n · params · value_bytes,
    compared at the tolerance of the answer's dtype (a count rounded to whole bytes is
    right too)."""
    trial = Trial("budget_bytes", my_budget_bytes, seed, _BYTES_FIXED, draws=4, draw=lambda rng: {
        "params": int(rng.integers(1_000, 10_000_000)), "workers": int(rng.integers(2, 9)),
        "steps": int(rng.integers(1, 500)), "period": int(rng.integers(1, 41)),
        "value_bytes": int(rng.choice([1, 2, 4, 8]))})
    got = [trial.call(case, *case.params.values()) for case in trial]
    for case, value in zip(trial, got):
        trial.judge(_bytes_fault(value, case, trial, got, trial.name))
    p = dict(_BYTES_FIXED[0])
    every4 = _plan_bytes(**p)
    fits = next(h for h in range(1, p["steps"] + 1)
                if _plan_bytes(**{**p, "period": h}) <= BUDGET.bytes)
    trial.passed(f"right on {len(trial)} cases (1 to 8 workers, periods longer than the run, "
                 f"1- to 8-byte values). On the capstone's 4 workers, averaging the fp32 CNN "
                 f"every 4 steps sends {size_text(every4)} per worker — "
                 f"{every4 / BUDGET.bytes:.1f}× the {size_text(BUDGET.bytes)} budget; fp32 "
                 f"averaging alone fits only with a period of {fits} steps or more.")


def _typed(x: Any) -> np.ndarray:
    """A scalar answer as a 0-d array of its own dtype (float32 stays float32)."""
    return as_array(x).reshape(())


def _bytes_fault(got: Any, case: Case, cases: list[Case], answers: list[Any],
                 name: str) -> str | None:
    """None if ``got`` is right for ``case``; else the message, quoting the case, naming the
    mistake that explains the learner's answers to every case (several can agree on one case:
    at n = 4, (n−1)·S in fp16 is 2(n−1)/n·S in fp32)."""
    value, want = scalar(got), _plan_bytes(**case.params)
    if value is None:
        return returned_none(got, name, "the number of bytes", "one number of bytes") + f" ({case})"
    if same(want, _typed(got)) or (whole(got) is not None and abs(value - want) < 1):
        return None                        # at the learner's dtype, or in whole bytes

    def explains(message: str) -> bool:
        return all(scalar(v) is not None and same(_bytes_mistakes(c.params)[message], _typed(v))
                   for c, v in zip(cases, answers))
    here = _bytes_mistakes(case.params)
    hint = next((m for m in here if explains(m)), None) or explain(_typed(got), here)
    shown, wanted = apart(value, want, ",")
    return (f"{name} returned {shown} bytes, expected {wanted}"
            + (f" — {hint}" if hint else ": ⌈steps/period⌉ allreduces of params·value_bytes "
               "bytes, each charged 2(n−1)/n of it") + f" ({case})")


# ----------------------------------------------------------------- task 2: the capstone

_TIMEOUT_S = 120.0


@task("capstone")
def capstone(my_plan: Callable, seed: int = 0, parameter_server: dict | None = None) -> None:
    """Lesson 15, task 2: ``my_plan(model, batches, wire)`` trains the digits CNN on each of
    4 workers and returns the model; run for real and judged against ``BUDGET``: test
    accuracy, bytes per worker counted by the meter, one model on every worker, steps and
    time, each worker learning from its own shard only, no channel past the meter.
    ``parameter_server``: the options of the lesson-07 server a plan uses."""
    fn, name, budget = my_plan, getattr(my_plan, "__name__", "your plan"), BUDGET
    # the run's seed (shards, initial weights, batch order), drawn from the check's ``seed``:
    # never 0, the one ``measure`` tries by default
    run = next(iter(Cases("capstone", seed, draws=1, draw=lambda rng: {
        "run": int(rng.integers(1, 10_000))}))).params["run"]
    result = run_beside(_measured, fn, name, budget, run, parameter_server)
    if message := _run_fault(result, name, budget):
        fail(f"{message}\nWhat the run achieved: {result.summary()} (shards, initial weights "
             f"and batch order of measure(..., seed={run}); replay: check.capstone(…, "
             f"seed={seed})).")
    plain = result.steps * fp32_allreduce_bytes(result.world_size)
    passed("capstone", f"{result.world_size} workers, {100 * result.accuracy:.1f}% test "
           f"accuracy (target ≥ {100 * budget.target:.0f}%), {size_text(result.bytes)} sent per "
           f"worker (budget {size_text(budget.bytes)}; plain synchronous SGD would send "
           f"{size_text(plain)}, {plain / max(result.bytes, 1):.0f}× more), {result.steps} of "
           f"{budget.steps} steps, {result.rounds} communication calls, {result.wall:.1f} s.")


def _measured(fn: Callable, name: str, budget: Budget, run: int,
              parameter_server: dict | None) -> Result:
    """The plan's real run, measured where the learner's code runs (``run_beside``)."""
    try:
        return measure(fn, budget, seed=run, parameter_server=parameter_server, timeout=_TIMEOUT_S)
    except PlanFailed as e:
        fail(worded(e.failure, fn).message(name, budget.world_size))
    except (TypeError, ValueError) as e:
        if parameter_server is None:
            raise
        fail(f"the parameter server could not start with {parameter_server!r}: {e}")


def _run_fault(r: Result, name: str, budget: Budget) -> str | None:
    """The first thing that disqualifies the run, else what misses the budget, else None."""
    if rep := next((x for x in r.reports if x.tampered is not None), None):
        return (f"{name} changed the meter's own count: on rank {rep.rank} it reads "
                f"{size_text(rep.sent)}, but {size_text(rep.tampered)} went out through the "
                "meter. Bytes are counted by the meter where they leave each worker; a plan "
                "does not touch the meter's records (wire._tap, the group's tap).")
    if (said := next((x.reported for x in r.reports if x.reported is not None), None)) is not None:
        return (f"{name} returned a number ({said:,.6g}) beside its model, as if reporting "
                f"a byte count: bytes are counted by the meter where they leave each worker "
                f"(it counted {size_text(r.bytes)} on the busiest), never reported by the plan "
                "— return the model alone.")
    if rep := next((x for x in r.reports if x.params is None), None):
        return (f"{name} returned {rep.returned} on rank {rep.rank}: return the trained model "
                "(the nn.Module you were given, or its DDP wrapper).")
    if r.steps == 0:
        return (f"{name} drew no mini-batch from `batches`: the model was never trained "
                f"({100 * r.accuracy:.0f}% is guessing). Loop `for X, y in batches:`.")
    if r.spread > 1e-5 * max(1.0, float(np.abs(r.reports[0].params).max())):
        return _disagree(r, name)
    silent = (f"the {r.world_size} workers ended with the same model without sending a "
              "byte: they cannot have trained on their own shards")
    if past := (_past_the_shard(r, name, silent if r.bytes == 0 else "")
                or _past_the_meter(r, name)):
        return past
    if r.bytes == 0 and r.world_size > 1:
        return (f"{silent}. Train each worker on its `batches`, and combine what they "
                "learned over the wire.")
    misses = []
    if r.bytes > budget.bytes:
        misses.append(_over_bytes(r, name, budget))
    if r.accuracy < budget.target:
        misses.append(_too_inaccurate(r, budget))
    if r.wall > budget.seconds:
        misses.append(f"the slowest worker took {r.wall:.1f} s, over the (generous) "
                      f"{budget.seconds:g} s: look for work repeated at every step — "
                      "encoding the whole model, evaluating, printing")
    return "\n".join(f"• {m}" for m in misses) or None


def _past_the_shard(r: Result, name: str, opening: str) -> str | None:
    """The message for workers whose models ran on other workers' examples, else None."""
    bad = [rep for rep in r.reports if rep.foreign]
    if not bad:
        return None
    who = ("every worker's model" if len(bad) == len(r.reports)
           else f"the model of {_ranks({rep.rank for rep in bad})}")
    rep = bad[0]
    read = sorted({t.what for t in rep.touched if t.kind == "read"})
    loaded = f" (rank {rep.rank} read {_paths(read)})" if read else ""
    return ((opening + " — " if opening else "")
            + f"{who} ran on training examples outside its own shard: rank {rep.rank}'s "
            f"on {rep.foreign:,} examples of other workers' shards{loaded}, beside {rep.own:,} "
            f"of its own (its `batches` handed out {rep.handed:,} of {rep.shard:,}). {name} "
            "trained on data the worker was not given — the whole training set, loaded by the "
            "plan itself. Each worker learns from its own `batches` only; what the others "
            "learnt must reach it over the wire.")


def _paths(paths: list[str], most: int = 3) -> str:
    return ", ".join(paths[:most]) + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _ranks(ranks: set[int]) -> str:
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, sorted(ranks)))


def _past_the_meter(r: Result, name: str) -> str | None:
    """The message for files, shared memory or sockets the workers used, else None."""
    by: dict[tuple[str, str], set[int]] = {}
    for rep in r.reports:
        for t in rep.touched:
            by.setdefault((t.kind, t.what), set()).add(rep.rank)
    if not by:
        return None
    shm = sorted({w for (k, w) in by if k == "mapped" and w.startswith("/dev/shm/")})
    sockets = sorted({w for (k, w) in by if k == "socket"})
    files = sorted({w for (k, w) in by if k != "socket" and w not in shm})
    what = []
    if shm:
        what.append(f"shared memory ({_paths(shm)}, mapped by "
                    f"{_ranks(set().union(*(by[k] for k in by if k[1] in shm)))})")
    if files:
        did = "; ".join(path + " " + ", ".join(f"{kind} by {_ranks(ranks)}" for (kind, p), ranks
                                               in sorted(by.items()) if p == path)
                        for path in files[:3])
        more = f"; and {len(files) - 3} more" if len(files) > 3 else ""
        what.append(f"files ({did}{more})")
    if sockets:
        what.append(f"sockets ({_paths(sockets)})")
    return (f"{name} passed data past the meter, through " + " and ".join(what) + ": the "
            f"meter counted {size_text(r.bytes)} per worker, but not what went that way. "
            "Every byte between workers must go over the metered wire (wire.*, dist.* on the "
            "default group, DDP): a plan opens no files, shared memory or sockets.")


def _disagree(r: Result, name: str) -> str:
    accs = ", ".join(f"{100 * a:.0f}%" for a in r.accuracies)
    worst = max(r.reports, key=lambda rep: float(np.abs(rep.params - r.reports[0].params).max()))
    if r.bytes == 0:
        return (f"{name} never communicated (0 bytes on the wire) and the {r.world_size} "
                f"workers ended with {r.world_size} different models (accuracy per worker: "
                f"{accs}). Each shard holds mostly a few digits, so no worker alone learns "
                "them all: combine the workers' work — allreduce, all_gather_bytes, DDP — at "
                "the very least at the end.")
    return (f"the workers' models differ at the end (rank {worst.rank} by up to "
            f"{r.spread:.3g}; accuracy per worker: {accs}) although {name} sent "
            f"{size_text(r.bytes)}: local steps after the last exchange, or workers that apply "
            "different updates. A data-parallel run ends with one model on every worker: end "
            "with an exchange that leaves them identical.")


def _over_bytes(r: Result, name: str, budget: Budget) -> str:
    rep = max(r.reports, key=lambda x: x.sent)
    (op, size), calls = max(rep.sizes.items(), key=lambda kv: kv[0][1] * kv[1])
    factor = rep.by_op[op] / sum(s * c for (o, s), c in rep.sizes.items() if o == op)
    params = len(rep.params)
    what = {4 * params: " (the whole model in fp32)", 2 * params: " (the whole model in fp16)"
            }.get(size, "")
    often = ("one every step" if calls >= r.steps else f"one every {r.steps / calls:.1f} steps")
    return (f"{name} sent {size_text(r.bytes)} per worker, {r.bytes / budget.bytes:.1f}× the "
            f"{size_text(budget.bytes)} budget. Most of it: {calls} {op} calls of {size:,} B"
            f"{what}, {often}, charged {size_text(factor * size)} each. Send "
            "less: compress what goes on the wire (top-k or 1-bit with error feedback, lesson "
            "08), exchange less often (local SGD, lesson 05), or both.")


def _too_inaccurate(r: Result, budget: Budget) -> str:
    exchanges = Counter()               # calls that carried more than a length (> 8 B)
    for (op, size), calls in r.reports[0].sizes.items():
        exchanges[op] += calls if size > 8 else 0
    every = r.steps / max(max(exchanges.values(), default=1), 1)
    why = ([f"it drew only {r.steps} of its {budget.steps} mini-batches"]
           if r.steps < budget.steps else [])
    if every >= 4:
        why.append(f"it exchanged about once every {every:.0f} steps, and on these skewed "
                   "shards each worker's model drifts towards its own digits in between")
    if "all_gather" in r.reports[0].calls:
        why.append("a compressor that drops most of each update must keep what it drops (error "
                   "feedback) to send it later")
    why.append("check the rate too (0.3 suits this CNN)")
    return (f"the model reached {100 * r.accuracy:.1f}% on the held-out digits, below the "
            f"{100 * budget.target:.0f}% target: " + "; ".join(why))


# ----------------------------------------------------------------- task 3: the transformer

@task("capstone")
def capstone_gpt(my_plan: Callable, seed: int = 0) -> None:
    """Lesson 15, task 3: ``my_plan(model, batches, wire)`` trains the course's transformer
    on 4 ranks and returns it whole; run for real and judged against ``transformer.BRIEF``:
    held-out loss, each rank's peak memory, bytes per step, steps and time, one model on
    every rank, text only from the mini-batches handed out, no channel past the meter. The
    figures go to the class leaderboard (``ddl-lab grade``) whatever the verdict."""
    from ddl_lab.capstone.transformer import BRIEF, measure_gpt
    name = getattr(my_plan, "__name__", "your plan")
    run = next(iter(Cases("capstone_gpt", seed, draws=1, draw=lambda rng: {
        "run": int(rng.integers(1, 10_000))}))).params["run"]

    def measured(fn: Callable) -> Any:
        try:
            return measure_gpt(fn, BRIEF, seed=run, timeout=_TIMEOUT_S * 3)
        except PlanFailed as e:
            fail(worded(e.failure, fn).message(name, BRIEF.world_size))
    result = run_beside(measured, my_plan)
    figures = None if math.isinf(result.loss) else result.figures(name)
    if message := _gpt_fault(result, name):
        if figures is not None:             # disqualified or short: listed, never ranked
            figures["within"] = False
        fail(f"{message}\nWhat the run achieved: {result.summary()} (replay: "
             f"check.capstone_gpt(…, seed={seed})).", figures)
    passed("capstone_gpt", f"{result.summary()}. Your place on the class leaderboard is "
           f"decided by the wall time, {result.wall:.1f} s here.", figures)


def _gpt_fault(r: Any, name: str) -> str | None:
    """What disqualifies or misses in a transformer run, else None."""
    if rep := next((x for x in r.reports if x.tampered is not None), None):
        return (f"{name} changed the meter's own count: on rank {rep.rank} it reads "
                f"{size_text(rep.sent)}, but {size_text(rep.tampered)} went out through the "
                "meter. A plan does not touch the meter's records (wire._tap).")
    if rep := next((x for x in r.reports if x.params is None), None):
        return (f"{name} returned {rep.returned} on rank {rep.rank}: return the whole "
                "trained GPT (the model you were given, its parameters gathered back).")
    if r.steps == 0:
        return f"{name} drew no mini-batch from `batches`: the model was never trained."
    if r.spread > 1e-4:
        return (f"the ranks' models differ at the end (by up to {r.spread:.3g}): every rank "
                "must end with the same whole model — gather what each rank trained.")
    if r.unhanded:
        return (f"{name}'s modules ran on {r.unhanded:,} rows of text that no rank's "
                "`batches` handed out: the plan fetched text itself (the corpus, the "
                "held-out text). The step budget is the text it may learn from.")
    if past := _past_the_meter(r, name):
        return past
    return "\n".join(f"• {m}" for m in r.shortfalls()) or None
