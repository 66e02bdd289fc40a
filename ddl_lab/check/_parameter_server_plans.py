"""Lesson 07's reasoning and design checks (``check/parameter_server.py`` exports them): the
worst staleness a stale-synchronous gate admits, shown on a real shard driven through the
worst schedule; and a Downpour plan (n_fetch, n_push, lr) that reaches a target loss within a
budget of messages, run on real shard and replica processes."""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from . import _answers as answers
from ._core import call_local, fail, passed, stub_message, task
from ._diagnose import Cases, describe_value, returned_none

# seconds any wait of a real run may take: starting shard processes on a busy machine is slow,
# and only answers right on every local case get that far
REAL_TIMEOUT = 60.0


def real(fn: Callable, learner: Callable, *args: Any, **kwargs: Any) -> Any:
    """Run a real experiment with the learner's function inside shard processes; their
    failures become CheckFailed naming it."""
    from ddl_lab.parameter_server.errors import ParameterServerError
    name = getattr(learner, "__name__", "your function")
    try:
        return fn(learner, *args, **kwargs)
    except (ParameterServerError, TimeoutError) as e:
        text, stub = str(e), isinstance(e, ParameterServerError) and e.not_implemented
    if stub:
        fail(stub_message(learner))
    head, last = text.strip().splitlines()[0], text.strip().splitlines()[-1]
    fail(f"{name} failed inside a shard process: {head}" + (f"\n  {last}" if last != head else ""))


# ------------------------------------------------------------------ reasoning: worst staleness

def _worst(s: int, n: int) -> int:
    """The largest staleness SSP(s) admits with n replicas: each other replica may be s
    clocks behind at the pull and s + 1 ahead at the push, 2s + 1 pushes in between."""
    return (n - 1) * (2 * s + 1)


def _staleness_mistakes() -> dict[str, Callable[[int, int], float]]:
    return {
        "you let the other replicas start level with you: when your pull passes the gate they "
        "may be as many as s clocks BEHIND you (the gate bounds the lead over the slowest), and "
        "before you push they may run up to s + 1 clocks ahead — 2s + 1 pushes each, not s + 1":
            lambda s, n: (n - 1) * (s + 1),
        "one push short per replica: a replica exactly s clocks ahead of the slowest may still "
        "pull (the gate holds only MORE than s) and then push, so each other replica gets 2s + 1 "
        "pushes in, not 2s": lambda s, n: (n - 1) * 2 * s,
        "count only the OTHER replicas' pushes: your own gradient is the one being applied, not "
        "one it missed (n − 1 replicas, not n)": lambda s, n: n * (2 * s + 1),
        "every one of the other n − 1 replicas can push that often while you compute, not just "
        "one": lambda s, n: 2 * s + 1,
        "the bound s counts clocks of one replica, but the staleness counts the updates of all "
        "the other replicas: each of the n − 1 may push 2s + 1 times": lambda s, n: s,
        "that is the bound on the lead, s clocks per other replica; they can start s behind and "
        "end s + 1 ahead of your clock: 2s + 1 pushes each": lambda s, n: (n - 1) * s,
    }


_STALE_FIXED = [{"s": 0, "replicas": 1}, {"s": 0, "replicas": 2}, {"s": 0, "replicas": 4},
                {"s": 1, "replicas": 2}, {"s": 2, "replicas": 3}, {"s": 3, "replicas": 4},
                {"s": 5, "replicas": 2}]


def _stale_draw(rng: np.random.Generator) -> dict[str, Any]:
    return {"s": int(rng.integers(0, 9)), "replicas": int(rng.integers(1, 10))}


