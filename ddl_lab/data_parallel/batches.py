"""Large global batches (lesson 05): R workers with a fixed per-worker batch b train with a
global batch R·b. Without changing the learning rate that only averages away noise; Goyal
et al. (2017, "Accurate, large minibatch SGD") scale the rate linearly with the batch and
warm it up over the first steps. McCandlish et al. (2018, "An empirical model of large-batch
training", arXiv:1812.06162) say where it stops paying: with the gradient noise scale
B_noise = tr(HΣ)/(GᵀHG) (Σ the per-example gradients' covariance, G their mean, H the
Hessian), the steps to a given loss go as S(B) = S_min·(1 + B_noise/B) — doubling B nearly
halves S while B ≪ B_noise, hardly helps once B ≫ B_noise. Without the Hessian they use
its simple form B_simple = tr(Σ)/|G|², exact when H ∝ I; that is what this module measures
and puts in S(B) in place of B_noise.

- ``lr_at``: the three rules; ``batch_worker``: synchronous SGD on R real workers with one;
- ``run_batches``: every (rule, R) on one warm cluster (worlds of 1, 2, 4 of its ranks);
- ``per_example_grads``: (N, d) gradients, one row per example;
- ``gradient_noise``: tr(Σ) and |G|² estimated without bias from a model on some data;
- ``steps_to``: steps a run took to reach a loss, to set beside S(B).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch import nn

from ddl_lab.data_parallel.engine import _global_loss, _prepare, _sync_sgd_step
from ddl_lab.data_parallel.measure import replica_accuracy
from ddl_lab.data_parallel.workloads import batch_indices, build
from ddl_lab.ml.models import flat_grads, flat_params
from ddl_lab.runtime import worlds

__all__ = ["RULES", "lr_at", "BatchRun", "batch_worker", "run_batches", "per_example_grads",
           "NoiseScale", "gradient_noise", "steps_to", "predicted_steps", "digits_noise",
           "one_thread"]

RULES = ("none", "linear", "warmup")


def lr_at(step: int, rule: str, base_lr: float, R: int, warmup: int) -> float:
    """The learning rate of step ``step`` (from 0) on R workers: ``none`` keeps base_lr;
    ``linear`` uses R·base_lr (R times the batch, R times the rate); ``warmup`` ramps from
    base_lr to R·base_lr linearly over ``warmup`` steps (Goyal et al.'s gradual warm-up)."""
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
    if rule == "none":
        return base_lr
    if rule == "linear" or step >= warmup:
        return R * base_lr
    return base_lr * (1 + (R - 1) * step / warmup)


@dataclass
class BatchRun:
    """One (rule, R) run: the loss on the whole training set at ``eval_steps``, the final
    test accuracy and parameters of rank 0's replica, and the global batch R·b."""

    rule: str
    world_size: int
    batch: int
    eval_steps: list[int]
    loss: list[float]
    accuracy: float
    params: torch.Tensor


def batch_worker(rule: str, per_worker: int = 32, steps: int = 150, base_lr: float = 0.2,
                 warmup: int = 30, seed: int = 0, eval_every: int = 10) -> BatchRun:
    """Worker function: synchronous SGD on the digits MLP, each of R ranks taking
    ``per_worker`` examples a step (global batch R·b), the rate set by ``rule``."""
    import torch.distributed as dist
    R = dist.get_world_size()
    model, loss_fn, X, y, n, rank, b = _prepare("digits-mlp", per_worker * R, seed, 0.0)
    idx = batch_indices(len(y), b, steps, seed, rank)
    steps_seen, losses = [0], [_global_loss(model, X, y, loss_fn)]
    for t in range(steps):
        _sync_sgd_step(model, loss_fn, X[idx[t]], y[idx[t]], lr_at(t, rule, base_lr, R, warmup))
        if (t + 1) % eval_every == 0 or t + 1 == steps:
            steps_seen.append(t + 1)
            losses.append(_global_loss(model, X, y, loss_fn))
    params = flat_params(model).cpu()
    return BatchRun(rule, R, per_worker * R, steps_seen, losses,
                    replica_accuracy("digits-mlp", params, seed), params)


def run_batches(cluster: Any, rules: Sequence[str] = RULES, world_sizes: Sequence[int] = (1, 2, 4),
                timeout: float = 300.0, **options: Any) -> dict[tuple[str, int], BatchRun]:
    """Every (rule, R) on a world of R real workers carved out of ``cluster`` (ranks 0…R−1 in
    a group of their own, one after the other); rank 0's ``BatchRun`` of each."""
    if max(world_sizes) > cluster.world_size:
        raise ValueError(f"world sizes up to {max(world_sizes)} need a cluster that large, "
                         f"got {cluster.world_size} ranks")
    # on one worker every rule is the rate η: that run is made once and shared
    cases = [(R, (rule, options)) for rule in rules for R in world_sizes
             if R > 1 or rule == rules[0]]
    first = cluster.run_with(worlds.in_worlds, (_one, cases), {}, timeout=timeout)[0]
    for (R, (rule, _)), got in zip(cases, first):
        if isinstance(got, worlds.Raised):
            raise RuntimeError(f"{rule!r} on {R} ranks failed:\n{got.text}")
    if len(first) < len(cases):
        raise RuntimeError(f"only {len(first)} of {len(cases)} runs finished")
    runs = {(r.rule, r.world_size): r for r in first}
    if 1 in world_sizes:
        runs.update({(rule, 1): replace(runs[rules[0], 1], rule=rule) for rule in rules})
    return {(rule, R): runs[rule, R] for rule in rules for R in world_sizes}


def _one(rule: str, options: dict) -> BatchRun:
    return batch_worker(rule, **options)


def per_example_grads(model: nn.Module, X: torch.Tensor, y: torch.Tensor,
                      loss_fn: Callable) -> torch.Tensor:
    """(N, d): row i is the gradient of the loss on example i alone, parameters flattened in
    model order — one backward pass per example (``torch.func.vmap`` of ``grad`` batches
    them, at a first-call cost of seconds that this small model does not repay)."""
    rows = []
    for i in range(len(y)):
        model.zero_grad()
        loss_fn(model(X[i:i + 1]), y[i:i + 1]).backward()
        rows.append(flat_grads(model))
    return torch.stack(rows) if rows else torch.zeros(0, sum(p.numel() for p in
                                                             model.parameters()))


@dataclass(frozen=True)
class NoiseScale:
    """tr(Σ) and |G|² estimated from N per-example gradients; B_simple = tr(Σ)/|G|² (McCandlish
    et al.'s simple noise scale: their B_noise = tr(HΣ)/(GᵀHG) with the Hessian H ∝ I)."""

    trace: float
    g2: float
    n: int

    @property
    def b_simple(self) -> float:
        return self.trace / self.g2


def gradient_noise(model: nn.Module, X: torch.Tensor, y: torch.Tensor,
                   loss_fn: Callable) -> NoiseScale:
    """Lesson 05: B_simple of ``model`` on (X, y) from real per-example gradients. tr(Σ) is the
    summed per-coordinate sample variance (N − 1 in the denominator); |ḡ|² over-estimates
    |G|² by tr(Σ)/N, which is taken off (McCandlish et al., appendix A)."""
    g = per_example_grads(model, X, y, loss_fn).double()
    n = len(g)
    trace = float(g.var(dim=0, unbiased=True).sum())
    return NoiseScale(trace, float(g.mean(0).pow(2).sum()) - trace / n, n)


def steps_to(run: BatchRun, target: float) -> float:
    """Steps the run took to bring the training loss to ``target`` (linear between its
    evaluations); inf if it never did."""
    s, loss = np.asarray(run.eval_steps, float), np.asarray(run.loss)
    below = np.flatnonzero(loss <= target)
    if not below.size:
        return float("inf")
    i = below[0]
    if i == 0:
        return 0.0
    return float(s[i - 1] + (s[i] - s[i - 1]) * (loss[i - 1] - target) / (loss[i - 1] - loss[i]))


def predicted_steps(B: float, b_simple: float, s_min: float) -> float:
    """McCandlish et al.'s S(B) = S_min·(1 + B_noise/B), with B_simple for B_noise."""
    return s_min * (1 + b_simple / B)


@contextmanager
def one_thread() -> Iterator[None]:
    """Tiny tensors in this process: one intra-op thread (on a busy machine many threads
    cost seconds of contention for work of milliseconds)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def digits_noise(steps_trained: int = 0, n: int = 512, seed: int = 0) -> NoiseScale:
    """B_simple of the digits MLP after ``steps_trained`` plain SGD steps (batch 32, rate 0.1)
    on one process, measured on ``n`` training examples."""
    with one_thread():
        return _digits_noise(steps_trained, n, seed)


def _digits_noise(steps_trained: int, n: int, seed: int) -> NoiseScale:
    model, train, _, loss_fn = build("digits-mlp", seed)
    X, y = train.tensors()
    idx = batch_indices(len(y), 32, steps_trained, seed, 0)
    for t in range(steps_trained):
        model.zero_grad()
        loss_fn(model(X[idx[t]]), y[idx[t]]).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
    return gradient_noise(model, X[:n], y[:n], loss_fn)
