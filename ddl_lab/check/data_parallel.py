"""Checks for lesson 05 (synchronous data parallelism): a synchronous SGD step and local SGD (on
2–5 real workers, against a float64 simulation of all replicas and of named mistakes), a
straggler's time, a plan of averagings (trained on non-IID digits) and the gradient noise scale."""
from __future__ import annotations

import functools
import math
from typing import Any, Callable

import numpy as np
import torch

from ddl_lab.data_parallel.batches import one_thread, per_example_grads
from ddl_lab.ml.models import flat_params
from ddl_lab.runtime.worlds import RankFailure

from . import _answers as answers
from ._core import fail, task
from ._diagnose import (Case, describe_value, differs, explain, factor_of, only_right_for,
                        returned_none, same, table)
from ._trial import Trial, formula_cases

__all__ = ["sync_sgd_step", "local_sgd", "straggler_time", "sync_plan", "noise_scale"]

_RTOL = 2e-4                     # float32 workers against a float64 simulation


# ------------------------------------------------------------- the model and the data

def _watched_model(d: int, theta: np.ndarray):
    """Worker: the linear model y = x·w + b with parameters ``theta`` (float32), whose
    ``parameters()`` remembers being iterated again after it ran out."""

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


def _draw_batches(rng: np.random.Generator, n: int, steps: int, d: int
                  ) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """Per rank, ``steps`` minibatches (X, y) as float32: different data on every rank,
    batch sizes 1–9, values far from 0 and 1."""
    w = rng.normal(size=d) * 2

    def batch(r: int) -> tuple[np.ndarray, np.ndarray]:
        b = int(rng.integers(1, 10))
        X = (rng.normal(size=(b, d)) * 1.5 + 0.7 * r).astype(np.float32)
        return X, (X @ w + rng.normal(size=b) + r - 0.5).astype(np.float32)
    return [[batch(r) for _ in range(steps)] for r in range(n)]


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


def _replicas(task: str, fn: Callable, seed: int, fixed: list[dict], draw: Callable,
              timeout: float, worker: Callable, fault: Callable[..., str | None],
              right: Callable[[dict], str]) -> Trial:
    """The fixed cases and two drawn ones, each on its n workers: ``worker(fn, d, θ, batches,
    lr[, H])`` from a drawn θ and each rank's ``steps`` batches (3 by default); ``fault(results,
    θ, batches, case, name, trial.right)`` judges it, and a case that passes adds
    ``right(params)`` to the sizes that worked — named with a failure on the workers too."""
    def word(f: RankFailure, case: Case | None) -> str:
        n = case.params["n"] if case is not None else 0
        return f.message(trial.name, n) + ("" if case is None else f" ({case})"
                                           + only_right_for(trial.right, f"{n} ranks"))
    trial = Trial(task, fn, seed, fixed, draws=2, draw=draw, timeout=timeout, word=word)
    data = []
    for case in trial:
        n, d = case.params["n"], case.params["d"]
        theta = case.rng.normal(size=d + 1).astype(np.float32).astype(np.float64)
        data.append((theta, _draw_batches(case.rng, n, case.params.get("steps", 3), d)))
    args = [(trial.fn, c.params["d"], *x, *(c.params[k] for k in ("lr", "H") if k in c.params))
            for c, x in zip(trial, data)]
    outcomes = trial.run(worker, [(c.params["n"], a) for c, a in zip(trial, args)])
    for case, (theta, batches), outcome in zip(trial, data, outcomes):
        trial.judge(fault(trial.results(outcome, case), theta, batches, case, trial.name,
                          trial.right), case, "({})")
        trial.right.append(right(case.params))
    return trial


# ------------------------------------------------------------- synchronous step

