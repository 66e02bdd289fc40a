"""The budget meter (lesson 15): run a training plan on real workers and measure it.

A *plan* is a function that runs on every worker::

    def my_plan(model, batches, wire):
        for X, y in batches:            # this worker's mini-batches: at most budget.steps
            ...                         # compute, talk (wire.*, dist.*, DDP), update
        return model                    # the trained model, the same on every worker

``model`` is this worker's digits CNN (``ml.models.SmallCNN``, the same initial weights
everywhere), ``batches`` its own (skewed) shard of the training digits, cut into
mini-batches, ``wire`` the metered network (``capstone.wire``). ``measure(plan)`` runs it
on ranks 0…n−1 of the warm cluster the checks share (``runtime.worlds``, one gloo group of
n) and returns a ``Result``: the test accuracy of the model the workers
end with, the bytes each put on the wire (counted by the meter), the steps each drew, its
communication calls and the wall time — and what each worker did past the meter: every
other channel is closed or recorded (``capstone.channels``), and the examples its models
ran on are recorded (``capstone.examples``). ``scaling_table`` runs a plan on 1, 2 and 4
workers.
"""
from __future__ import annotations

import functools
import math
import time
from collections import Counter
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.capstone.budget import BUDGET, Budget, size_text
from ddl_lab.capstone.channels import Touch, sealed
from ddl_lab.capstone.examples import ExamplesSeen
from ddl_lab.capstone.wire import Wire, metered, metered_server
from ddl_lab.ml.data import Dataset, digits, shard
from ddl_lab.ml.models import SmallCNN, flat_params
from ddl_lab.ml.training import evaluate_accuracy
from ddl_lab.runtime.costs import sent_bytes
from ddl_lab.runtime.wiretap import Wiretap

__all__ = ["Batches", "RankReport", "WorkerReport", "Ranks", "Result", "tampered_with", "PlanFailed", "measure", "scaling_table",
           "table_text", "initial_model", "fp32_allreduce_bytes"]


@functools.lru_cache(maxsize=2)
def _digits() -> tuple[Dataset, Dataset]:
    return digits(seed=0)


def initial_model(seed: int = 0) -> nn.Module:
    """The CNN every worker starts from (the same weights for the same ``seed``)."""
    torch.manual_seed(seed)
    return SmallCNN()


def fp32_allreduce_bytes(n: int = 4) -> float:
    """Bytes the meter charges a worker for one allreduce of the whole fp32 model on n."""
    return sent_bytes("all_reduce", n, 4 * sum(p.numel() for p in SmallCNN().parameters()))


