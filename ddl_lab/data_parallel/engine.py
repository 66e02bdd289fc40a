"""Synchronous data parallelism on real workers (lesson 05; lesson 10 compares DDP with it).

Every rank holds the same model and its own shard of the data (D_i ⊥ D_j | θ). The
worker functions here run on every rank of a cluster (``cluster.run(sync_sgd, ...)``)
and read their rank from ``torch.distributed``:

- ``sync_sgd``: seed 002's synchronous SGD — local minibatch of M/R examples, AllReduce
  of the gradients, divide by R, update (``sync_sgd_step`` is one step of it).
- ``local_sgd``: each rank steps on its own; at the synchronisation times I_T the models
  are averaged (``average_params``). ``sync_every=1`` is parameter averaging after every
  iteration, ``sync_every=H`` averaging with period H (seed 000, seed 003's local SGD).
- ``distributed_minibatch``: Dekel et al.'s DMB (seed 002, Algorithm 3): the gradient sum
  travels as an *asynchronous* allreduce while the rank keeps serving μ/k more inputs.
- a ``Straggler`` makes one rank k× slower (the "last executor" effect of seed 000);
  every rank records a ``Timeline`` of compute / wait / communicate.
- ``compute_vs_communication``: a step's compute time against its allreduce time, the
  ratio that decides whether data parallelism pays (CNN vs MLP, batch size).
"""
from __future__ import annotations

import time
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from typing import Callable, ContextManager, Iterable, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.ring_allreduce.engine import allreduce as _allreduce
from ddl_lab.ml.data import Dataset, digits, linear_regression, shard
from ddl_lab.ml.models import MLP, LinearRegression, SmallCNN, flat_grads, flat_params, set_flat_params
from ddl_lab.runtime import device
from ddl_lab.timeline import Timeline
from ddl_lab.ml.training import loss_function

__all__ = ["WORKLOADS", "Workload", "build", "Straggler", "Run", "sync_sgd_step",
           "average_params", "sync_sgd", "local_sgd", "distributed_minibatch",
           "GradientBuckets", "overlap_backward",
           "batch_indices", "replay_single_process", "compute_vs_communication",
           "least_disturbed",
           "step_times", "wait_fraction", "plot_loss_curves", "plot_timelines"]


# ---------------------------------------------------------------- workloads

@dataclass(frozen=True)
class Workload:
    """A model, its data and its loss, built identically on every rank."""

    model: str          # 'mlp', 'wide-mlp', 'cnn' or 'linreg'
    data: str           # 'digits' or 'linreg'
    loss: str           # 'ce' or 'mse'


WORKLOADS = {"digits-mlp": Workload("mlp", "digits", "ce"),
             "digits-cnn": Workload("cnn", "digits", "ce"),
             "digits-wide-mlp": Workload("wide-mlp", "digits", "ce"),
             "linreg": Workload("linreg", "linreg", "mse")}