def _sync_case(fn: Callable, d: int, theta: np.ndarray, batches: list, lr: float) -> dict:
    """Worker: the learner's steps on this rank's batches; what each did."""
    import torch.distributed as dist
    model = _watched_model(d, theta)
    out: dict[str, Any] = {"params": [], "returned": [], "changed": [], "grads_zero": []}
    for X, y in batches[dist.get_rank()]:
        X, y = torch.from_numpy(X.copy()), torch.from_numpy(y.copy())
        X0, y0 = X.clone(), y.clone()
        out["returned"].append(_portable(fn(model, _mse, X, y, lr)))
        out["params"].append(flat_params(model).double().numpy())
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
    trial = _replicas("sync_sgd_step", my_sync_sgd_step, seed, [
        {"n": 3, "d": 4, "lr": 0.1}, {"n": 2, "d": 1, "lr": 0.07}, {"n": 5, "d": 3, "lr": 0.17}],
        _draw, timeout, _sync_case, _sync_fault, lambda p: f"{p['n']} ranks")
    trial.passed(f"{len(trial)} cases (2–5 ranks, random lr, batch sizes 1–9), 3 steps each: "
                 "every rank's parameters match one process averaging all the ranks' "
                 "gradients, and each step returned its rank's loss")


def _sync_fault(got: list[dict], theta: np.ndarray, batches: list, case: Case, name: str,
                right: list[str]) -> str | None:
    """What is wrong with the ranks' steps, in words; None if nothing (``right``: the world
    sizes that worked, named when nothing else explains a difference)."""
    n, d, lr = (case.params[k] for k in ("n", "d", "lr"))
    want, losses = _sync_reference(theta, batches, lr, d)
    if changed := next(((r, c) for r, g in enumerate(got) for c in g["changed"] if c), None):
        return (f"{name} changed its input {' and '.join(changed[1])} in place on rank "
                f"{changed[0]}: the minibatch must stay as it was; only the model's parameters "
                "change.")
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
            if same(theta - lr * _grad(theta, *batches[r][0], d), first[r], _RTOL):
                return (f"after one step rank 0 and rank {r} hold different parameters: each rank "
                        "stepped with its own gradient. Sum the gradients of all ranks with "
                        "dist.all_reduce before the update, so every replica takes the same step.")
            return (f"after one step rank 0 and rank {r} hold different parameters "
                    f"({differs(first[0], first[r])}): every replica must take the same step."
                    + only_right_for(right, f"{n} ranks"))
    if differs(want[0], first[0], _RTOL):
        return _step_fault(first[0] - theta, step_want, want[0], first[0], case, right)
    for t in (1, 2):
        for r in range(n):
            if diff := differs(want[t], got[r]["params"][t], _RTOL):
                return (f"the first step is right but step {t + 1} is not (rank {r}: {diff}). "
                        "Did you zero the gradients before backward()? .grad accumulates across "
                        "calls: call model.zero_grad() at the start of each step.")
    for r in range(n):
        for t, ret in enumerate(got[r]["returned"]):
            if fault := _loss_fault(ret, losses[t], r, t, want, batches, d, name):
                return fault
    return None


def _step_fault(step_got: np.ndarray, step_want: np.ndarray, want: np.ndarray,
                got: np.ndarray, case: Case, right: list[str]) -> str:
    n, lr = case.params["n"], case.params["lr"]
    if (c := factor_of(step_want, step_got, _RTOL)) is not None:
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
        return f"{name} returned {ret[1]}; return this rank's loss as a float (`loss.item()`)."
    if np.isclose(ret, local[r], rtol=_RTOL):
        return None
    hint = explain(ret, {
        "the mean of the ranks' losses: return this rank's own (local) loss":
            float(np.mean(local)),
        "the sum of the ranks' losses: return this rank's own (local) loss": float(np.sum(local)),
        "the loss after the update: return the loss computed before it, the one backward() "
        "differentiated": _loss(want[t], *batches[r][t], d)}, _RTOL)
    return (f"step {t + 1} on rank {r} returned {ret:.6g}, but its loss was {local[r]:.6g}"
            + (f": that is {hint}." if hint else "."))


# ------------------------------------------------------------------- local SGD

