"""Micro-batch pipelines by hand, with what ran when (lesson 09; GPipe and PipeDream's 1F1B).

A schedule is, for each rank, an order of operations: ``("F", i)`` runs the forward of
micro-batch i, ``("B", i)`` its backward. GPipe (Huang et al. 2019) runs all m forwards,
then all m backwards: simple, but every stage holds the activations of all m
micro-batches at once. 1F1B (PipeDream, Narayanan et al. 2019) warms up with
p − rank − 1 forwards, then alternates one forward, one backward, and drains: the same
bubble, but at most p − rank micro-batches in flight on rank ``rank``.

``run_schedule`` executes any order on one stage, sending without blocking (so two
neighbours that send to each other at once do not deadlock), recording a ``Timeline``
(forward / backward / wait / communicate, ``span.step`` = the micro-batch) and the bytes
autograd keeps for backward (``ActivationMeter``, from ``ml.activations``). ``pipeline_run``
is the worker: the same model on every rank, cut into p stages, trained for a few steps; it
equals ``stages.stage_step`` for the GPipe order and one process for every order.
"""
from __future__ import annotations

import time
from numbers import Integral
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.ml.activations import ActivationMeter
from ddl_lab.ml.models import flat_params
from ddl_lab.timeline import Timeline
from ddl_lab.model_parallel.stages import (build_layers, cut, digits_batches, full_step,
                                           group, loss_share, microbatches, neighbours,
                                           pad_stage)

__all__ = ["Op", "gpipe_order", "one_f_one_b_order", "naive_order", "SCHEDULES",
           "in_flight", "validate_order", "ActivationMeter", "run_schedule", "StageRun",
           "pipeline_run", "single_process_run", "bubble_fraction", "bubble_of_ideal",
           "ideal_bubble", "step_time", "sgd_update", "stage_params", "input_shape"]

Op = tuple[str, int]


# ------------------------------------------------------------------ schedules

def gpipe_order(rank: int, p: int, m: int) -> list[Op]:
    """GPipe: every forward, then every backward (the same on every rank)."""
    return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


def one_f_one_b_order(rank: int, p: int, m: int) -> list[Op]:
    """1F1B on ``rank`` of ``p`` stages: warm up, then one forward / one backward, drain."""
    warmup = min(p - rank - 1, m)
    order = [("F", i) for i in range(warmup)]
    for i in range(warmup, m):
        order += [("F", i), ("B", i - warmup)]
    return order + [("B", i) for i in range(m - warmup, m)]


def naive_order(rank: int, p: int, m: int) -> list[Op]:
    """No pipelining: each micro-batch goes all the way forward and back before the next."""
    return [op for i in range(m) for op in (("F", i), ("B", i))]


SCHEDULES: dict[str, Callable[[int, int, int], list[Op]]] = {
    "none": gpipe_order,          # with m = 1: the whole batch, one stage at a time
    "gpipe": gpipe_order, "1f1b": one_f_one_b_order, "serial": naive_order}


def in_flight(order: Sequence[Op]) -> int:
    """The most micro-batches whose forward has run and whose backward has not."""
    live = peak = 0
    for op, _ in order:
        live += 1 if op == "F" else -1
        peak = max(peak, live)
    return peak


def validate_order(order: Sequence[Op], m: int) -> str | None:
    """What is wrong with ``order`` as a schedule of m micro-batches, or None."""
    seen: dict[Op, int] = {}
    for k, item in enumerate(order):
        if (not isinstance(item, (tuple, list)) or len(item) != 2 or item[0] not in ("F", "B")
                or not isinstance(item[1], Integral) or not 0 <= item[1] < m):
            return (f"item {k} is {item!r}; each item must be ('F', i) or ('B', i) with "
                    f"0 <= i < m = {m}")
        op = (item[0], int(item[1]))
        if op in seen:
            return f"{op} appears twice (items {seen[op]} and {k})"
        if op[0] == "B" and ("F", op[1]) not in seen:
            return f"('B', {op[1]}) comes before ('F', {op[1]}): backward needs the forward"
        seen[op] = k
    missing = [(o, i) for i in range(m) for o in "FB" if (o, i) not in seen]
    return f"{missing[0]} is missing ({len(missing)} operations missing)" if missing else None


# ---------------------------------------------------------------- the engine

def _span(tl: Timeline | None, kind: str):
    return tl.span(kind) if tl is not None else nullcontext()


