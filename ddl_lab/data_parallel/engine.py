"""Synchronous data parallelism on real workers (lesson 05; lesson 11 compares DDP with it).

Every rank holds the same model and its own shard of the data (D_i ⊥ D_j | θ). The
worker functions here run on every rank of a cluster (``cluster.run(sync_sgd, ...)``)
and read their rank from ``torch.distributed``:

- ``sync_sgd``: the synchronous SGD of Jamshidi's lecture — local minibatch of M/R examples, AllReduce
  of the gradients, divide by R, update (``_sync_sgd_step`` is one step of it: exercise
  05's first task, hence the private name).
- ``local_sgd``: each rank steps on its own; at the synchronisation times I_T the models
  are averaged (``average_params``). ``sync_every=1`` is parameter averaging after every
  iteration, ``sync_every=H`` averaging with period H (Do's lecture; the local SGD of the ID2223 review answers).
- ``distributed_minibatch``: Dekel et al.'s DMB (Algorithm 3 of Jamshidi's lecture): the
  gradient sum travels as an *asynchronous* allreduce while the rank keeps serving μ/k more
  inputs (``use_extra`` keeps their gradients for the next step, one step stale).
- a ``Straggler`` makes one rank k× slower (the "last executor" effect of Do's lecture);
  every rank records a ``Timeline`` of compute / wait / communicate.

What the lesson prints is the short ``textbook.py``, tested equal to these. The workloads
and the ``Run`` record are ``workloads.py``; the single-process replay and the
compute/communication ratio ``measure.py``; the pictures ``plots.py``. (DDP-style gradient
buckets come in lesson 06: ``ring_allreduce/buckets.py``.)
"""
from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from typing import Callable, ContextManager, Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.data_parallel.workloads import (Run, Straggler, batch_indices, build, local_batch,
                                             sgd_update)
from ddl_lab.ml.data import shard
from ddl_lab.ml.models import flat_grads, flat_params, set_flat_params
from ddl_lab.runtime import device
from ddl_lab.timeline import Timeline

__all__ = ["average_params", "sync_sgd", "local_sgd", "distributed_minibatch", "step_times",
           "wait_fraction", "Run", "batch_indices", "build"]


# ------------------------------------------------------------------ helpers

def _span(tl: Timeline | None, kind: str) -> ContextManager:
    return tl.span(kind) if tl is not None else nullcontext()


def _allreduce_fn(allreduce: str | Callable) -> Callable[[torch.Tensor], object]:
    """``"dist.all_reduce"`` (the library's), or any function summing a tensor in place over
    the ranks (lesson 06's hand-written allreduces plug in here)."""
    if callable(allreduce):
        return allreduce
    if allreduce != "dist.all_reduce":
        raise ValueError(f"allreduce must be 'dist.all_reduce' or a function f(tensor) that "
                         f"sums it in place over the ranks, got {allreduce!r}")
    return dist.all_reduce


class _Clock:
    """Training time only: evaluation is paused out of the clock."""

    def __init__(self) -> None:
        self.t0, self.paused = time.perf_counter(), 0.0

    def now(self) -> float:
        return time.perf_counter() - self.t0 - self.paused

    @contextmanager
    def pause(self) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.paused += time.perf_counter() - start


@torch.no_grad()
def _global_loss(model: nn.Module, X: torch.Tensor, y: torch.Tensor, loss_fn: Callable) -> float:
    """Loss of this rank's model on all ranks' shards (an allreduce of two numbers)."""
    out = torch.tensor([float(loss_fn(model(X), y)) * len(y), float(len(y))],
                       dtype=torch.float64, device=X.device)
    dist.all_reduce(out)
    return float(out[0] / out[1])


def _spread(local: torch.Tensor, mean: torch.Tensor) -> float:
    """RMS over ranks of ‖w_i − w̄‖: how far the replicas drifted apart."""
    d = torch.tensor([float((local - mean).pow(2).sum())], dtype=torch.float64,
                     device=local.device)
    dist.all_reduce(d)
    return float((d / dist.get_world_size()).sqrt())


# -------------------------------------------------------------- one step