def _local_case(fn: Callable, d: int, theta: np.ndarray, batches: list, lr: float, H: int) -> dict:
    """Worker: the learner's local SGD over this rank's batches; the final parameters."""
    import torch.distributed as dist
    model = _watched_model(d, theta)
    mine = [(torch.from_numpy(X.copy()), torch.from_numpy(y.copy()))
            for X, y in batches[dist.get_rank()]]
    before = [(X.clone(), y.clone()) for X, y in mine]
    fn(model, _mse, list(mine), lr, H)
    changed = any(not (torch.equal(a, c) and torch.equal(b, e))
                  for (a, b), (c, e) in zip(mine, before))
    return {"params": flat_params(model).double().numpy(), "changed": changed,
            "spent": "spent" in model.flags}


def _local_reference(theta: np.ndarray, batches: list, lr: float, H: int, d: int,
                     sync: Callable[[int], bool] | None = None, how: str = "average",
                     divisor: float | None = None) -> list[np.ndarray]:
    """Simulate n replicas of local SGD; ``sync(t)`` says whether to sync after step t
    (0-based); ``how``: 'average' the parameters (÷ ``divisor``, default n), average the
    'gradient' of that step, or never zero the gradients ('accumulate')."""
    n, steps = len(batches), len(batches[0])
    sync = sync or (lambda t: (t + 1) % H == 0)
    models, acc = [theta.copy() for _ in range(n)], [np.zeros_like(theta) for _ in range(n)]
    for t in range(steps):
        grads = [_grad(m, *batches[r][t], d) for r, m in enumerate(models)]
        if how == "accumulate":
            grads = acc = [a + g for a, g in zip(acc, grads)]
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
    trial = _replicas("local_sgd", my_local_sgd, seed, table(
        "n d lr H steps", (3, 4, 0.1, 2, 7), (4, 2, 0.05, 3, 8), (2, 3, 0.15, 1, 3),
        (5, 1, 0.08, 4, 9)), lambda rng: _draw(rng, H=True),
        timeout, _local_case, _local_fault, lambda p: f"{p['n']} ranks with H = {p['H']}")
    trial.passed(f"{len(trial)} cases (2–5 ranks, H = 1 to 5, H ≠ world size, step counts that "
                 "are and are not multiples of H): every rank's parameters match a simulation "
                 "of all replicas")


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

ARGS = ("n", "steps", "H", "compute", "slow", "allreduce", "rotating")


def slow_steps(n: int, H: int, rotating: bool) -> float:
    """Slow steps of the slowest rank in a period: H if rank 0 is always slow; if the slow
    rank turns, some rank meets ⌈H/n⌉ of the H steps."""
    return math.ceil(H / n) if rotating else H


def _straggler_seconds(n: int, steps: int, H: int, c: float, k: float, a: float,
                       rotating: bool) -> float:
    """steps/H periods; each waits for the slowest rank's H steps, then one allreduce."""
    return steps // H * (H * c + (k - 1) * c * slow_steps(n, H, rotating) + a)


def _period(steps: int, H: int, body: float, a: float) -> float:
    return steps // H * (body + a)