class _Receives:
    """The receives of one stage's order, posted ahead (``irecv`` into buffers of known
    shape, tagged by micro-batch), so that data arrives while the stage computes."""

    def __init__(self, order: Sequence[Op], batches: Sequence, prev: int | None,
                 nxt: int | None, in_shape: Sequence[int], dtype: torch.dtype):
        self.order, self.batches, self.prev, self.nxt = order, batches, prev, nxt
        self.in_shape, self.dtype = tuple(in_shape), dtype
        self.posted: dict[int, tuple] = {}

    def post(self, k: int, kept: dict) -> None:
        """Post the receive that operation ``k`` needs, if it needs one and its shape is
        known (a gradient's is, once the forward of its micro-batch has run)."""
        if k >= len(self.order) or k in self.posted:
            return
        op, i = self.order[k]
        if op == "F" and self.prev is not None:
            buf = torch.empty((len(self.batches[i][1]), *self.in_shape), dtype=self.dtype)
            self.posted[k] = (dist.irecv(buf, self.prev, tag=i), buf)
        elif op == "B" and self.nxt is not None and i in kept:
            buf = torch.empty_like(kept[i][1])
            self.posted[k] = (dist.irecv(buf, self.nxt, tag=i), buf)

    def take(self, k: int, kept: dict, timeline: Timeline | None) -> torch.Tensor:
        """Wait for operation ``k``'s tensor (recorded as ``wait``)."""
        self.post(k, kept)
        work, buf = self.posted.pop(k)
        with _span(timeline, "wait"):
            work.wait()
        return buf


def run_schedule(stage: nn.Module, order: Sequence[Op], batches: Sequence, loss_fn: Callable,
                 prev: int | None, nxt: int | None, in_shape: Sequence[int] = (),
                 timeline: Timeline | None = None, meter: ActivationMeter | None = None,
                 on_wait: Callable[[str, int, int], None] | None = None,
                 outputs: list | None = None, lookahead: int = 4,
                 dtype: torch.dtype = torch.float32) -> float | None:
    """Run one stage's ``order`` of forwards and backwards over ``batches`` (lesson 09).

    ``in_shape``: the shape of one example's activation entering this stage. Sends do
    not block (``isend``); the receives of the next ``lookahead`` operations are posted
    ahead, and waiting for one is recorded as ``wait``. ``on_wait(what, i, peer)`` is
    told before each wait (a check uses it to explain a deadlock); ``outputs`` collects
    the stage's micro-batch outputs. Returns the batch loss on the last stage.
    """
    total = sum(len(y) for _, y in batches)
    kept: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    recv = _Receives(order, batches, prev, nxt, in_shape, dtype)
    pending: list = []
    loss = 0.0
    recording = meter.recording if meter is not None else nullcontext
    if meter is not None:
        meter.resident(*stage.parameters())
    for k, (op, i) in enumerate(order):
        if timeline is not None:
            timeline.step = i
        for j in range(k, k + lookahead):
            recv.post(j, kept)
        pending = [(w, t) for w, t in pending if not w.is_completed()]   # sent: let go
        if op == "F":
            x, y = batches[i]
            if meter is not None:
                meter.resident(*([y] if prev is not None else [x, y]))
            if prev is not None:
                if on_wait:
                    on_wait("activation", i, prev)
                x = recv.take(k, kept, timeline).requires_grad_()
            with _span(timeline, "forward"), recording():
                out = stage(x)
                if outputs is not None:
                    outputs.append(out.detach().clone())
                if nxt is None:
                    out = loss_fn(out, y) * loss_share(loss_fn, len(y), total)
            if nxt is not None:
                with _span(timeline, "communicate"):
                    sent = out.detach()
                    pending.append((dist.isend(sent, nxt, tag=i), sent))
            kept[i] = (x, out)
        else:
            grad = None
            if nxt is not None:
                if on_wait:
                    on_wait("gradient", i, nxt)
                grad = recv.take(k, kept, timeline)
            x, out = kept.pop(i)
            with _span(timeline, "backward"):
                out.backward(grad)
            if nxt is None:
                loss += out.item()
            if prev is not None:
                with _span(timeline, "communicate"):
                    pending.append((dist.isend(x.grad, prev, tag=i), x.grad))
            del x, out, grad                       # this micro-batch's graph is freed now
    with _span(timeline, "wait"):
        for work, _ in pending:
            work.wait()
    return loss if nxt is None else None


# ---------------------------------------------------------------- the worker

@dataclass
class StageRun:
    """What one stage recorded (lesson 09): one ``Timeline`` per step, the losses (last
    stage), its parameters after training, the peak bytes of saved activations, the
    time of each step and (``keep_outputs``) its stacked micro-batch outputs of step 0;
    ``v`` chunks per rank (the interleaved schedule) and ``pad``, the seconds of padded
    (sleeping) compute per example the stage was given — its times are then emulated."""

    rank: int
    p: int
    m: int
    schedule: str
    timelines: list[Timeline] = field(default_factory=list)
    losses: list[float] = field(default_factory=list)
    params: torch.Tensor | None = None
    peak_activations: int = 0
    step_times: list[float] = field(default_factory=list)
    outputs: torch.Tensor | None = None
    v: int = 1
    pad: float = 0.0

    @property
    def emulated(self) -> str:
        """'' for real compute, else what the padding emulates (for printouts and plots)."""
        if not self.pad:
            return ""
        per = "stage" if self.v == 1 else f"rank ({1e3 * self.pad / self.v:g} ms per chunk)"
        return f"emulated: compute padded (sleep) to {1e3 * self.pad:g} ms per example and {per}"


@torch.no_grad()
def input_shape(stages: Sequence[nn.Module], k: int, example: Sequence[int] = (64,)
                ) -> tuple[int, ...]:
    """The shape of one example's activation entering stage ``k`` (a 1-example dry run)."""
    x = torch.zeros(1, *example)
    for s in stages[:k]:
        x = s(x)
    return tuple(x.shape[1:])


