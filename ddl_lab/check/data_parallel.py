"""Checks for lesson 05 (synchronous data parallelism): one synchronous SGD step, local SGD.

Both run the learner's function on 3 real workers, each with its own minibatches of a
small linear regression, and compare every rank's parameters with a single-process
simulation of all replicas. When they differ, the simulation of the usual mistakes
(no allreduce, no division by R, averaging at the wrong steps, ...) names the mistake.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ._core import fail, first_difference, passed, run_on_workers

__all__ = ["sync_sgd_step", "local_sgd"]

_D, _B, _LR, _SEED = 4, 8, 0.1, 5


def _model():
    import torch
    from ddl_lab.ml.models import LinearRegression
    torch.manual_seed(_SEED)
    return LinearRegression(_D, bias=True)


def _loss():
    from ddl_lab.ml.training import loss_function
    return loss_function("mse")


def _batch(rank: int, step: int):
    """Rank ``rank``'s minibatch at ``step``: (X (8, 4), y (8,)), different on every rank."""
    import torch
    g = torch.Generator().manual_seed(1000 * _SEED + 100 * rank + step)
    X = torch.randn(_B, _D, generator=g) + rank
    y = X @ torch.tensor([1.0, -2.0, 0.5, 3.0]) + 0.3 * torch.randn(_B, generator=g) + rank
    return X, y


def _params(model) -> np.ndarray:
    from ddl_lab.ml.models import flat_params
    return flat_params(model).double().cpu().numpy()


def _on_device(model, batch):
    """The model and a batch on this rank's device (its GPU under nccl, else the CPU)."""
    from ddl_lab.runtime import device
    dev = device()
    return model.to(dev), tuple(t.to(dev) for t in batch)


def _grad(model, X, y) -> np.ndarray:
    from ddl_lab.ml.models import flat_grads
    model.zero_grad()
    _loss()(model(X), y).backward()
    return flat_grads(model).double().numpy()


def _set(model, vec: np.ndarray) -> None:
    import torch
    from ddl_lab.ml.models import set_flat_params
    set_flat_params(model, torch.as_tensor(vec, dtype=torch.float32))


# ------------------------------------------------------------- synchronous step

def _sync_case(fn: Callable, steps: int) -> list[np.ndarray]:
    """Worker: ``steps`` calls of the learner's step; the parameters after each."""
    import torch.distributed as dist
    model, loss_fn, rank = _model(), _loss(), dist.get_rank()
    out = [_params(model)]
    for t in range(steps):
        model, (X, y) = _on_device(model, _batch(rank, t))
        fn(model, loss_fn, X, y, _LR)
        out.append(_params(model))
    return out


def _sync_reference(n: int, steps: int) -> list[np.ndarray]:
    model = _model()
    out = [_params(model)]
    for t in range(steps):
        g = np.mean([_grad(model, *_batch(r, t)) for r in range(n)], axis=0)
        _set(model, _params(model) - _LR * g)
        out.append(_params(model))
    return out


def sync_sgd_step(my_sync_sgd_step: Callable, world_size: int = 3,
                  timeout: float = 20.0) -> None:
    """Lesson 05, task 1: ``my_sync_sgd_step(model, loss_fn, X, y, lr)`` takes one step of
    synchronous SGD: local gradient, allreduce (sum), divide by R, W ← W − lr·ΔW/R."""
    __tracebackhide__ = True
    n, steps = world_size, 2
    got = run_on_workers(_sync_case, n, my_sync_sgd_step, steps, timeout=timeout,
                         learner_fn=my_sync_sgd_step)
    want = _sync_reference(n, steps)
    p0, w1 = want[0], want[1]
    for r in range(1, n):
        d = first_difference(got[0][1], got[r][1], rtol=1e-5, atol=1e-6)
        if d:
            fail(f"after one step rank 0 and rank {r} hold different parameters ({d}): "
                 "each rank stepped with its own gradient. Sum the gradients of all ranks "
                 "with dist.all_reduce before the update, so every replica takes the same "
                 "step.")
    g1 = got[0][1]
    step_got, step_want = g1 - p0, w1 - p0
    if np.allclose(step_got, 0, atol=1e-9):
        fail("the parameters did not change: update them in place, e.g. "
             "`p -= lr * p.grad` for each parameter inside `with torch.no_grad():`.")
    if first_difference(w1, g1, rtol=1e-4, atol=1e-6):
        if np.allclose(step_got, n * step_want, rtol=1e-3, atol=1e-6):
            fail(f"your step is {n}× too large: dist.all_reduce SUMS the {n} gradients; "
                 f"divide by the world size R = {n} to get their mean (ΔW/R).")
        if np.allclose(step_got, -step_want, rtol=1e-3, atol=1e-6):
            fail("your step goes uphill: the update is W ← W − lr·ΔW/R (minus).")
        fail(f"after one step on {n} ranks, parameter "
             f"{first_difference(w1, g1, rtol=1e-4, atol=1e-6)}. Expected W − lr·(mean of "
             "the ranks' gradients).")
    for r in range(n):
        d = first_difference(want[2], got[r][2], rtol=1e-4, atol=1e-6)
        if d:
            fail(f"the first step is right but the second is not (rank {r}: {d}). Did you "
                 "zero the gradients before backward()? .grad accumulates across calls: "
                 "call model.zero_grad() at the start of each step.")
    passed("sync_sgd_step", f"{steps} steps on {n} ranks match one process averaging all "
           f"{n} minibatch gradients (max difference "
           f"{max(abs(got[r][2] - want[2]).max() for r in range(n)):.1e})")