STRAGGLER_MISTAKES: dict[str, Callable[..., float | None]] = {
    "the ranks average only every H steps, so there is one allreduce per period, "
    "steps/H in all, not one per step":
        lambda n, T, H, c, k, a, rot: _straggler_seconds(n, T, H, c, k, 0, rot) + T * a
        if H > 1 else None,
    "the slow rank changes every step: in a period of H steps each rank is slow only in "
    "the steps t with t % n equal to its rank — at most ⌈H/n⌉ of them — and between "
    "averagings nobody waits for anybody":
        lambda n, T, H, c, k, a, rot: _straggler_seconds(n, T, H, c, k, a, False) if rot else None,
    "rank 0 is slow at EVERY step: local SGD averages less often, but each period still "
    "waits for rank 0's H slow steps — a persistent straggler is not hidden":
        lambda n, T, H, c, k, a, rot:
            _straggler_seconds(n, T, H, c, k, a, True) if not rot else None,
    "the slow steps do not share out evenly: when n does not divide H, some rank is slow "
    "⌈H/n⌉ times in a period, and the averaging waits for that rank":
        lambda n, T, H, c, k, a, rot: _period(T, H, H * c + (k - 1) * c * H / n, a)
        if rot else None,
    "some rank is slow ⌈H/n⌉ times in a period, not ⌊H/n⌋ (and the averaging waits for it)":
        lambda n, T, H, c, k, a, rot: _period(T, H, H * c + (k - 1) * c * (H // n), a)
        if rot else None,
    "a slow step takes slow × compute in all — (slow − 1) × compute more than a fast one, "
    "not slow × compute more":
        lambda n, T, H, c, k, a, rot: _period(T, H, H * c + k * c * slow_steps(n, H, rot), a),
    "the averaging waits for the slowest rank, not for the average one":
        lambda n, T, H, c, k, a, rot: _period(T, H, H * c + (k - 1) * c * H / n, a),
    "the allreduce is missing: each period ends with one, `allreduce` seconds":
        lambda n, T, H, c, k, a, rot: _straggler_seconds(n, T, H, c, k, 0, rot),
    "that is the time without the straggler: the averaging must wait for the slow rank":
        lambda n, T, H, c, k, a, rot: _period(T, H, H * c, a),
}

STRAGGLER_FIXED = table(ARGS, (4, 12, 1, 0.1, 3.0, 0.02, False), (4, 12, 4, 0.1, 3.0, 0.02, True),
                        (4, 12, 4, 0.1, 3.0, 0.02, False), (4, 24, 6, 0.05, 2.5, 0.03, True),
                        (3, 10, 1, 0.05, 2.0, 0.01, True))


def straggler_draw(rng: np.random.Generator) -> dict[str, Any]:
    H = int(rng.integers(1, 13))
    return {"n": int(rng.integers(2, 9)), "steps": H * int(rng.integers(1, 7)), "H": H,
            "compute": round(float(rng.uniform(0.01, 0.5)), 3),
            "slow": round(float(rng.uniform(1.5, 5.0)), 2),
            "allreduce": round(float(rng.uniform(0.001, 0.3)), 4),
            "rotating": bool(rng.integers(0, 2))}


@task("data_parallel")
def straggler_time(my_straggler_time: Callable, seed: int = 0) -> None:
    """Lesson 05, task 3: ``my_straggler_time(n, steps, H, compute, slow, allreduce,
    rotating)`` is the time of local SGD with period H when one rank computes ``slow``×
    slower — always rank 0, or (rotating) rank t % n at step t: steps/H periods, each the
    slowest rank's H steps plus one allreduce."""
    trial = Trial("straggler_time", my_straggler_time, seed, STRAGGLER_FIXED, draws=5,
                  draw=straggler_draw)
    formula_cases(trial, ARGS, _straggler_seconds,
                  STRAGGLER_MISTAKES, "the predicted seconds as a number",
                  "a period ends when the slowest rank has done its H steps, then one "
                  "allreduce; count the slow steps that rank takes in a period.", vary="H")
    trial.passed(f"{len(trial)} cases (2–8 ranks, H = 1 to 12, a persistent and a rotating "
                 "straggler): a straggler that is always slow costs every period its H slow "
                 "steps whatever H is; one that moves costs a period only ⌈H/n⌉ of them")


# ------------------------------------------------------------------ the averaging plan

WORKLOAD, RANKS, BATCH, LR, SKEW = "digits-logreg", 4, 64, 0.5, 1.0
PLAN_CASES = table("steps max_allreduces target", (96, 8, 0.83), (100, 6, 0.80), (60, 3, 0.76))
DRAWS, TRAINED = 6, 2     # budgets the prompt does not show; the first TRAINED are trained
MARGIN = 0.03             # their target: the even spread's worst replica, less 3 points


def unseen_budgets(seed: int) -> list[dict[str, Any]]:
    """DRAWS budgets the prompt does not show, drawn from ``seed``: 24–300 steps, 2 to
    min(40, steps/4) allreduces. The first (trained) has a prime number of steps: a period
    that must divide the steps would waste its budget."""
    rng, budgets = np.random.default_rng([0x5EED, seed]), []
    for _ in range(DRAWS):
        T = int(rng.integers(24, 301))
        budgets.append({"steps": T, "max_allreduces": int(rng.integers(2, min(40, T // 4) + 1))})
    T = budgets[0]["steps"]
    budgets[0]["steps"] = next(p for p in range(T, 2 * T) if all(p % d for d in range(2, p)))
    return budgets


def even_spread(steps: int, budget: int) -> list[int]:
    """The reference plan for a drawn budget: every allreduce, evenly spaced, the last one
    after the last step."""
    return sorted({round(steps * (i + 1) / budget) for i in range(budget)})


def plan_of(got: Any, call: str, steps: int, budget: int, tail: str) -> int | list[int]:
    """The learner's plan as a period H or a sorted list of steps, or a failure ending in
    ``tail`` (a plan averaging more often than the budget allows too: no need to train it)."""
    if isinstance(got, (bool, np.bool_)) or got is None:
        fail(f"{call} returned {describe_value(got)}; return the averaging period H (a whole "
             "number) or the steps after which to average (a list of step numbers)." + tail)
    if answers.scalar(got) is not None:           # a period H: 12, np.int64(12), 12.0
        plan = answers.whole(got)
        if plan is None or plan < 1:
            fail(f"{call} returned H = {describe_value(got)}; the averaging period is a whole "
                 "number of steps, at least 1." + tail)
    else:
        try:
            plan = sorted({int(s) for s in got})
            exact = all(float(s) == int(s) for s in got)
        except (TypeError, ValueError):
            plan, exact = [], False
        if not exact or not plan:
            fail(f"{call} returned {describe_value(got)}; return H (a whole number) or a "
                 "non-empty list of whole step numbers." + tail)
        if plan[0] < 1 or plan[-1] > steps:
            fail(f"{call} returned the steps {plan[:8]}{'…' if len(plan) > 8 else ''}: steps "
                 f"are counted from 1 to {steps} (I_T = {{H, 2H, …}}), averaging after step "
                 f"t; step {plan[0] if plan[0] < 1 else plan[-1]} does not exist." + tail)
    if len(at := sync_steps(plan, steps)) > budget:
        fail(f"{call} returned a plan that averages {len(at)} times in {steps} steps (after "
             f"steps {at[:6]}…), but the budget is {budget} allreduces." + tail)
    return plan


def sync_steps(plan: int | list[int], steps: int) -> list[int]:
    return list(range(plan, steps + 1, plan)) if isinstance(plan, int) else plan


def plan_run(steps: int, sync: int | list[int]) -> tuple[int, Any]:
    """Worker: the lesson's local SGD on non-IID digits with this plan; (averagings, params)."""
    from ddl_lab.data_parallel.engine import local_sgd
    run = local_sgd(WORKLOAD, steps, BATCH, LR, sync_every=sync, skew=SKEW, barrier=False)
    return run.rounds, run.params


def worst_accuracy(results: list) -> float:
    """The worst replica's test accuracy, of each rank's (averagings, parameters)."""
    from ddl_lab.data_parallel.measure import replica_accuracy
    return min(replica_accuracy(WORKLOAD, params) for _, params in results)


REFERENCES: dict[tuple[int, int], float] = {}   # (steps, budget) -> the even spread's worst


def unseen_targets(cases: list[dict], missing: list[dict], references: list) -> None:
    """Record the even-spread runs of ``missing`` (``references``), then give each trained
    unseen budget its target: the even spread's worst replica, less MARGIN."""
    for case, reference in zip(missing, references):
        REFERENCES[case["steps"], case["max_allreduces"]] = worst_accuracy(reference.results)
    for case in cases:
        best = REFERENCES[case["steps"], case["max_allreduces"]]
        case["target"] = round(best - MARGIN, 3)
        case["why"] = (f" — a budget the prompt does not show; spreading the "
                       f"{case['max_allreduces']} averagings evenly reaches {best:.1%}")


def judge_plan(case: dict, plan: int | list[int], results: list) -> tuple[bool, str]:
    """(True, what the run achieved) if every replica met the target, else (False, what
    went wrong). ``results``: each rank's (averagings, parameters)."""
    T, N, target = (case[k] for k in ("steps", "max_allreduces", "target"))
    rounds = results[0][0]
    accuracy = worst_accuracy(results)
    at = sync_steps(plan, T)
    where = f"{T} steps, at most {N} allreduces, target {target:.0%}" + case.get("why", "")
    times = "1 time" if rounds == 1 else f"{rounds} times"
    ran = (f"{where}: your plan averaged {times} (after steps {at[:6]}"
           f"{'…' if len(at) > 6 else ''}); the worst replica classifies {accuracy:.1%} of "
           "the test digits")
    if accuracy >= target:
        return True, f"{accuracy:.1%} with {rounds} allreduces ({where})"
    last = at[-1] if at else 0
    if last < T:
        return False, (f"{ran}. The last averaging was after step {last}: then every replica "
                       f"took {T - last} more steps on its own skewed shard and drifted toward "
                       "its own digits. Average after the last step.")
    gaps = np.diff([0] + at)
    if rounds < N:
        return False, (f"{ran}: you used {rounds} of the {N} allreduces allowed. On non-IID "
                       f"shards the replicas drift apart between averagings (here up to "
                       f"{gaps.max()} steps): use the budget.")
    return False, (f"{ran}: the longest stretch without averaging is {gaps.max()} steps. The "
                   "replicas drift apart the longer they go alone: spread the averagings out.")


@task("data_parallel")
def sync_plan(my_sync_plan: Callable, seed: int = 0, timeout: float = 120.0) -> None:
    """Lesson 05, task 4: ``my_sync_plan(steps, max_allreduces)`` returns an averaging period
    H or the steps after which to average. Local SGD with that plan trains logistic
    regression on 4 real workers with non-IID digit shards; every replica must reach the
    target test accuracy with at most ``max_allreduces`` averagings — for the prompt's three
    budgets and for budgets it does not show (drawn per call: each within its budget, two
    trained against the even spread of the same budget, less 3 points)."""
    trial = Trial("sync_plan", my_sync_plan, seed, PLAN_CASES + unseen_budgets(seed),
                  name="my_sync_plan", plan=True, timeout=timeout)
    trial.shown = len(PLAN_CASES)             # the budgets after these: drawn per call
    cases, name, shown_cases, chosen = [c.params for c in trial], trial.name, trial.shown, []
    for case in trial:
        T, N = case.params["steps"], case.params["max_allreduces"]
        call = f"{name}(steps={T}, max_allreduces={N})"
        got = trial.call(case, T, N, where=call)
        tail = (f" That budget is not one the prompt shows: {answers.FUNCTION_OF_INPUTS}."
                if trial.unseen(case) else "") + answers.same_for_all([*chosen, got])
        chosen.append(plan_of(got, call, T, N, tail))
    trained = shown_cases + TRAINED
    runs = [(c["steps"], p) for c, p in zip(cases[:trained], chosen)]
    missing = [c for c in cases[shown_cases:trained]          # even spreads not yet run
               if (c["steps"], c["max_allreduces"]) not in REFERENCES]
    runs += [(c["steps"], even_spread(c["steps"], c["max_allreduces"])) for c in missing]
    outcomes = trial.run(plan_run, [(RANKS, r) for r in runs])
    for outcome in outcomes:
        trial.results(outcome, None)
    unseen_targets(cases[shown_cases:trained], missing, outcomes[trained:])
    shown = []
    for case, plan, outcome in zip(cases[:trained], chosen, outcomes):
        good, text = judge_plan(case, plan, outcome.results)
        if not good:
            fail(text + answers.same_for_all(chosen))
        shown.append(text)
    trial.passed("non-IID digits on 4 real workers: " + "; ".join(shown)
                 + f"; and {len(cases) - shown_cases - TRAINED} more unseen budgets kept")


# ------------------------------------------------------------------ the gradient noise scale
# B_simple = tr(Σ)/|G|² (McCandlish et al. 2018's B_noise with H ∝ I) from real per-example
# gradients of the digits MLP at several points of training; two hand-made cases pin the edges.

_STATES = (30, 100, 300)         # SGD steps trained before the gradients are measured
_NOISE_FIXED = [
    {"grads": "two examples", "factor": 1.6}, {"grads": "all equal", "factor": 1.8},
    {"grads": "digits MLP", "steps": 30, "N": 256, "dtype": "float32", "factor": 1.5},
    {"grads": "digits MLP", "steps": 300, "N": 128, "dtype": "float64", "factor": 4 / 3}]


@functools.lru_cache(maxsize=1)
def _snapshots() -> tuple[dict[int, torch.Tensor], torch.Tensor, torch.Tensor]:
    """The digits MLP's flat parameters after each of ``_STATES`` steps, and the data."""
    from ddl_lab.data_parallel.workloads import batch_indices, build
    from ddl_lab.ml.models import flat_params
    model, train, _, loss_fn = build("digits-mlp", 0)
    X, y = train.tensors()
    idx, states = batch_indices(len(y), 32, max(_STATES), 0, 0), {}
    for t in range(max(_STATES) + 1):
        if t in _STATES:
            states[t] = flat_params(model).clone()
        if t < max(_STATES):
            model.zero_grad()
            loss_fn(model(X[idx[t]]), y[idx[t]]).backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= 0.1 * p.grad
    return states, X, y


def _noise_grads(case: Case) -> torch.Tensor:
    """The case's (N, d) per-example gradients."""
    p = case.params
    if p["grads"] == "two examples":
        return torch.tensor([[1.0, 0.0, 2.0], [3.0, 0.0, 4.0]], dtype=torch.float64)
    if p["grads"] == "all equal":
        return torch.tensor([[0.5, -1.0, 2.0, 0.25]] * 5, dtype=torch.float32)
    from ddl_lab.data_parallel.workloads import build
    from ddl_lab.ml.models import set_flat_params
    with one_thread():
        states, X, y = _snapshots()
        model, _, _, loss_fn = build("digits-mlp", 0)
        set_flat_params(model, states[p["steps"]])
        pick = torch.as_tensor(case.rng.choice(len(y), p["N"], replace=False))
        return per_example_grads(model, X[pick], y[pick], loss_fn).to(getattr(torch, p["dtype"]))


def _b_max(b_simple: float, f: float) -> float:
    """Largest B with S(B)/S(2B) ≥ f, S(B) = S_min(1 + B_simple/B): B_simple(2 − f)/(2(f − 1))."""
    return b_simple * (2 - f) / (2 * (f - 1))


def _halving(b_simple: float, B: int = 32) -> float:
    """S(B)/S(2B): what doubling a batch of B does to the steps."""
    return (1 + b_simple / B) / (1 + b_simple / (2 * B))


def _ratio(a: float, b: float) -> float:
    return a / b if b else (0.0 if a == 0 else float("inf"))


def _noise_answers(g: np.ndarray, f: float) -> tuple[tuple[float, float], dict[str, tuple]]:
    """The right (B_simple, B_max) of an (N, d) float64 array, and the named wrong answers:
    the (B_simple, B_max) each gives (None: any value)."""
    mean, n = g.mean(0), len(g)
    tr, tr0 = float(g.var(0, ddof=1).sum()), float(g.var(0).sum())     # unbiased, with N
    m2, sq = float(mean @ mean), float((g * g).sum(1).mean())            # |ḡ|², mean |g_i|²
    g2 = m2 - tr / n
    b = _ratio(tr, g2)
    return (b, _b_max(b, f)), {
        "|ḡ|² over-estimates |G|² by tr(Σ)/N (the mean of N noisy gradients is noisier than "
        "G): take tr(Σ)/N off |ḡ|² before dividing": (_ratio(tr, m2), None),
        "tr(Σ) came from the population variance (dividing by N): the unbiased estimate "
        "divides by N − 1": (_ratio(tr0, m2 - tr0 / n), None),
        "you divided the mean squared norm E|g_i|² by |G|²: that counts |G|² itself as noise; "
        "tr(Σ) is the spread AROUND the mean (subtract ḡ first)": (_ratio(sq, g2), None),
        "|G| is not squared: B_simple = tr(Σ)/|G|², a batch size (examples), not tr(Σ)/|G|":
            (_ratio(tr, np.sqrt(max(g2, 0.0))), None),
        "you used the variance of the MEAN gradient, tr(Σ)/N: the noise scale compares ONE "
        "example's noise with the signal": (_ratio(tr / n, g2), None),
        "B_max is the critical batch B_simple itself whatever the factor: at B = B_simple "
        "doubling cuts the steps by 4/3 only; solve S(B)/S(2B) = factor for B": (b, b),
        "B_max is upside down: from (1 + B_simple/B)/(1 + B_simple/(2B)) = f, "
        "B = B_simple·(2 − f)/(2(f − 1))": (b, b * 2 * (f - 1) / (2 - f)),
        "you solved S(B) = f·S_min (B = B_simple/(f − 1)); the question is when doubling the "
        "batch, S(B)/S(2B), still gives the factor f": (b, _ratio(b, f - 1)),
    }


def _noise_close(want: float, got: float, rtol: float) -> bool:
    return abs(got - want) <= rtol * max(abs(want), 1e-12) or got == want


@task("data_parallel", refuses=("ddl_lab.data_parallel", "gradient_noise", "digits_noise"))
def noise_scale(my_noise_scale: Callable, seed: int = 0) -> None:
    """Lesson 05, task 5: ``my_noise_scale(grads, factor)`` with ``grads`` an (N, d) tensor of
    per-example gradients returns (B_simple, B_max): B_simple = tr(Σ)/|G|² with tr(Σ) the
    unbiased (N − 1) per-coordinate variance summed and |G|² = |ḡ|² − tr(Σ)/N; B_max the
    largest batch B at which doubling B still divides the steps S(B) = S_min(1 + B_simple/B)
    by at least ``factor``."""
    trial = Trial("noise_scale", my_noise_scale, seed, _NOISE_FIXED, draws=3, draw=lambda rng: {
        "grads": "digits MLP", "steps": int(rng.choice(_STATES)),
        "N": int(rng.choice([128, 192, 256])), "dtype": str(rng.choice(["float32", "float64"])),
        "factor": round(float(rng.uniform(1.1, 1.9)), 3)})
    name, shown = trial.name, []
    for case in trial:
        g, f = _noise_grads(case), case.params["factor"]
        out = trial.call(case, g.clone(), f)
        if (got := answers.pair(out)) is None:
            fail(returned_none(out, name, "(B_simple, B_max)",
                               f"two numbers, (B_simple, B_max) ({case})."))
        g64 = g.double().numpy()
        want, mistakes = _noise_answers(g64, f)
        rtol = 2e-3 if g.dtype == torch.float32 else 1e-7
        if all(_noise_close(w, x, rtol) for w, x in zip(want, got)):
            if case.params["grads"] == "digits MLP":
                shown.append(want[0])
            continue
        hint = next((text for text, m in mistakes.items()
                     if all(w is None or _noise_close(w, x, rtol) for w, x in zip(m, got))), None)
        which = "B_simple" if not _noise_close(want[0], got[0], rtol) else "B_max"
        fail(f"{name} returned B_simple = {got[0]:.6g}, B_max = {got[1]:.6g}; expected "
             f"{want[0]:.6g} and {want[1]:.6g} ({which} is wrong) for {len(g64)} gradients of "
             f"{g64.shape[1]:,} entries, factor {f:g}"
             + (f": {hint}." if hint else ".") + f" ({case})")
    trial.passed(f"right on {len(trial)} cases (2 to 256 real per-example gradients of the "
                 f"digits MLP, float32 and float64, factors 1.1 to 1.9); the digits MLP's "
                 f"B_simple measured {min(shown):.0f} to {max(shown):.0f} examples on these "
                 f"subsets, so doubling its batch of 32 cuts the steps S(B) = S_min(1 + "
                 f"B_simple/B) by only {_halving(min(shown)):.2f}–{_halving(max(shown)):.2f}×, "
                 "not 2×")
