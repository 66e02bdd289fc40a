"""Checks for lesson 05 (synchronous data parallelism): one synchronous SGD step, local SGD,
the time of local SGD with a straggler, and a plan of averaging steps.

The first two run the learner's function on real workers, on seeded cases (world sizes 2–5,
random learning rates, averaging periods and batch sizes, a small linear regression whose
replicas see different data) and compare every rank's parameters with a single-process
float64 simulation of all replicas. When they differ, simulations of the usual mistakes (no
allreduce, no division by R, averaging at the wrong steps, …) name the mistake. The
straggler's time is a formula tried on seeded cases; the averaging plan is trained on real
workers with the lesson's engine (non-IID digits) and judged by accuracy and allreduces.
The noise-scale reasoning task (large batches) lives in ``_data_parallel_batches.py``.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ddl_lab.runtime.worlds import Outcome, WorldFailed

from . import _data_parallel_plans as plans
from ._data_parallel_batches import noise_scale
from ._core import CheckFailed, call_local, fail, passed, run_cases, task
from ._diagnose import (Case, Cases, describe_value, differs, explain, factor_of,
                        only_right_for, same)
from ._answers import FUNCTION_OF_INPUTS, plan_call, same_for_all
from ._formula import formula_cases

__all__ = ["sync_sgd_step", "local_sgd", "straggler_time", "sync_plan", "noise_scale"]

_RTOL = 2e-4                     # float32 workers against a float64 simulation


# ------------------------------------------------------------- the model and the data

def _watched_model(d: int, theta: np.ndarray):
    """Worker: the linear model y = x·w + b with parameters ``theta`` (float32), whose
    ``parameters()`` remembers being iterated again after it ran out."""
    import torch

    class Once:
        def __init__(self, it, owner):
            self.it, self.owner, self.done = it, owner, False

        def __iter__(self):
            if self.done:
                self.owner.flags.add("spent")
            return self

        def __next__(self):
            try:
                return next(self.it)
            except StopIteration:
                self.done = True
                raise

    class Linear(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(d, 1)
            self.flags: set[str] = set()

        def parameters(self, recurse: bool = True):
            return Once(super().parameters(recurse), self)

        def forward(self, x):
            return self.linear(x).squeeze(-1)

    model = Linear()
    with torch.no_grad():
        model.linear.weight.copy_(torch.as_tensor(theta[:d]).reshape(1, d))
        model.linear.bias.copy_(torch.as_tensor(theta[d:]))
    return model


def _mse(out, y):
    return 0.5 * ((out - y) ** 2).mean()


def _flat(model) -> np.ndarray:
    return np.concatenate([model.linear.weight.detach().double().numpy().ravel(),
                           model.linear.bias.detach().double().numpy().ravel()])


def _draw_batches(rng: np.random.Generator, n: int, steps: int, d: int
                  ) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """Per rank, ``steps`` minibatches (X, y) as float32: different data on every rank,
    batch sizes 1–9, values far from 0 and 1."""
    w = rng.normal(size=d) * 2
    out = []
    for r in range(n):
        batches = []
        for _ in range(steps):
            b = int(rng.integers(1, 10))
            X = (rng.normal(size=(b, d)) * 1.5 + 0.7 * r).astype(np.float32)
            y = (X @ w + rng.normal(size=b) + r - 0.5).astype(np.float32)
            batches.append((X, y))
        out.append(batches)
    return out


def _grad(theta: np.ndarray, X: np.ndarray, y: np.ndarray, d: int) -> np.ndarray:
    """∇ of ½·mean((X·w + b − y)²) at theta = (w, b), float64."""
    X, y = X.astype(np.float64), y.astype(np.float64)
    r = X @ theta[:d] + theta[d] - y
    return np.concatenate([X.T @ r / len(y), [r.mean()]])


def _loss(theta: np.ndarray, X: np.ndarray, y: np.ndarray, d: int) -> float:
    X, y = X.astype(np.float64), y.astype(np.float64)
    return float(0.5 * np.mean((X @ theta[:d] + theta[d] - y) ** 2))


def _draw(rng: np.random.Generator, H: bool = False) -> dict[str, Any]:
    p = {"n": int(rng.integers(2, 6)), "d": int(rng.integers(1, 6)),
         "lr": round(float(rng.uniform(0.02, 0.3)), 3)}
    if H:
        p["H"] = int(rng.integers(1, 6))
        p["steps"] = int(rng.integers(p["H"], 3 * p["H"] + 2))
    return p


def _run(body: Callable, fn: Callable, name: str, cases: list[Case], args: list[tuple],
         timeout: float) -> list[Outcome]:
    """Run every case on workers (``args``: each case's arguments after ``fn``)."""
    try:
        return run_cases(body, [(c.params["n"], (fn, *a)) for c, a in zip(cases, args)],
                         fn=fn, timeout=timeout)
    except WorldFailed as e:
        fail(e.failure.message(name, 0))


def _case_failed(outcome: Outcome, name: str, case: Case, right: list[str]) -> None:
    """Fail with the learner's error in this case, if it raised."""
    f, n = outcome.failure, case.params["n"]
    if f is not None:
        fail(f.message(name, n) + ("" if f.kind == "stub" else f" ({case})"
                                   + only_right_for(right, f"{n} ranks")))


# ------------------------------------------------------------- synchronous step

def _sync_case(fn: Callable, d: int, theta: np.ndarray, batches: list, lr: float) -> dict:
    """Worker: the learner's steps on this rank's batches; what each did."""
    import torch
    import torch.distributed as dist
    model = _watched_model(d, theta)
    out: dict[str, Any] = {"params": [], "returned": [], "changed": [], "grads_zero": []}
    for X, y in batches[dist.get_rank()]:
        X, y = torch.from_numpy(X.copy()), torch.from_numpy(y.copy())
        X0, y0 = X.clone(), y.clone()
        ret = fn(model, _mse, X, y, lr)
        out["params"].append(_flat(model))
        out["returned"].append(_portable(ret))
        out["changed"].append([k for k, a, b in (("X", X, X0), ("y", y, y0))
                               if not torch.equal(a, b)])
        grads = [p.grad for p in model.linear.parameters()]
        out["grads_zero"].append(all(g is None or not g.any() for g in grads))
    out["spent"] = "spent" in model.flags
    return out


def _portable(x: Any) -> Any:
    """A returned value as something the parent can judge: a float, or its description."""
    try:
        if x is not None and getattr(x, "ndim", 0) == 0 and not isinstance(x, (str, bool)):
            return float(x)
    except (TypeError, ValueError, RuntimeError):
        pass
    return ("desc", describe_value(x))


def _sync_reference(theta: np.ndarray, batches: list, lr: float, d: int
                    ) -> tuple[list[np.ndarray], list[list[float]]]:
    """The parameters after each step, and each rank's loss before each step."""
    n, params, losses = len(batches), [], []
    for t in range(len(batches[0])):
        losses.append([_loss(theta, *batches[r][t], d) for r in range(n)])
        theta = theta - lr * np.mean([_grad(theta, *batches[r][t], d) for r in range(n)], axis=0)
        params.append(theta)
    return params, losses


@task("data_parallel", refuses=("ddl_lab.data_parallel", "sync_sgd_step", "_sync_sgd_step",
                                "sync_sgd"))
def sync_sgd_step(my_sync_sgd_step: Callable, seed: int = 0, timeout: float = 60.0) -> None:
    """Lesson 05, task 1: ``my_sync_sgd_step(model, loss_fn, X, y, lr)`` takes one step of
    synchronous SGD — local gradient, allreduce (sum), W ← W − lr·ΔW/R — updating the model
    in place, and returns this rank's loss."""
    name = getattr(my_sync_sgd_step, "__name__", "your function")
    cases = list(Cases("sync_sgd_step", seed, [
        {"n": 3, "d": 4, "lr": 0.1}, {"n": 2, "d": 1, "lr": 0.07}, {"n": 5, "d": 3, "lr": 0.17}],
        draws=2, draw=_draw))
    data = []
    for case in cases:
        n, d = case.params["n"], case.params["d"]
        theta = case.rng.normal(size=d + 1).astype(np.float32).astype(np.float64)
        data.append((d, theta, _draw_batches(case.rng, n, 3, d), case.params["lr"]))
    outcomes = _run(_sync_case, my_sync_sgd_step, name, cases, data, timeout)
    right: list[str] = []
    for case, (d, theta, batches, lr), outcome in zip(cases, data, outcomes):
        _case_failed(outcome, name, case, right)
        want, losses = _sync_reference(theta, batches, lr, d)
        message = _sync_fault(outcome.results, want, losses, theta, batches, case, name, right)
        if message:
            fail(f"{message} ({case})")
        right.append(f"{case.params['n']} ranks")
    passed("sync_sgd_step", f"{len(cases)} cases (2–5 ranks, random lr, batch sizes 1–9), "
           "3 steps each: every rank's parameters match one process averaging all the ranks' "
           "gradients, and each step returned its rank's loss")


def _sync_fault(got: list[dict], want: list[np.ndarray], losses: list[list[float]],
                theta: np.ndarray, batches: list, case: Case, name: str,
                right: list[str]) -> str | None:
    """What is wrong with the ranks' steps, in words; None if nothing (``right``: the world
    sizes that worked, named when nothing else explains a difference)."""
    n, d, lr = (case.params[k] for k in ("n", "d", "lr"))
    for r, g in enumerate(got):
        for changed in g["changed"]:
            if changed:
                return (f"{name} changed its input {' and '.join(changed)} in place on rank {r}: "
                        "the minibatch must stay as it was; only the model's parameters change.")
    first = [g["params"][0] for g in got]
    step_want = want[0] - theta
    if all(same(theta, p, _RTOL, scale=np.abs(step_want).max()) for p in first):
        if any(g["spent"] for g in got):
            return (f"the parameters did not change: {name} iterated model.parameters() a "
                    "second time after a first loop had used it up. parameters() returns a "
                    "generator, which is empty the second time: call model.parameters() again "
                    "for each loop (or keep list(model.parameters())).")
        if all(g["grads_zero"][0] for g in got):
            return ("the parameters did not change, and the gradients were zero after your "
                    "step: zero the gradients BEFORE loss.backward(), not between backward() "
                    "and the update.")
        return ("the parameters did not change: update them in place, e.g. `p -= lr * p.grad` "
                "for each parameter inside `with torch.no_grad():` (`p = p - …` only rebinds "
                "the loop variable).")
    for r in range(1, n):
        if not same(first[0], first[r], _RTOL):
            own = theta - lr * _grad(theta, *batches[r][0], d)
            if same(own, first[r], _RTOL):
                return (f"after one step rank 0 and rank {r} hold different parameters: each rank "
                        "stepped with its own gradient. Sum the gradients of all ranks with "
                        "dist.all_reduce before the update, so every replica takes the same step.")
            return (f"after one step rank 0 and rank {r} hold different parameters "
                    f"({differs(first[0], first[r])}): every replica must take the same step."
                    + only_right_for(right, f"{n} ranks"))
    diff = differs(want[0], first[0], _RTOL)
    if diff:
        return _step_fault(first[0] - theta, step_want, want[0], first[0], case, right)
    for t in (1, 2):
        for r in range(n):
            diff = differs(want[t], got[r]["params"][t], _RTOL)
            if diff:
                return (f"the first step is right but step {t + 1} is not (rank {r}: {diff}). "
                        "Did you zero the gradients before backward()? .grad accumulates across "
                        "calls: call model.zero_grad() at the start of each step.")
    for r in range(n):
        for t, ret in enumerate(got[r]["returned"]):
            fault = _loss_fault(ret, losses[t], r, t, want, batches, d, name)
            if fault:
                return fault
    return None


def _step_fault(step_got: np.ndarray, step_want: np.ndarray, want: np.ndarray,
                got: np.ndarray, case: Case, right: list[str]) -> str:
    n, lr = case.params["n"], case.params["lr"]
    c = factor_of(step_want, step_got, _RTOL)
    if c is not None:
        if np.isclose(c, n, rtol=1e-3):
            return (f"your step is {n}× too large: dist.all_reduce SUMS the {n} gradients; "
                    f"divide by the world size R = {n} to get their mean (ΔW/R)")
        if np.isclose(c, -1, rtol=1e-3):
            return "your step goes uphill: the update is W ← W − lr·ΔW/R (minus)"
        for const in (0.1, 0.01, 0.05, 0.001, 1.0):
            if np.isclose(c * lr, const, rtol=1e-3):
                return (f"your step uses the learning rate {const:g}, not the lr passed in "
                        f"(lr = {lr:g})")
        k = n / c
        if abs(k - round(k)) < 1e-3 and round(k) > 0:
            return (f"your step is divided by {round(k)}, not by the world size R = {n}: use "
                    "dist.get_world_size(), not a constant")
        return (f"your step is {c:.4g} × the expected one, W ← W − lr·ΔW/R."
                + only_right_for(right, f"{n} ranks"))
    return (f"after one step on {n} ranks, parameter {differs(want, got, _RTOL)}: expected "
            "W − lr·(mean of the ranks' gradients)." + only_right_for(right, f"{n} ranks"))


def _loss_fault(ret: Any, local: list[float], r: int, t: int, want: list[np.ndarray],
                batches: list, d: int, name: str) -> str | None:
    if isinstance(ret, tuple):
        if ret[1] == "None":
            return (f"{name} returned None: the step must return this rank's loss as a float "
                    "(`return loss.item()`), e.g. to plot the training curve.")
        return (f"{name} returned {ret[1]}; return this rank's loss as a float "
                "(`loss.item()`).")
    if np.isclose(ret, local[r], rtol=_RTOL):
        return None
    after = _loss(want[t], *batches[r][t], d)
    hint = explain(ret, {
        "the mean of the ranks' losses: return this rank's own (local) loss":
            float(np.mean(local)),
        "the sum of the ranks' losses: return this rank's own (local) loss": float(np.sum(local)),
        "the loss after the update: return the loss computed before it, the one backward() "
        "differentiated": after}, _RTOL)
    return (f"step {t + 1} on rank {r} returned {ret:.6g}, but its loss was {local[r]:.6g}"
            + (f": that is {hint}." if hint else "."))


# ------------------------------------------------------------------- local SGD

def _local_case(fn: Callable, d: int, theta: np.ndarray, batches: list, lr: float,
                H: int) -> dict:
    """Worker: the learner's local SGD over this rank's batches; the final parameters."""
    import torch
    import torch.distributed as dist
    model = _watched_model(d, theta)
    mine = [(torch.from_numpy(X.copy()), torch.from_numpy(y.copy()))
            for X, y in batches[dist.get_rank()]]
    before = [(X.clone(), y.clone()) for X, y in mine]
    fn(model, _mse, list(mine), lr, H)
    changed = any(not (torch.equal(a, c) and torch.equal(b, e))
                  for (a, b), (c, e) in zip(mine, before))
    return {"params": _flat(model), "changed": changed, "spent": "spent" in model.flags}


def _local_reference(theta: np.ndarray, batches: list, lr: float, H: int, d: int,
                     sync: Callable[[int], bool] | None = None, how: str = "average",
                     divisor: float | None = None) -> list[np.ndarray]:
    """Simulate n replicas of local SGD; ``sync(t)`` says whether to sync after step t
    (0-based); ``how``: 'average' the parameters (÷ ``divisor``, default n), average the
    'gradient' of that step, or never zero the gradients ('accumulate')."""
    n, steps = len(batches), len(batches[0])
    sync = sync or (lambda t: (t + 1) % H == 0)
    models = [theta.copy() for _ in range(n)]
    acc = [np.zeros_like(theta) for _ in range(n)]
    for t in range(steps):
        grads = [_grad(m, *batches[r][t], d) for r, m in enumerate(models)]
        if how == "accumulate":
            acc = [a + g for a, g in zip(acc, grads)]
            grads = acc
        if sync(t) and how == "gradient":
            g = np.mean(grads, axis=0)
            models = [m - lr * g for m in models]
            continue
        models = [m - lr * g for m, g in zip(models, grads)]
        if sync(t):
            total = np.sum(models, axis=0)
            models = [total / (divisor or n) for _ in models]
    return models


def _local_mistakes(case: Case) -> list[tuple[dict, str]]:
    n, H, T = (case.params[k] for k in ("n", "H", "steps"))
    last = T % H != 0
    return [
        ({"divisor": H}, f"at the synchronisation steps you divided the sum of the parameters by "
                         f"H = {H}, not by the world size {n}: averaging over the ranks is "
                         "all_reduce, then / dist.get_world_size()."),
        ({"divisor": 1}, "at the synchronisation steps you summed the parameters but did not "
                         "divide by the world size: averaging is all_reduce, then "
                         "/ dist.get_world_size()."),
        ({"sync": lambda t: True}, f"your ranks averaged after every step; with H = {H} they "
                                   f"must average only after steps {H}, {2 * H}, … (t+1 ∈ I_T) "
                                   "and step on their own in between."),
        ({"sync": lambda t: False}, "the ranks never averaged their parameters: after every "
                                    "H-th step all_reduce each parameter and divide by the "
                                    "world size."),
        ({"sync": lambda t: t % H == 0}, f"you averaged after steps 1, {H + 1}, {2 * H + 1}, … — "
                                         "off by one: with t counted from 0, synchronise when "
                                         "(t + 1) % H == 0."),
        ({"sync": lambda t: (t + 1) % H == 0 or (last and t == T - 1)},
         f"you also averaged after the last step ({T} is not a multiple of H = {H}): average "
         "only after steps H, 2H, …"),
        ({"sync": lambda t: t == T - 1}, "you averaged once, after the last step: average after "
                                         "every H-th step."),
        ({"how": "gradient"}, "at a synchronisation step you averaged only that step's gradient. "
                              "Average the parameters themselves (the models): that carries "
                              "every local update since the last synchronisation."),
        ({"how": "accumulate"}, "the gradients were never zeroed: .grad accumulates across "
                                "backward() calls, so call model.zero_grad() before each one."),
    ]


@task("data_parallel", refuses=("ddl_lab.data_parallel", "average_params", "local_sgd"))
def local_sgd(my_local_sgd: Callable, seed: int = 0, timeout: float = 60.0) -> None:
    """Lesson 05, task 2: ``my_local_sgd(model, loss_fn, batches, lr, H)`` takes one local
    SGD step per batch and averages the parameters over all ranks after steps H, 2H, …"""
    name = getattr(my_local_sgd, "__name__", "your function")
    cases = list(Cases("local_sgd", seed, [
        {"n": 3, "d": 4, "lr": 0.1, "H": 2, "steps": 7},
        {"n": 4, "d": 2, "lr": 0.05, "H": 3, "steps": 8},
        {"n": 2, "d": 3, "lr": 0.15, "H": 1, "steps": 3},
        {"n": 5, "d": 1, "lr": 0.08, "H": 4, "steps": 9}], draws=2,
        draw=lambda rng: _draw(rng, H=True)))
    data = []
    for case in cases:
        n, d, T = (case.params[k] for k in ("n", "d", "steps"))
        theta = case.rng.normal(size=d + 1).astype(np.float32).astype(np.float64)
        data.append((theta, _draw_batches(case.rng, n, T, d)))
    args = [(c.params["d"], *x, c.params["lr"], c.params["H"]) for c, x in zip(cases, data)]
    outcomes = _run(_local_case, my_local_sgd, name, cases, args, timeout)
    right: list[str] = []
    for case, (theta, batches), outcome in zip(cases, data, outcomes):
        _case_failed(outcome, name, case, right)
        message = _local_fault(outcome.results, theta, batches, case, name, right)
        if message:
            fail(f"{message} ({case})")
        right.append(f"{case.params['n']} ranks with H = {case.params['H']}")
    passed("local_sgd", f"{len(cases)} cases (2–5 ranks, H = 1 to 5, H ≠ world size, step counts "
           "that are and are not multiples of H): every rank's parameters match a simulation of "
           "all replicas")


def _local_fault(got: list[dict], theta: np.ndarray, batches: list, case: Case, name: str,
                 right: list[str]) -> str | None:
    """What the ranks' local SGD did wrong, in words; None if nothing."""
    n, d, lr, H, T = (case.params[k] for k in ("n", "d", "lr", "H", "steps"))
    want = _local_reference(theta, batches, lr, H, d)
    if any(g["changed"] for g in got):
        return (f"{name} changed the minibatches it was given in place: the data must stay as "
                "it was; only the model's parameters change.")
    if all(same(want[r], got[r]["params"], _RTOL) for r in range(n)):
        return None
    if any(g["spent"] for g in got):
        return (f"{name} iterated model.parameters() a second time after a first loop had used "
                "it up: parameters() returns a generator, empty the second time. Call "
                "model.parameters() again for each loop.")
    named = next((msg for options, msg in _local_mistakes(case)
                  if all(same(alt, g["params"], _RTOL) for alt, g in zip(
                      _local_reference(theta, batches, lr, H, d, **options), got))), None)
    r = next(r for r in range(n) if not same(want[r], got[r]["params"], _RTOL))
    return named or (f"after {T} steps with H = {H} on {n} ranks, rank {r}'s parameter "
                     f"{differs(want[r], got[r]['params'], _RTOL)}. Each step: zero the "
                     "gradients, backward, p -= lr·p.grad; after steps H, 2H, …: average the "
                     "parameters over the ranks."
                     + only_right_for(right, f"{n} ranks with H = {H}"))


# ------------------------------------------------------------ the straggler's time

@task("data_parallel")
def straggler_time(my_straggler_time: Callable, seed: int = 0) -> None:
    """Lesson 05, task 3: ``my_straggler_time(n, steps, H, compute, slow, allreduce,
    rotating)`` is the time of local SGD with period H when one rank computes ``slow``×
    slower — always rank 0, or (rotating) rank t % n at step t: steps/H periods, each the
    slowest rank's H steps plus one allreduce."""
    cases = Cases("straggler_time", seed, plans.STRAGGLER_FIXED, draws=5,
                  draw=plans.straggler_draw)
    formula_cases(my_straggler_time, cases, plans.ARGS, plans.straggler_time,
                  plans.STRAGGLER_MISTAKES, "the predicted seconds as a number",
                  "a period ends when the slowest rank has done its H steps, then one "
                  "allreduce; count the slow steps that rank takes in a period.", vary="H")
    passed("straggler_time", f"{len(cases)} cases (2–8 ranks, H = 1 to 12, a persistent and "
           "a rotating straggler): a straggler that is always slow costs every period its H "
           "slow steps whatever H is; one that moves costs a period only ⌈H/n⌉ of them")


# --------------------------------------------------------- the averaging plan

@task("data_parallel")
def sync_plan(my_sync_plan: Callable, seed: int = 0, timeout: float = 120.0) -> None:
    """Lesson 05, task 4: ``my_sync_plan(steps, max_allreduces)`` returns an averaging period
    H or the steps after which to average. Local SGD with that plan trains logistic
    regression on 4 real workers with non-IID digit shards; every replica must reach the
    target test accuracy with at most ``max_allreduces`` averagings — for the prompt's three
    budgets and for budgets it does not show (drawn per call: each within its budget, two
    trained against the even spread of the same budget, less 3 points)."""
    name = getattr(my_sync_plan, "__name__", "my_sync_plan")
    cases = [c.params for c in Cases("sync_plan", seed,
                                     plans.PLAN_CASES + plans.unseen_budgets(seed))]
    chosen: list = []
    for i, case in enumerate(cases):
        T, N = case["steps"], case["max_allreduces"]
        call = f"{name}(steps={T}, max_allreduces={N})"
        unseen = i >= len(plans.PLAN_CASES)
        got = plan_call(my_sync_plan, (T, N), name, call) if unseen else \
            call_local(my_sync_plan, T, N)
        try:
            chosen.append(plans.plan_of(got, call, T, N))
        except CheckFailed as e:
            raise CheckFailed(f"{e}" + (f" That budget is not one the prompt shows: "
                                        f"{FUNCTION_OF_INPUTS}." if unseen else "")
                              + same_for_all([*chosen, got])) from None
    trained = len(plans.PLAN_CASES) + plans.TRAINED
    runs = [(c["steps"], p) for c, p in zip(cases[:trained], chosen)]
    missing = plans.missing_references(cases[len(plans.PLAN_CASES):trained])
    runs += [(c["steps"], plans.even_spread(c["steps"], c["max_allreduces"])) for c in missing]
    try:
        outcomes = run_cases(plans.plan_run, [(plans.RANKS, r) for r in runs],
                             fn=my_sync_plan, timeout=timeout)
    except WorldFailed as e:
        fail(e.failure.message(name, plans.RANKS))
    if failed := next((o.failure for o in outcomes if o.failure is not None), None):
        fail(failed.message(name, plans.RANKS))
    plans.unseen_targets(cases[len(plans.PLAN_CASES):trained], missing, outcomes[trained:])
    shown = []
    for case, plan, outcome in zip(cases[:trained], chosen, outcomes):
        good, text = plans.judge_plan(case, plan, outcome.results)
        if not good:
            fail(text + same_for_all(chosen))
        shown.append(text)
    passed("sync_plan", "non-IID digits on 4 real workers: " + "; ".join(shown)
           + f"; and {len(cases) - len(plans.PLAN_CASES) - plans.TRAINED} more unseen budgets "
           "kept")