def _worst_schedule(s: int, n: int, timeout: float) -> int:
    """Drive a real SSP(s) shard through the worst schedule and return the staleness it
    measured for replica 0's push: replica 0 pushes s times alone, pulls at clock s; every
    other replica then pulls and pushes 2s + 1 times (clocks 0 … 2s); replica 0 pushes."""
    from ddl_lab.parameter_server.server import ParameterServer
    zero = np.zeros(4)
    with ParameterServer(zero, shards=1, rule="sgd", lr=0.1, mode="ssp", s=s,
                         timeout=timeout) as ps:
        clients = [ps.connect(f"replica {r}") for r in range(n)]
        for c in clients:
            c.join()

        def step(c: Any) -> None:
            c.push(zero, c.pull().versions)
            c.snapshot()                    # same connection: the push has been applied
        for _ in range(s):
            step(clients[0])
        mine = clients[0].pull()
        for _ in range(2 * s + 1):
            for c in clients[1:]:
                step(c)
        clients[0].push(zero, mine.versions)
        clients[0].snapshot()
        return int(ps.finish().staleness[-1])


@task("parameter_server")
def worst_staleness(my_worst_staleness: Callable[[int, int], int], seed: int = 0) -> None:
    """Lesson 07, reasoning: ``my_worst_staleness(s, replicas)`` is the largest staleness
    (updates applied between a replica's pull and its push) that SSP with bound s admits:
    (replicas − 1)·(2s + 1). A real shard, driven through the worst schedule, agrees."""
    name = getattr(my_worst_staleness, "__name__", "your function")
    cases = list(Cases("worst_staleness", seed, _STALE_FIXED, draws=4, draw=_stale_draw))
    got = []
    for case in cases:
        s, n = case.params["s"], case.params["replicas"]
        out = call_local(my_worst_staleness, s, n)
        if answers.whole(out) is None:
            fail(returned_none(out, name, "the staleness, a whole number of updates") or
                 f"{name}({s}, {n}) returned {describe_value(out)}; return a whole number of "
                 f"updates ({case}).")
        got.append(answers.whole(out))
    wrong = [(c, g) for c, g in zip(cases, got)
             if g != _worst(c.params["s"], c.params["replicas"])]
    if wrong:
        case, g = wrong[0]
        s, n = case.params["s"], case.params["replicas"]
        hint = next((h for h, f in _staleness_mistakes().items()
                     if all(f(c.params["s"], c.params["replicas"]) == v
                            for c, v in zip(cases, got))), None)
        fail(f"{name}(s={s}, replicas={n}) returned {g}, expected {_worst(s, n)}"
             + (f": {hint}." if hint else ".") + f" The worst schedule: replica 0 pushes {s} "
             f"time(s) alone and pulls at clock {s} (the others, at clock 0, are exactly s "
             f"behind); each other replica then pulls and pushes at clocks 0 … {2 * s} (the "
             f"last {s + 1} of them ahead of replica 0) before replica 0 pushes. ({case})")
    s, n = 2, 3
    measured = real(lambda _, *a: _worst_schedule(*a), my_worst_staleness, s, n, REAL_TIMEOUT)
    passed("worst_staleness", f"(replicas − 1)(2s + 1) on {len(cases)} cases (s = 0 to 8, 1 to "
           f"9 replicas); a real SSP(s={s}) shard with {n} replicas, driven through the worst "
           f"schedule, measured a staleness of {measured} for the last push")


# ------------------------------------------------------------------ design: a Downpour plan

PLAN_REPLICAS = 4
PLAN_TARGET = 0.5           # training loss the plan must reach
PLAN_CASES = [{"steps": 120, "budget": 120}, {"steps": 120, "budget": 60},
              {"steps": 120, "budget": 40}]          # the budgets the prompt's example names


def _budget_draw(rng: np.random.Generator, tight: bool = False) -> dict[str, Any]:
    """Steps and a budget the prompt never shows: steps/4 to 2·steps messages per replica,
    or (``tight``) steps/8 to steps/5 — tighter than any the prompt names."""
    steps = int(rng.choice([30, 45, 77, 150, 250, 401, 1000]))
    low, high = (math.ceil(steps / 8), math.ceil(steps / 5)) if tight else \
        (math.ceil(steps / 4), 2 * steps + 1)
    return {"steps": steps, "budget": int(rng.integers(low, high))}