def _sync_sgd_step(model: nn.Module, loss_fn: Callable, X: torch.Tensor, y: torch.Tensor,
                   lr: float, allreduce: Callable = dist.all_reduce,
                   timeline: Timeline | None = None, straggler: Straggler | None = None,
                   barrier: bool = False) -> float:
    """One step of synchronous SGD on this rank (Jamshidi's lecture, lesson 05); returns the loss.

    Compute ∇L on the local minibatch; AllReduce: sum the gradients of all R replicas
    into ΔW; update W ← W − α·ΔW/R. With ``barrier`` the time spent waiting for the
    slowest rank is recorded apart from the allreduce itself.
    """
    with _span(timeline, "compute"):
        t0 = time.perf_counter()
        model.zero_grad()
        loss = loss_fn(model(X), y)
        loss.backward()
        if straggler is not None:
            straggler.delay(dist.get_rank(), time.perf_counter() - t0)
    grads = flat_grads(model)
    if barrier:
        with _span(timeline, "wait"):
            dist.barrier()
    with _span(timeline, "communicate"):
        allreduce(grads)                                    # ΔW = Σ_r ∇L_r
    with _span(timeline, "update"):
        grads /= dist.get_world_size()                      # ΔW / R
        set_flat_params(model, flat_params(model) - lr * grads)
    return loss.item()


def average_params(model: nn.Module, allreduce: Callable = dist.all_reduce) -> None:
    """Replace every rank's parameters by their average over all ranks (lesson 05)."""
    vec = flat_params(model)
    allreduce(vec)
    set_flat_params(model, vec / dist.get_world_size())


# -------------------------------------------------------------- training runs

def _prepare(workload: str, batch: int, seed: int, skew: float
             ) -> tuple[nn.Module, Callable, torch.Tensor, torch.Tensor, int, int, int]:
    n, rank = dist.get_world_size(), dist.get_rank()
    model, train, _, loss_fn = build(workload, seed)
    X, y = shard(train, n, rank, skew=skew, seed=seed).tensors()
    dev = device()                        # this rank's GPU under nccl, else the CPU
    return model.to(dev), loss_fn, X.to(dev), y.to(dev), n, rank, local_batch(batch, n)


def sync_sgd(workload: str = "digits-mlp", steps: int = 30, batch: int = 64, lr: float = 0.1,
             seed: int = 0, straggler: Straggler | None = None,
             allreduce: str | Callable = "dist.all_reduce", barrier: bool = True,
             eval_every: int = 0, skew: float = 0.0) -> Run:
    """Worker function: ``steps`` of synchronous SGD with a global mini-batch ``batch``.

    Each rank samples M/R examples of its own shard per step. ``allreduce`` is
    ``"dist.all_reduce"`` or a function f(tensor) summing it in place over the ranks (lesson
    06's ``functools.partial(ring_allreduce.engine.allreduce, algorithm="ring")``, say);
    ``eval_every`` > 0 records the training-set loss every so many steps (off the clock).
    """
    model, loss_fn, X, y, n, rank, b = _prepare(workload, batch, seed, skew)
    idx = batch_indices(len(y), b, steps, seed, rank)
    run, reduce = Run(rank, straggler=straggler), _allreduce_fn(allreduce)
    run.timeline.rank = rank
    dist.barrier()
    clock = _Clock()
    for t in range(steps):
        run.timeline.step = t
        loss = _sync_sgd_step(model, loss_fn, X[idx[t]], y[idx[t]], lr, reduce,
                             run.timeline, straggler, barrier)
        run.rounds += 1
        run.loss.append(loss)
        run.time.append(clock.now())
        if eval_every and ((t + 1) % eval_every == 0 or t + 1 == steps):
            with clock.pause():
                run.evals.append((t + 1, clock.now(), run.rounds,
                                  _global_loss(model, X, y, loss_fn)))
    run.params = flat_params(model).cpu()
    return run


def local_sgd(workload: str = "digits-mlp", steps: int = 60, batch: int = 64,
              lr: float = 0.1, sync_every: int | Iterable[int] = 1, seed: int = 0,
              straggler: Straggler | None = None, skew: float = 0.0,
              allreduce: str | Callable = "dist.all_reduce", barrier: bool = True) -> Run:
    """Worker function: local SGD, averaging the models at the synchronisation times I_T.

    ``sync_every=H`` means I_T = {H, 2H, …} (H=1: parameter averaging every iteration);
    an iterable gives I_T itself (step numbers counted from 1). Between synchronisations
    each rank takes plain SGD steps on minibatches of M/R of its own examples. The loss
    of the averaged model on the whole training set is recorded at every sync.
    """
    model, loss_fn, X, y, n, rank, b = _prepare(workload, batch, seed, skew)
    if isinstance(sync_every, int):
        if sync_every < 1:
            raise ValueError(f"sync_every (the averaging period H) must be >= 1, got {sync_every}")
        sync_at = set(range(sync_every, steps + 1, sync_every))
    else:
        sync_at = {int(s) for s in sync_every}
    idx = batch_indices(len(y), b, steps, seed, rank)
    run, reduce = Run(rank, straggler=straggler), _allreduce_fn(allreduce)
    run.timeline.rank = rank
    run.evals.append((0, 0.0, 0, _global_loss(model, X, y, loss_fn)))
    dist.barrier()
    clock = _Clock()
    for t in range(steps):
        run.timeline.step = t
        with run.timeline.span("compute"):
            t0 = time.perf_counter()
            model.zero_grad()
            loss = loss_fn(model(X[idx[t]]), y[idx[t]])
            loss.backward()
            sgd_update(model, lr)
            if straggler is not None:
                straggler.delay(rank, time.perf_counter() - t0)
        if t + 1 in sync_at:                                # t+1 ∈ I_T: average the models
            local = flat_params(model)
            if barrier:
                with run.timeline.span("wait"):
                    dist.barrier()
            with run.timeline.span("communicate"):
                average_params(model, reduce)
            run.rounds += 1
            with clock.pause():
                run.spread.append(_spread(local, flat_params(model)))
                run.evals.append((t + 1, clock.now(), run.rounds,
                                  _global_loss(model, X, y, loss_fn)))
        run.loss.append(loss.item())
        run.time.append(clock.now())
    run.params = flat_params(model).cpu()
    return run