def build(workload: str, seed: int = 0) -> tuple[nn.Module, Dataset, Dataset, Callable]:
    """(model, train set, test set, loss) for a named workload; same model on every rank."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}: use one of {list(WORKLOADS)}")
    w = WORKLOADS[workload]
    if w.data == "digits":
        train, test = digits(seed=seed)
    else:
        full = linear_regression(m=2000, d=20, noise=0.1, seed=seed)
        train, test = full.subset(np.arange(1500)), full.subset(np.arange(1500, 2000))
    torch.manual_seed(seed)
    model = {"mlp": lambda: MLP(64, 64, 10), "cnn": lambda: SmallCNN(10),
             "wide-mlp": lambda: MLP(64, 512, 10),
             "linreg": lambda: LinearRegression(train.X.shape[1])}[w.model]()
    return model, train, test, loss_function(w.loss)


@dataclass(frozen=True)
class Straggler:
    """Rank ``rank`` computes ``factor``× slower than the others (``factor`` >= 1)."""

    rank: int
    factor: float

    def __post_init__(self) -> None:
        if self.factor < 1:
            raise ValueError(f"a straggler is slower: factor must be >= 1, got {self.factor}")

    def delay(self, rank: int, seconds: float) -> None:
        """Sleep so that ``seconds`` of compute on the straggler take ``factor``× as long."""
        if rank == self.rank and self.factor > 1:
            time.sleep((self.factor - 1) * seconds)


@dataclass
class Run:
    """What one rank recorded in a training run (lesson 05).

    ``loss``/``time``: this rank's minibatch loss and training clock (seconds, evaluation
    excluded) after each step; ``evals``: (step, clock, communication rounds, loss of the
    global model on the whole training set) at every synchronisation; ``spread``: how far
    the replicas had drifted apart before each averaging (RMS distance to their mean);
    ``params``: the final parameters.
    """

    rank: int
    loss: list[float] = field(default_factory=list)
    time: list[float] = field(default_factory=list)
    evals: list[tuple[int, float, int, float]] = field(default_factory=list)
    rounds: int = 0
    served: int = 0
    spread: list[float] = field(default_factory=list)
    timeline: Timeline = field(default_factory=Timeline)
    params: torch.Tensor | None = None


# ------------------------------------------------------------------ helpers

def _span(tl: Timeline | None, kind: str) -> ContextManager:
    return tl.span(kind) if tl is not None else nullcontext()


def _allreduce_fn(algorithm: str | Callable) -> Callable[[torch.Tensor], object]:
    if callable(algorithm):
        return algorithm
    return lambda t: _allreduce(t, algorithm)


def batch_indices(shard_size: int, batch: int, steps: int, seed: int, rank: int) -> torch.Tensor:
    """(steps, batch) example indices into a rank's shard, fixed by (seed, rank)."""
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randint(shard_size, (steps, batch), generator=g)


def _local_batch(batch: int, n: int) -> int:
    if batch % n:
        raise ValueError(f"the global mini-batch M={batch} must divide by the world size "
                         f"R={n} (each rank takes M/R examples); try M={batch - batch % n}")
    return batch // n


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
def _sgd_update(model: nn.Module, lr: float) -> None:
    """Plain SGD, p ← p − lr·∇p (no torch.optim: its first use costs seconds of imports)."""
    for p in model.parameters():
        p -= lr * p.grad


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