# ------------------------------------------------------------------- local SGD

_T, _H = 7, 3


def _local_case(fn: Callable, steps: int, H: int) -> np.ndarray:
    """Worker: the learner's local SGD over this rank's batches; the final parameters."""
    import torch.distributed as dist
    rank = dist.get_rank()
    model = _model()
    batches = [_on_device(model, _batch(rank, t)) for t in range(steps)]
    fn(batches[0][0], _loss(), [b for _, b in batches], _LR, H)
    return _params(batches[0][0])


def _local_reference(n: int, steps: int, sync: Callable[[int], bool], how: str = "average"
                     ) -> list[np.ndarray]:
    """Simulate n replicas of local SGD; ``sync(t)`` says whether to sync after step t
    (0-based); ``how``: 'average' the parameters, 'sum' them, or average the 'gradient'."""
    models = [_model() for _ in range(n)]
    for t in range(steps):
        grads = [_grad(m, *_batch(r, t)) for r, m in enumerate(models)]
        if sync(t) and how == "gradient":
            g = np.mean(grads, axis=0)
            for m in models:
                _set(m, _params(m) - _LR * g)
            continue
        for m, g in zip(models, grads):
            _set(m, _params(m) - _LR * g)
        if sync(t):
            total = np.sum([_params(m) for m in models], axis=0)
            for m in models:
                _set(m, total / n if how == "average" else total)
    return [_params(m) for m in models]


def local_sgd(my_local_sgd: Callable, world_size: int = 3, timeout: float = 20.0) -> None:
    """Lesson 05, task 2: ``my_local_sgd(model, loss_fn, batches, lr, H)`` takes one local
    SGD step per batch and averages the parameters over all ranks after steps H, 2H, …"""
    __tracebackhide__ = True
    n, T, H = world_size, _T, _H
    got = run_on_workers(_local_case, n, my_local_sgd, T, H, timeout=timeout,
                         learner_fn=my_local_sgd)
    want = _local_reference(n, T, lambda t: (t + 1) % H == 0)
    if all(first_difference(want[r], got[r], rtol=1e-4, atol=1e-6) is None for r in range(n)):
        syncs = list(range(H, T + 1, H))
        passed("local_sgd", f"{n} ranks, {T} steps, H = {H}: averaged after steps {syncs} "
               "exactly as the simulation of all replicas")
        return
    mistakes = [
        (lambda t: True, "average",
         f"your ranks averaged after every step; with H = {H} they must average only after "
         f"steps {H}, {2 * H}, … (t+1 ∈ I_T) and step on their own in between."),
        (lambda t: False, "average",
         "the ranks never averaged their parameters: after every H-th step all_reduce "
         "each parameter and divide by the world size."),
        (lambda t: (t + 1) % H == 0, "sum",
         "at the synchronisation steps you summed the parameters but did not divide by "
         "the world size: averaging is all_reduce, then / dist.get_world_size()."),
        (lambda t: t % H == 0, "average",
         f"you averaged after steps 1, {H + 1}, {2 * H + 1}, … — off by one: with t "
         f"counted from 0, synchronise when (t + 1) % H == 0."),
        (lambda t: (t + 1) % H == 0, "gradient",
         "at a synchronisation step you averaged only that step's gradient. Average the "
         "parameters themselves (the models): that carries every local update since the "
         "last synchronisation."),
    ]
    for sync, how, message in mistakes:
        alt = _local_reference(n, T, sync, how)
        if all(first_difference(alt[r], got[r], rtol=1e-4, atol=1e-6) is None
               for r in range(n)):
            fail(message)
    r = next(r for r in range(n) if first_difference(want[r], got[r], 1e-4, 1e-6))
    fail(f"after {T} steps with H = {H} on {n} ranks, rank {r}'s parameter "
         f"{first_difference(want[r], got[r], rtol=1e-4, atol=1e-6)}. Each step: zero the "
         "gradients, backward, p -= lr·p.grad; after steps H, 2H, …: average the "
         "parameters over the ranks.")