def distributed_minibatch(workload: str = "digits-mlp", steps: int = 30, batch: int = 64,
                          mu: int = 32, lr: float = 0.1, seed: int = 0,
                          use_extra: bool = False, overlap: bool = True,
                          straggler: Straggler | None = None) -> Run:
    """Worker function: Dekel et al.'s distributed mini-batch (Algorithm 3 of Jamshidi's lecture).

    Each of k ranks sums the gradients of b/k inputs into ĝ_j, then *starts* the vector
    sum (an asynchronous ``dist.all_reduce``) and, while it is in flight, serves μ/k more
    inputs with the current w_j; only then does it wait for the sum, divide by b and
    update. ``use_extra`` also adds those μ/k inputs' gradients, taken at w_j, to the next
    ĝ, applied to w_{j+1}: one step stale (the lecture's "keep computing updates while
    aggregating"); Dekel et al. predict on them and drop their gradients, which
    ``use_extra=False`` does. ``overlap=False`` waits for the sum first
    (the synchronous baseline). ``served`` counts the inputs predicted.
    """
    model, loss_fn, X, y, n, rank, b = _prepare(workload, batch, seed, 0.0)
    m = local_batch(mu, n) if mu else 0
    idx = batch_indices(len(y), b + m, steps, seed, rank)
    run = Run(rank, straggler=straggler)
    run.timeline.rank = rank
    carry = torch.zeros(sum(p.numel() for p in model.parameters()) + 1, device=X.device)
    dist.barrier()
    clock = _Clock()
    for j in range(steps):
        run.timeline.step = j
        fresh, extra = idx[j, :b], idx[j, b:]
        with run.timeline.span("compute"):                   # ĝ_j: sum of b/k gradients
            t0 = time.perf_counter()
            model.zero_grad()
            loss = loss_fn(model(X[fresh]), y[fresh]) * b
            loss.backward()
            g_hat = torch.cat([flat_grads(model), carry.new_tensor([float(b)])]) + carry
            if straggler is not None:
                straggler.delay(rank, time.perf_counter() - t0)
        carry.zero_()
        start = time.perf_counter()
        work = dist.all_reduce(g_hat, async_op=True)         # the vector sum, in flight
        if not overlap:
            with run.timeline.span("wait"):
                work.wait()
        if m:
            with run.timeline.span("compute"):               # μ/k more inputs, same w_j
                if use_extra:
                    model.zero_grad()
                    (loss_fn(model(X[extra]), y[extra]) * m).backward()
                    carry = torch.cat([flat_grads(model), carry.new_tensor([float(m)])])
                else:
                    with torch.no_grad():
                        model(X[extra])                      # predictions only
                run.served += m
        with run.timeline.span("wait"):
            work.wait()
        run.timeline.add("communicate", start, time.perf_counter())
        with run.timeline.span("update"):
            g_bar = g_hat[:-1] / g_hat[-1]                    # divide the sum by b (+ μ)
            set_flat_params(model, flat_params(model) - lr * g_bar)
        run.served += b
        run.rounds += 1
        run.loss.append(loss.item() / b)
        run.time.append(clock.now())
    run.params = flat_params(model).cpu()
    return run



# ------------------------------------------------------------------ what a run tells

def step_times(runs: Sequence[Run]) -> np.ndarray:
    """Seconds per step of a synchronous run: the slowest rank's, step by step."""
    t = np.array([r.time for r in runs])
    return np.diff(np.concatenate([np.zeros((len(runs), 1)), t], axis=1), axis=1).max(axis=0)


def wait_fraction(runs: Sequence[Run]) -> list[float]:
    """Fraction of each rank's time spent waiting for the others."""
    out = []
    for r in runs:
        tot = r.timeline.totals()
        out.append(tot.get("wait", 0.0) / max(sum(tot.values()), 1e-12))
    return out