def sync_sgd_step(model: nn.Module, loss_fn: Callable, X: torch.Tensor, y: torch.Tensor,
                  lr: float, allreduce: Callable = dist.all_reduce,
                  timeline: Timeline | None = None, straggler: Straggler | None = None,
                  barrier: bool = False) -> float:
    """One step of synchronous SGD on this rank (seed 002, lesson 05); returns the loss.

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
    return model.to(dev), loss_fn, X.to(dev), y.to(dev), n, rank, _local_batch(batch, n)


def sync_sgd(workload: str = "digits-mlp", steps: int = 30, batch: int = 64, lr: float = 0.1,
             seed: int = 0, straggler: Straggler | None = None,
             allreduce: str | Callable = "dist.all_reduce", barrier: bool = True,
             eval_every: int = 0, skew: float = 0.0) -> Run:
    """Worker function: ``steps`` of synchronous SGD with a global mini-batch ``batch``.

    Each rank samples M/R examples of its own shard per step. ``allreduce`` is a name
    from ``collectives.ALGORITHMS`` or a function; ``eval_every`` > 0 records the
    training-set loss every so many steps (off the clock).
    """
    model, loss_fn, X, y, n, rank, b = _prepare(workload, batch, seed, skew)
    idx = batch_indices(len(y), b, steps, seed, rank)
    run, reduce = Run(rank), _allreduce_fn(allreduce)
    run.timeline.rank = rank
    dist.barrier()
    clock = _Clock()
    for t in range(steps):
        run.timeline.step = t
        loss = sync_sgd_step(model, loss_fn, X[idx[t]], y[idx[t]], lr, reduce,
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
    run, reduce = Run(rank), _allreduce_fn(allreduce)
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
            _sgd_update(model, lr)
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
    """Worker function: Dekel et al.'s distributed mini-batch (seed 002, Algorithm 3).

    Each of k ranks sums the gradients of b/k inputs into ĝ_j, then *starts* the vector
    sum (an asynchronous ``dist.all_reduce``) and, while it is in flight, serves μ/k more
    inputs with the current w_j; only then does it wait for the sum, divide by b and
    update. ``use_extra`` also adds those μ/k inputs' gradients to the next ĝ (keep
    computing updates while aggregating); ``overlap=False`` waits for the sum first
    (the synchronous baseline). ``served`` counts the inputs predicted.
    """
    model, loss_fn, X, y, n, rank, b = _prepare(workload, batch, seed, 0.0)
    m = _local_batch(mu, n) if mu else 0
    idx = batch_indices(len(y), b + m, steps, seed, rank)
    run = Run(rank)
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


# ----------------------------------------------------- overlap with backward

class GradientBuckets:
    """Allreduce gradients in buckets *during* the backward pass, as DDP does (lesson 06).

    Parameters are grouped in reverse order (backward reaches the last layers first)
    into buckets of about ``bucket_bytes``. A hook fires as each gradient is ready; when a
    bucket is complete its asynchronous allreduce starts at once, while backward goes on
    with earlier layers. ``wait()`` finishes them all and leaves the averaged gradients in
    ``.grad``. ``remove()`` takes the hooks off.
    """

    def __init__(self, model: nn.Module, bucket_bytes: int = 1 << 18):
        if bucket_bytes < 1:
            raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
        params = [p for p in model.parameters() if p.requires_grad][::-1]
        self.buckets: list[list[nn.Parameter]] = [[]]
        size = 0
        for p in params:
            if size >= bucket_bytes:
                self.buckets.append([])
                size = 0
            self.buckets[-1].append(p)
            size += p.numel() * p.element_size()
        self._index = {id(p): i for i, b in enumerate(self.buckets) for p in b}
        self._ready = [0] * len(self.buckets)
        self._inflight: list[tuple[int, dist.Work, torch.Tensor]] = []
        self._hooks = [p.register_post_accumulate_grad_hook(self._grad_ready) for p in params]

    def _grad_ready(self, p: torch.Tensor) -> None:
        i = self._index[id(p)]
        self._ready[i] += 1
        if self._ready[i] == len(self.buckets[i]):            # the bucket is full: send it
            flat = torch.cat([q.grad.reshape(-1) for q in self.buckets[i]])
            self._inflight.append((i, dist.all_reduce(flat, async_op=True), flat))

    def wait(self) -> None:
        """Finish every bucket's allreduce; write the averaged gradients back."""
        n = dist.get_world_size()
        for i, work, flat in self._inflight:
            work.wait()
            offset = 0
            for q in self.buckets[i]:
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q.grad) / n)
                offset += q.numel()
        self._inflight.clear()
        self._ready = [0] * len(self.buckets)

    def remove(self) -> None:
        for h in self._hooks:
            h.remove()


def overlap_backward(workload: str = "digits-wide-mlp", batch: int = 256,
                     bucket_bytes: int = 1 << 18, repeats: int = 5) -> dict[str, float]:
    """Worker function: seconds of backward alone, of backward *then* one allreduce of all
    gradients, and of backward with bucketed allreduces overlapping it (lesson 06)."""
    model, train, _, loss_fn = build(workload)
    X, y = train.tensors()
    dev = device()
    model, X, y = model.to(dev), X[:batch].to(dev), y[:batch].to(dev)

    def step(mode: str, buckets: GradientBuckets | None) -> float:
        dist.barrier()
        t0 = time.perf_counter()
        model.zero_grad()
        loss_fn(model(X), y).backward()
        if mode == "sequential":
            g = flat_grads(model)
            dist.all_reduce(g)
        elif buckets is not None:
            buckets.wait()
        return time.perf_counter() - t0

    times: dict[str, list[float]] = {"backward only": [], "backward, then allreduce": []}
    for _ in range(repeats + 1):
        times["backward only"].append(step("alone", None))
        times["backward, then allreduce"].append(step("sequential", None))
    buckets = GradientBuckets(model, bucket_bytes)
    times["allreduce in buckets during backward"] = [step("buckets", buckets)
                                                      for _ in range(repeats + 1)]
    buckets.remove()
    out = {k: float(np.median(v[1:])) for k, v in times.items()}
    out["buckets"] = len(buckets.buckets)
    return out


# ------------------------------------------------------------------ measures