class Batches:
    """This worker's mini-batches (X (b, 64) float32, y (b,) int64): its shard reshuffled
    every pass, at most ``steps`` of them in all — the step budget. ``handed``: the rows
    of the shard it has handed out."""

    def __init__(self, data: Dataset, batch_size: int, steps: int, seed: int):
        self.X, self.y = data.tensors()
        self.batch_size, self.steps = batch_size, steps
        self.drawn = 0
        self.handed: set[int] = set()
        self._gen = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return self.steps

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        per_pass = max(1, len(self.y) // self.batch_size)
        while self.drawn < self.steps:
            order = torch.randperm(len(self.y), generator=self._gen)
            for b in range(per_pass):
                if self.drawn >= self.steps:
                    return
                self.drawn += 1
                rows = order[b * self.batch_size:(b + 1) * self.batch_size]
                self.handed.update(rows.tolist())
                yield self.X[rows], self.y[rows]

    def __repr__(self) -> str:
        return (f"Batches({self.steps} steps of {self.batch_size} examples from "
                f"{len(self.y)}, {self.drawn} drawn)")


@dataclass
class RankReport:
    """What the meter charged one rank (lesson 15, parts 1 and 2): the bytes it ``sent``, its
    calls and bytes per operation, its calls per (operation, size), the steps it drew and
    its wall time."""

    rank: int
    sent: float
    calls: dict[str, int]
    by_op: dict[str, float]
    sizes: dict[tuple[str, int], int]
    steps: int
    wall: float


@dataclass
class WorkerReport(RankReport):
    """What the meter saw on one worker; beside the wire: what it did past the meter
    (``touched``), and the examples its models ran on — of its shard (``own``, of the
    ``handed`` rows ``batches`` gave out from ``shard`` in all) and of other workers'
    shards (``foreign``); ``tampered``: what the meter's own tally saw go out, when the
    plan changed the tap's count (its ``sent`` or its records)."""

    params: np.ndarray | None
    accuracy: float | None
    returned: str               # what the plan returned, when it was not a model
    reported: float | None      # a byte count the plan returned beside its model
    touched: tuple[Touch, ...] = ()
    own: int = 0
    foreign: int = 0
    handed: int = 0
    shard: int = 0
    tampered: float | None = None   # what the meter saw go out, if the plan changed its count


def _unwrap(out: Any) -> tuple[nn.Module | None, str, float | None]:
    """(the model, what came back if it is not a model, a byte count returned with it)."""
    if isinstance(out, nn.parallel.DistributedDataParallel):
        out = out.module
    if isinstance(out, nn.Module):
        return out, "", None
    parts = list(out.values()) if isinstance(out, dict) else (
        list(out) if isinstance(out, (tuple, list)) else [])
    numbers = [float(p) for p in parts if isinstance(p, (int, float)) and not isinstance(p, bool)]
    what = "None" if out is None else f"a {type(out).__name__}"
    return None, what, (numbers[0] if numbers else None)


def _charged(tap: Wiretap) -> tuple[dict[str, int], dict[str, float], dict[tuple[str, int], int]]:
    """Of the operations that carried bytes: calls and bytes per operation, calls per
    (operation, S)."""
    calls: Counter = Counter()
    by_op: Counter = Counter()
    sizes: Counter = Counter()
    for op in tap.ops:
        if op.nbytes and op.sent:
            calls[op.op] += 1
            by_op[op.op] += op.sent
            sizes[(op.op, op.nbytes)] += 1
    return dict(calls), dict(by_op), dict(sizes)


def tampered_with(tap: Wiretap, tally: list[float]) -> float | None:
    """What the meter's own tally saw go out, if the tap's count (its ``sent`` or its
    records) no longer agrees with it — the plan changed it; else None."""
    counted = (tap.sent, sum(op.sent for op in tap.ops))
    return None if all(math.isclose(c, tally[0], rel_tol=1e-9, abs_tol=1e-6)
                       for c in counted) else tally[0]


def _worker(plan: Callable, budget: Budget, seed: int, server: tuple | None) -> WorkerReport:
    """On every worker: build its model and batches, run ``plan`` on the metered wire."""
    rank, n = dist.get_rank(), dist.get_world_size()
    train, test = _digits()
    mine = shard(train, n, rank, skew=budget.skew, seed=seed)
    batches = Batches(mine, budget.batch_size, budget.steps, 1000 * seed + rank)
    model = initial_model(seed)
    seen = ExamplesSeen(mine, train)
    client = None
    if server is not None:
        from ddl_lab.parameter_server.wire import ShardClient
        client = ShardClient(*server, name=f"worker {rank}")
    dist.barrier()
    tally = [0.0]                           # the meter's own sum, beside the tap's
    with metered(tally) as tap, (metered_server(tap, tally) if client else nullcontext()):
        if client is not None:
            client.join()
            dist.barrier()
        t0 = time.perf_counter()
        try:
            with sealed() as touched, seen:
                out = plan(model, batches, Wire(tap, client))
        finally:
            wall = time.perf_counter() - t0
            if client is not None:
                client.close()
    tampered = tampered_with(tap, tally)
    trained, returned, reported = _unwrap(out)
    calls, by_op, sizes = _charged(tap)
    return WorkerReport(rank, tap.sent, calls, by_op, sizes, batches.drawn, wall,
                        None if trained is None else flat_params(trained).numpy(),
                        None if trained is None else evaluate_accuracy(trained, test),
                        returned, reported, tuple(touched), seen.own, seen.foreign,
                        len(batches.handed), len(mine), tampered)


class Ranks:
    """What a measured run's ranks report, taken together (parts 1 and 2 of lesson 15): the
    ``reports`` in rank order, each with its ``sent``, ``steps``, ``wall`` and ``params``."""

    reports: list

    @property
    def sent(self) -> list[float]:
        """Bytes each worker put on the wire, in rank order."""
        return [r.sent for r in self.reports]

    @property
    def bytes(self) -> float:
        """The most any worker sent: what the byte budget judges."""
        return max(self.sent)

    @property
    def steps(self) -> int:
        return max(r.steps for r in self.reports)

    @property
    def wall(self) -> float:
        return max(r.wall for r in self.reports)

    @property
    def spread(self) -> float:
        """The largest |θ_r − θ_0| over the ranks (0: they agree; NaN: a rank returned no
        model)."""
        ps = [r.params for r in self.reports]
        if any(p is None for p in ps):
            return float("nan")
        return max(float(np.abs(p - ps[0]).max()) for p in ps)


@dataclass
class Result(Ranks):
    """A plan's run, measured (lesson 15). ``accuracy`` is rank 0's model on the held-out
    digits; ``spread`` the largest |θ_r − θ_0| over workers (0: they agree)."""

    budget: Budget
    world_size: int
    reports: list[WorkerReport] = field(repr=False)

    @property
    def accuracy(self) -> float:
        return self.reports[0].accuracy if self.reports[0].accuracy is not None else 0.0

    @property
    def accuracies(self) -> list[float | None]:
        return [r.accuracy for r in self.reports]

    @property
    def rounds(self) -> int:
        """Communication calls of the busiest worker (each all-gather, allreduce, send …)."""
        return max(sum(r.calls.values()) for r in self.reports)

    def shortfalls(self) -> list[str]:
        """What misses the budget, in words (empty: within budget)."""
        b, out = self.budget, []
        if self.accuracy < b.target:
            out.append(f"accuracy {100 * self.accuracy:.1f}% < {100 * b.target:.0f}%")
        if self.bytes > b.bytes:
            out.append(f"{size_text(self.bytes)} sent > {size_text(b.bytes)} "
                       f"({self.bytes / b.bytes:.1f}× the budget)")
        if self.wall > b.seconds:
            out.append(f"{self.wall:.1f} s > {b.seconds:g} s")
        if self.spread > 1e-4:
            out.append(f"the workers' models differ (by up to {self.spread:.2g})")
        foreign = max(r.foreign for r in self.reports)
        if foreign:
            out.append(f"a worker's models ran on {foreign:,} examples of other workers' shards")
        touched = sorted({t.what for r in self.reports for t in r.touched})
        if touched:
            out.append(f"data past the meter ({touched[0]}" + (
                f" and {len(touched) - 1} more)" if len(touched) > 1 else ")"))
        if any(r.tampered is not None for r in self.reports):
            out.append("the meter's count was changed by the plan")
        return out

    def summary(self) -> str:
        """One line: accuracy, bytes per worker, steps, calls, time, and the verdict."""
        if any(r.params is None for r in self.reports):
            return f"{self.world_size} workers: no model came back"
        miss = self.shortfalls()
        calls = f"{self.rounds} communication call" + ("s" if self.rounds != 1 else "")
        return (f"{self.world_size} workers: {100 * self.accuracy:.1f}% test accuracy, "
                f"{size_text(self.bytes)} sent per worker, {self.steps} steps, {calls}, "
                f"{self.wall:.1f} s — "
                + ("within budget" if not miss else "misses the brief: " + "; ".join(miss)))


class PlanFailed(RuntimeError):
    """The plan failed on the workers; ``failure`` says how (a ``runtime.worlds.RankFailure``:
    the stub, an exception on a rank, a deadlock, the time limit)."""

    def __init__(self, failure: Any, name: str, n: int):
        super().__init__(failure.message(name, n))
        self.failure = failure


def measure(plan: Callable, budget: Budget = BUDGET, world_size: int | None = None,
            seed: int = 0, parameter_server: dict | None = None,
            timeout: float = 120.0) -> Result:
    """Run ``plan`` on ``world_size`` workers (default: the budget's) of the warm shared
    cluster and measure it. ``parameter_server``: the options of a lesson-07
    ``ParameterServer`` to start for the plan (``wire.server`` is then each worker's client),
    e.g. ``dict(shards=2, rule="sgd", lr=0.1, mode="ssp", s=2)``."""
    from ddl_lab.runtime.worlds import WorldFailed, run_in_world
    n = world_size or budget.world_size
    name = getattr(plan, "__name__", "the plan")
    ps = None
    try:
        if parameter_server is not None:
            from ddl_lab.parameter_server.server import ParameterServer
            ps = ParameterServer(flat_params(initial_model(seed)).numpy(), **parameter_server)
        args = (plan, budget, seed, ps.client_args() if ps else None)
        try:
            reports = run_in_world(_worker, n, *args, fn=plan, timeout=timeout)
        except WorldFailed as e:
            raise PlanFailed(e.failure, name, n) from None
    finally:
        if ps is not None:
            ps.close()
    return Result(budget, n, reports)


def scaling_table(plan: Callable, world_sizes: Sequence[int] = (1, 2, 4),
                  budget: Budget = BUDGET, seed: int = 0, **options: Any) -> list[Result]:
    """``plan`` measured on each number of workers (same budget per worker)."""
    return [measure(plan, budget, n, seed, **options) for n in world_sizes]


def table_text(results: Sequence[Result]) -> str:
    """The scaling-and-accuracy table: workers, accuracy, bytes, steps, calls, time,
    examples per second and speed-up over the first row."""
    def rate(r: Result) -> float:
        return r.world_size * r.steps * r.budget.batch_size / max(r.wall, 1e-9)
    base = rate(results[0])
    lines = [f"{'workers':>7} {'accuracy':>9} {'sent/worker':>12} {'steps':>6} {'calls':>6} "
             f"{'time':>7} {'examples/s':>11} {'speed-up':>9}"]
    for r in results:
        speedup = f"{rate(r) / base:>8.2f}×" if base else f"{'-':>9}"
        lines.append(f"{r.world_size:>7} {100 * r.accuracy:>8.1f}% {size_text(r.bytes):>12} "
                     f"{r.steps:>6} {r.rounds:>6} {r.wall:>6.1f}s {rate(r):>11,.0f} {speedup}")
    return "\n".join(lines)