def stage_params(stage: nn.Module) -> torch.Tensor:
    """A stage's parameters as one flat copy (empty for a stage without any, e.g. a ReLU)."""
    return flat_params(stage) if any(True for _ in stage.parameters()) else torch.zeros(0)


@torch.no_grad()
def sgd_update(module: nn.Module, lr: float) -> None:
    """p ← p − lr·∇p, then zero the gradients (no torch.optim: faster to start)."""
    for q in module.parameters():
        if q.grad is not None:
            q -= lr * q.grad
            q.grad = None


def pipeline_run(kind: str = "mlp", p: int = 2, m: int = 4, schedule: str = "gpipe",
                 steps: int = 1, batch: int = 32, lr: float = 0.1, pad: float = 0.0,
                 seed: int = 0, hidden: int = 64, keep_outputs: bool = False
                 ) -> StageRun | None:
    """Worker function: train ``kind`` cut into ``p`` stages on ranks 0..p−1 (lesson 09).

    ``schedule``: 'none' (the whole batch as one micro-batch), 'gpipe', '1f1b' or
    'serial'; ``pad`` seconds of padded compute per example and stage. Ranks from p on
    have no stage and return None.
    """
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown schedule {schedule!r}: use one of {list(SCHEDULES)}")
    n, rank = dist.get_world_size(), dist.get_rank()
    if not 1 <= p <= n:
        raise ValueError(f"p = {p} stages need between 1 and {n} ranks (the cluster has {n})")
    ranks = list(range(p))
    g = group(ranks)
    if rank >= p:
        return None
    m = 1 if schedule == "none" else m
    stages = cut(build_layers(kind, hidden, seed), p)
    stage = pad_stage(stages[rank], pad)
    prev, nxt = neighbours(rank, ranks)
    loss_fn = nn.CrossEntropyLoss()
    order = SCHEDULES[schedule](rank, p, m)
    run = StageRun(rank, p, m, schedule, pad=pad)
    meter, shape = ActivationMeter(), input_shape(stages, rank)
    for t, (X, y) in enumerate(digits_batches(batch, steps, seed)):
        tl = Timeline(rank=rank)
        outs: list | None = [] if keep_outputs and t == 0 else None
        dist.barrier(group=g)
        t0 = time.perf_counter()
        loss = run_schedule(stage, order, microbatches(X, y, m), loss_fn, prev, nxt,
                            shape, tl, meter, outputs=outs)
        run.step_times.append(time.perf_counter() - t0)
        run.timelines.append(tl)
        if loss is not None:
            run.losses.append(loss)
        if outs:
            run.outputs = torch.cat(outs)
        sgd_update(stage, lr)
    run.params = stage_params(stage)
    run.peak_activations = meter.peak
    return run


def single_process_run(kind: str = "mlp", steps: int = 1, batch: int = 32, lr: float = 0.1,
                       seed: int = 0, hidden: int = 64, p: int = 1
                       ) -> tuple[list[float], list[torch.Tensor]]:
    """The same training in one process: the losses, and the parameters of each of the
    ``p`` stages ``pipeline_run`` would cut (to compare stage by stage)."""
    layers = build_layers(kind, hidden, seed)
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for X, y in digits_batches(batch, steps, seed):
        losses.append(full_step(layers, [(X, y)], loss_fn))
        sgd_update(layers, lr)
    return losses, [stage_params(s) for s in cut(layers, p)]


# ------------------------------------------------------------------ measures

def ideal_bubble(p: int, m: int, v: int = 1) -> float:
    """GPipe's bubble: the idle share of a step, (p − 1)/(m + p − 1); with v chunks per rank
    (interleaved) (p − 1)/(v·m + p − 1)."""
    return (p - 1) / (v * m + p - 1)


def bubble_fraction(runs: Sequence[StageRun | None], step: int = -1) -> float:
    """Measured idle share of one step: 1 − (time the p stages computed) / (p × makespan),
    the makespan from the first span of any stage to the last."""
    tls = [r.timelines[step] for r in runs if r is not None]
    start = min(tl.start for tl in tls)
    span = max(tl.end for tl in tls) - start
    busy = sum(tl.total("forward") + tl.total("backward") for tl in tls)
    return 1.0 - busy / (len(tls) * span)


def bubble_of_ideal(runs: Sequence[StageRun | None], step: int = -1) -> float:
    """The same idle time as ``bubble_fraction`` against the busy time instead of the step:
    Megatron-LM's convention, (p − 1)/m for GPipe and 1F1B, (p − 1)/(v·m) interleaved."""
    b = bubble_fraction(runs, step)
    return b / (1.0 - b)


def step_time(runs: Sequence[StageRun | None], skip: int = 1) -> float:
    """Median over steps (the first ``skip`` left out) of the slowest stage's step time."""
    runs = [r for r in runs if r is not None]
    times = [max(r.step_times[t] for r in runs) for t in range(len(runs[0].step_times))]
    times = times[skip:] or times
    return float(torch.tensor(times).median())