def replay_single_process(workload: str, steps: int, batch: int, lr: float, world_size: int,
                          seed: int = 0, skew: float = 0.0) -> torch.Tensor:
    """One process, one model, the same global minibatches as ``sync_sgd`` on R ranks.

    Synchronous SGD computes exactly this (up to float rounding): the seed's "the
    computation is completely deterministic". Returns the final parameters.
    """
    model, train, _, loss_fn = build(workload, seed)
    b = _local_batch(batch, world_size)
    shards = [shard(train, world_size, r, skew=skew, seed=seed).tensors()
              for r in range(world_size)]
    idx = [batch_indices(len(sy), b, steps, seed, r) for r, (_, sy) in enumerate(shards)]
    for t in range(steps):
        X = torch.cat([sx[idx[r][t]] for r, (sx, _) in enumerate(shards)])
        y = torch.cat([sy[idx[r][t]] for r, (_, sy) in enumerate(shards)])
        model.zero_grad()
        loss_fn(model(X), y).backward()
        _sgd_update(model, lr)
    return flat_params(model)


def compute_vs_communication(workload: str = "digits-mlp", batch: int = 32,
                             repeats: int = 5) -> dict[str, float]:
    """Worker function: seconds of one forward+backward on ``batch`` local examples and of
    one allreduce of the gradients, and their ratio (lesson 05: CNN vs MLP, batch size)."""
    model, train, _, loss_fn = build(workload)
    X, y = train.tensors()
    dev = device()
    model, X, y = model.to(dev), X[:batch].to(dev), y[:batch].to(dev)
    comp, comm = [], []
    for i in range(repeats + 1):
        dist.barrier()
        t0 = time.perf_counter()
        model.zero_grad()
        loss_fn(model(X), y).backward()
        g = flat_grads(model)
        t1 = time.perf_counter()
        dist.barrier()
        t2 = time.perf_counter()
        dist.all_reduce(g)
        t3 = time.perf_counter()
        if i:
            comp.append(t1 - t0)
            comm.append(t3 - t2)
    c, m = float(np.median(comp)), float(np.median(comm))
    return {"compute": c, "communicate": m, "ratio": c / m,
            "params": sum(p.numel() for p in model.parameters())}


def least_disturbed(cluster, fn: Callable, *args, repeats: int = 2, **kwargs) -> list[Run]:
    """Run ``fn`` on ``cluster`` ``repeats`` times; keep the fastest run (the one least
    disturbed by other programs on a shared machine), as timing a figure needs."""
    best: list[Run] | None = None
    for _ in range(repeats):
        runs = cluster.run(fn, *args, **kwargs)
        if best is None or max(r.time[-1] for r in runs) < max(r.time[-1] for r in best):
            best = runs
    return best


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


def plot_loss_curves(runs: dict[str, Sequence[Run]], axes=None):
    """Training loss of the global model vs wall time and vs communication rounds
    (lesson 05's averaging periods): one curve per entry of ``runs``."""
    import matplotlib.pyplot as plt
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(11, 3.6))
    for label, rs in runs.items():
        ev = np.array(rs[0].evals)
        for ax, col in zip(axes, (1, 2)):
            ax.plot(ev[:, col], ev[:, 3], "o-", ms=3, label=label)
    axes[0].set(xlabel="wall time (s, evaluation excluded)", ylabel="training loss",
                title="loss vs wall time")
    axes[1].set(xlabel="communication rounds (allreduces)", title="loss vs communication",
                xscale="symlog")
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.set_yscale("log")
    axes[0].legend(fontsize=8)
    axes[0].figure.tight_layout()
    return axes


def plot_timelines(runs: dict[str, Sequence[Run]], steps: Sequence[int] | None = None,
                   axes=None):
    """One timeline per entry of ``runs`` (e.g. without / with a straggler), stacked on a
    common time axis; ``steps`` keeps only those steps, e.g. ``range(1, 6)`` (lesson 05)."""
    import matplotlib.pyplot as plt
    from ddl_lab.timeline import plot_timeline
    if axes is None:
        n = len(next(iter(runs.values())))
        _, axes = plt.subplots(len(runs), 1, figsize=(11, 1.1 + 0.55 * n * len(runs)),
                               sharex=True, squeeze=False)
        axes = axes[:, 0]
    for ax, (label, rs) in zip(axes, runs.items()):
        tls = [r.timeline for r in rs]
        if steps is not None:
            keep = set(steps)
            tls = [Timeline(t.rank, [s for s in t.spans if s.step in keep]) for t in tls]
        plot_timeline(tls, ax=ax, title=label)
    for ax in axes[:-1]:
        ax.set_xlabel("")
        ax.get_legend().remove()
    return axes