def _real_draw(rng: np.random.Generator) -> dict[str, Any]:
    """A case run for real: 160 to 240 steps, a tight budget that rarely divides 2·steps."""
    steps = int(rng.choice([160, 200, 240]))
    return {"steps": steps, "budget": int(rng.integers(steps // 4, steps // 2))}


def _messages(steps: int, n_fetch: int, n_push: int) -> tuple[int, int]:
    """(pulls, pushes) of one replica: a pull at steps 0, n_fetch, …; a push every n_push
    steps and at the end."""
    return math.ceil(steps / n_fetch), math.ceil(steps / n_push)


def _plan(out: Any, name: str, case: Any) -> tuple[int, int, float]:
    """The learner's (n_fetch, n_push, lr), or a CheckFailed saying what is wrong."""
    if problem := answers.plan(out, name, {"n_fetch": "", "n_push": "", "lr": ""}, f" ({case})"):
        fail(problem)
    n_fetch, n_push, lr = answers.whole(out["n_fetch"]), answers.whole(out["n_push"]), out["lr"]
    if n_fetch is None or n_push is None or n_fetch < 1 or n_push < 1:
        fail(f"{name} chose n_fetch = {out['n_fetch']!r} and n_push = {out['n_push']!r}: both "
             f"are numbers of steps, whole numbers ≥ 1 ({case}).")
    lr = answers.scalar(lr)
    if lr is None or not 0 < lr < math.inf:
        fail(f"{name} chose lr = {describe_value(out['lr'])}: a learning rate is a positive "
             f"number ({case}).")
    return n_fetch, n_push, lr


def _ask(fn: Callable, name: str, case: Any, shown: bool) -> Any:
    """The learner's plan for one case; a plan that fails only for a budget the prompt does
    not show is named as a table of the prompt's budgets."""
    args = (case.params["steps"], case.params["budget"])
    return call_local(fn, *args) if shown else answers.plan_call(fn, args, name, str(case))


def _downpour(_: Callable, steps: int, n_fetch: int, n_push: int, lr: float) -> tuple:
    """One real asynchronous Downpour run with SGD on the shards: (final loss, pulls and
    pushes per replica, as the shards counted them)."""
    from ddl_lab.parameter_server.downpour import digits_problem, run
    r = run(digits_problem(example_cost=0.0), replicas=PLAN_REPLICAS, shards=2, mode="async",
            rule="sgd", lr=lr, n_fetch=n_fetch, n_push=n_push, steps=steps, batch=32,
            eval_every=0.5, timeout=REAL_TIMEOUT)
    shard = r.report.shards[0]
    return r.final_loss, shard["pulls"] / PLAN_REPLICAS, shard["pushes"] / PLAN_REPLICAS


@task("parameter_server")
def downpour_plan(my_downpour_plan: Callable[[int, int], dict], seed: int = 0) -> None:
    """Lesson 07, design: ``my_downpour_plan(steps, budget)`` returns {n_fetch, n_push, lr}
    for 4 asynchronous Downpour replicas of ``steps`` steps each, SGD on 2 shards, such that
    each replica sends at most ``budget`` messages (pulls + pushes) and the training loss
    ends at or below 0.5. The check asks for plans at budgets it draws (their messages
    counted) and runs the tightest prompt budget and one drawn one on real processes."""
    name = getattr(my_downpour_plan, "__name__", "your function")
    draws = iter([_budget_draw] * 6 + [lambda rng: _budget_draw(rng, tight=True)] * 2
                 + [_real_draw])                              # the last one runs for real
    cases = list(Cases("downpour_plan", seed, PLAN_CASES, draws=9,
                       draw=lambda rng: next(draws)(rng)))
    plans = [_plan(_ask(my_downpour_plan, name, c, i < len(PLAN_CASES)), name, c)
             for i, c in enumerate(cases)]
    for i, (case, (n_fetch, n_push, lr)) in enumerate(zip(cases, plans)):
        steps, budget = case.params["steps"], case.params["budget"]
        pulls, pushes = _messages(steps, n_fetch, n_push)
        if pulls + pushes > budget:
            fail(f"{_chose(name, case, n_fetch, n_push, lr)}: each replica sends ⌈steps/n_fetch⌉ "
                 f"+ ⌈steps/n_push⌉ = {pulls} + {pushes} = {pulls + pushes} messages, over "
                 f"the budget of {budget}"
                 + ("" if i < len(PLAN_CASES) else " (a budget the prompt does not show)")
                 + ". " + _over_budget_hint(steps, budget, n_fetch, n_push, plans) + f" ({case})")
    done = []
    for case, (n_fetch, n_push, lr) in ((cases[i], plans[i]) for i in (2, -1)):
        steps, budget = case.params["steps"], case.params["budget"]
        loss, pulls, pushes = real(_downpour, my_downpour_plan, steps, n_fetch, n_push, lr)
        chose = _chose(name, case, n_fetch, n_push, lr)
        if pulls + pushes > budget:
            fail(f"{chose}: on the real run each replica sent {pulls:g} pulls + {pushes:g} "
                 f"pushes = {pulls + pushes:g} messages, over the budget of {budget} ({case})")
        if not loss <= PLAN_TARGET:
            fail(f"{chose}: the training loss ended at {loss:.3g}, above the target "
                 f"{PLAN_TARGET:g}. " + _loss_hint(loss, lr, n_push)
                 + answers.same_for_all(plans) + f" ({case})")
        done.append(f"{steps} steps, {budget} messages: {pulls + pushes:g} sent, loss {loss:.2f}")
    steps = sorted({c.params["steps"] for c in cases})
    passed("downpour_plan", f"within budget on {len(cases)} (steps, budget) pairs ({steps[0]} to "
           f"{steps[-1]} steps, budgets of steps/8 to 2·steps messages); on real shards and 4 "
           f"replicas — {'; '.join(done)}")


def _chose(name: str, case: Any, n_fetch: int, n_push: int, lr: float) -> str:
    steps, budget = case.params["steps"], case.params["budget"]
    return f"{name}({steps}, {budget}) chose n_fetch = {n_fetch}, n_push = {n_push}, lr = {lr:g}"


def _over_budget_hint(steps: int, budget: int, n_fetch: int, n_push: int,
                      plans: list[tuple[int, int, float]]) -> str:
    pulls, pushes = _messages(steps, n_fetch, n_push)
    constant = len(set(plans)) == 1
    if n_fetch == n_push == (2 * steps) // budget and 2 * steps % budget:
        hint = (f"2·steps/budget = {2 * steps / budget:.4g} was rounded DOWN to {n_fetch}: when "
                "the budget does not divide 2·steps, the shorter interval sends too many "
                "messages — round the interval up.")
    elif n_fetch == n_push == math.ceil(2 * steps / budget) and budget % 2:
        hint = (f"With an odd budget ({budget}) the pulls and the pushes cannot each have half "
                "of it: equal intervals send an even number of messages, ⌈steps/k⌉ of each.")
    elif pulls >= budget > pushes:
        hint = (f"Fetching every {n_fetch} step(s) alone costs {pulls} pulls: fetch less "
                "often too — a fetch is a message as much as a push is.")
    elif math.ceil(steps / budget) in (n_fetch, n_push):        # only one kind budgeted
        hint = ("Pulls count as well as pushes: with n steps between them, a replica sends "
                "steps/n_fetch + steps/n_push messages.")
    else:
        hint = "" if constant else "Choose larger intervals."
    return hint + answers.same_for_all(plans)


def _loss_hint(loss: float, lr: float, n_push: int) -> str:
    step = n_push * lr
    if not np.isfinite(loss) or loss > 2.0 or step > 0.6:
        return (("The run diverged" if not np.isfinite(loss) or loss > 2.0 else
                 "The run was unstable") + f": a push carries the SUM of the {n_push} gradients "
                f"computed since the last one, so the shards step {n_push} × lr = {step:.3g} at "
                "once — scale lr down as n_push grows.")
    return ("The run was stable but did not get far enough: the budget allows more messages, "
            "or a larger step per push (lr·n_push), without diverging.")
