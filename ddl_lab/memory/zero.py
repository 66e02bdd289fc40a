"""ZeRO by hand on real workers (lesson 10; Rajbhandari et al., SC 2020).

Rank r owns chunk r of every flat vector (``chunk_bounds``: any length, chunks differ by at
most one element). The collectives are lesson 06's ring, with point-to-point messages only:

- stage 0 (data parallelism): the gradient is summed by reduce-scatter + all-gather (a ring
  allreduce) and every rank updates everything;
- stage 1: the same reduce-scatter, then the optimizer steps on this rank's chunk only (its
  state is 1/n), then the parameters are all-gathered — the ring allreduce with the update
  moved into its middle: 2Ψ values sent per rank and step, as data parallelism;
- stage 2: as stage 1, but the full gradient is dropped once reduce-scattered: a rank keeps
  1/n of the gradients (here the whole gradient lives during backward and is freed after;
  DeepSpeed reduce-scatters bucket by bucket during backward, so it never is whole);
- stage 3: the parameters too: each rank stores 1/n of each layer; a layer is all-gathered
  before its forward and again before its backward and freed after each, its gradient
  reduce-scattered in backward: 3Ψ values sent per rank and step.

``zero_run`` trains the MLP so on every rank and returns what it measured: losses, the final
parameters (equal to DDP with the same optimizer), bytes per rank and bytes sent. Tensors
live on ``ddl_lab.device()`` (a GPU under nccl — untested here: the course's CI has none).
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.memory.anatomy import (Memory, MixedPrecision, make_optimizer, state_tensors,
                                    tensor_bytes)
from ddl_lab.memory.recompute import forward_blocks, segments_for
from ddl_lab.ml.activations import ActivationMeter
from ddl_lab.model_parallel.stages import build_layers, digits_batches
from ddl_lab.ring_allreduce.engine import chunk_bounds
from ddl_lab.runtime.backends import device
from ddl_lab.runtime.collectives import all_gather_single, reduce_scatter_single

__all__ = ["STAGES", "ring_reduce_scatter", "ring_all_gather", "ring_chunk", "ZeroResult",
           "zero_run", "ddp_run", "library_steps"]

STAGES = (0, 1, 2, 3)


def _chunks(flat: torch.Tensor) -> list[torch.Tensor]:
    return [flat[a:b] for a, b in chunk_bounds(flat.numel(), dist.get_world_size())]


def _exchange(out: torch.Tensor, into: torch.Tensor) -> None:
    """Send ``out`` to the right neighbour while receiving ``into``'s length from the left
    into ``into`` (both skipped where empty: the neighbours agree on every length)."""
    n, r = dist.get_world_size(), dist.get_rank()
    work = [dist.isend(out.contiguous(), (r + 1) % n)] if out.numel() else []
    if into.numel():
        dist.irecv(into, (r - 1) % n).wait()
    for w in work:
        w.wait()


def ring_reduce_scatter(flat: torch.Tensor) -> torch.Tensor:
    """Lesson 06's share-reduce phase, numbered so that rank r ends with chunk r of the sum
    over the ranks (the returned view of ``flat``; the other chunks hold partial sums)."""
    n, r = dist.get_world_size(), dist.get_rank()
    chunks = _chunks(flat)
    for s in range(n - 1):
        into = chunks[(r - s - 2) % n]
        incoming = torch.empty_like(into)
        _exchange(chunks[(r - s - 1) % n], incoming)
        into += incoming
    return chunks[r]


def ring_all_gather(flat: torch.Tensor) -> torch.Tensor:
    """Lesson 06's share-only phase: rank r's chunk r goes round until every rank holds every
    chunk of ``flat`` (in place; returns ``flat``)."""
    n, r = dist.get_world_size(), dist.get_rank()
    chunks = _chunks(flat)
    for s in range(n - 1):
        _exchange(chunks[(r - s) % n], chunks[(r - s - 1) % n])
    return flat


_BUILTIN = [False]     # zero_run(builtin=True): gloo's own collectives, not the hand ring


def _padded(flat: torch.Tensor) -> tuple[list[tuple[int, int]], int]:
    bounds = chunk_bounds(flat.numel(), dist.get_world_size())
    return bounds, max(b - a for a, b in bounds)


def _reduce_scatter(flat: torch.Tensor) -> torch.Tensor:
    """``ring_reduce_scatter``, or the same with ``dist.reduce_scatter_single`` on chunks
    padded to equal length (``builtin``)."""
    if not _BUILTIN[0]:
        return ring_reduce_scatter(flat)
    bounds, c = _padded(flat)
    padded = flat.new_zeros(len(bounds) * c)
    for i, (a, b) in enumerate(bounds):
        padded[i * c:i * c + b - a] = flat[a:b]
    out = flat.new_empty(c)
    reduce_scatter_single(out, padded)
    mine = ring_chunk(flat)
    return mine.copy_(out[:mine.numel()])


def _all_gather(flat: torch.Tensor) -> torch.Tensor:
    """``ring_all_gather``, or ``dist.all_gather_single`` on padded chunks."""
    if not _BUILTIN[0]:
        return ring_all_gather(flat)
    bounds, c = _padded(flat)
    mine = flat.new_zeros(c)
    mine[:ring_chunk(flat).numel()] = ring_chunk(flat)
    out = flat.new_empty(len(bounds) * c)
    all_gather_single(out, mine)
    for i, (a, b) in enumerate(bounds):
        flat[a:b] = out[i * c:i * c + b - a]
    return flat


# ----------------------------------------------------------------- stages 0–2: flat

class _Flat:
    """Stages 0–2: the parameters are views into one flat vector, the gradients into
    another; the optimizer sees this rank's chunk (the whole vector at stage 0)."""

    def __init__(self, layers: nn.Sequential, stage: int, make: Callable, low: bool):
        self.stage, self.layers = stage, layers
        self.ps = list(layers.parameters())
        self.flat = torch.cat([p.detach().reshape(-1) for p in self.ps])
        self._view(self.flat, "data")
        mine = self.flat if stage == 0 else ring_chunk(self.flat)
        self.opt = MixedPrecision([mine], make) if low else make([mine])
        self.mine, self.grad, self.kept = mine, None, None

    def _view(self, flat: torch.Tensor, what: str) -> None:
        at = 0
        for p in self.ps:
            setattr(p, what, flat[at:at + p.numel()].view_as(p))
            at += p.numel()

    def blocks(self) -> list[Callable]:
        return list(self.layers)

    def before_backward(self) -> None:
        if self.grad is None:                  # stage 2 frees it; stages 0–1 keep it
            self.grad = torch.zeros_like(self.flat)
            self._view(self.grad, "grad")
        else:
            self.grad.zero_()

    def step(self) -> None:
        chunk = _reduce_scatter(self.grad)                # the gradient summed, chunk r here
        chunk /= dist.get_world_size()                    # averaged, as DDP does
        if self.stage == 0:
            _all_gather(self.grad)                        # the allreduce's second half
            self.mine.grad = self.grad
        else:
            self.mine.grad = chunk.clone() if self.stage == 2 else chunk
        self.opt.step()
        if self.stage:
            _all_gather(self.flat)                        # every rank's updated chunk
        if self.stage == 2:                               # keep only this rank's chunk
            self.kept, self.grad = self.mine.grad, None
            for p in self.ps:
                p.grad = None

    def held(self) -> tuple[list, list]:
        """(parameters, gradients) this rank keeps between steps."""
        return [self.flat], [self.kept if self.stage == 2 else self.grad]

    def full(self) -> torch.Tensor:
        return self.flat


def ring_chunk(flat: torch.Tensor) -> torch.Tensor:
    """This rank's chunk of ``flat`` (a view)."""
    return _chunks(flat)[dist.get_rank()]


# ----------------------------------------------------------------- stage 3: sharded layers

def _gather(shard: torch.Tensor, numel: int) -> torch.Tensor:
    """A layer's whole flat parameters, gathered from every rank's shard (a new tensor)."""
    full = torch.empty(numel, dtype=shard.dtype, device=shard.device)
    ring_chunk(full).copy_(shard)
    return _all_gather(full)


class _Gathered(torch.autograd.Function):
    """A Linear layer whose rank holds 1/n of its weights: gather before forward, free; gather
    again before backward, free; reduce-scatter the weights' gradient (averaged over ranks)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, shard: torch.Tensor, shape: tuple[int, int]):
        o, i = shape
        full = _gather(shard.detach(), o * i + o)
        ctx.save_for_backward(x, shard)
        ctx.shape = shape
        return nn.functional.linear(x, full[:o * i].view(o, i), full[o * i:])

    @staticmethod
    def backward(ctx, gy: torch.Tensor):
        x, shard = ctx.saved_tensors
        o, i = ctx.shape
        W = _gather(shard.detach(), o * i + o)[:o * i].view(o, i)
        g = torch.cat([(gy.t() @ x).reshape(-1), gy.sum(0)])
        return gy @ W, _reduce_scatter(g) / dist.get_world_size(), None


class _Sharded:
    """Stage 3: each rank stores chunk r of each Linear's flat (weight, bias)."""

    def __init__(self, layers: nn.Sequential, make: Callable, low: bool):
        self.stage, self.layers, self.shards, self.shapes = 3, list(layers), {}, {}
        for k, m in enumerate(self.layers):
            if isinstance(m, nn.Linear):
                flat = torch.cat([m.weight.detach().reshape(-1), m.bias.detach()])
                self.shards[k] = ring_chunk(flat).clone().requires_grad_()
                self.shapes[k] = (m.out_features, m.in_features)
        ps = list(self.shards.values())
        self.opt = MixedPrecision(ps, make) if low else make(ps)

    def blocks(self) -> list[Callable]:
        return [(lambda x, k=k: _Gathered.apply(x, self.shards[k], self.shapes[k]))
                if k in self.shards else m for k, m in enumerate(self.layers)]

    def before_backward(self) -> None:
        for s in self.shards.values():
            s.grad = None

    def step(self) -> None:
        self.opt.step()

    def held(self) -> tuple[list, list]:
        return list(self.shards.values()), [s.grad for s in self.shards.values()]

    def full(self) -> torch.Tensor:
        return torch.cat([_gather(s.detach(), o * i + o) for s, (o, i) in
                          zip(self.shards.values(), self.shapes.values())])


# ----------------------------------------------------------------- the run

@dataclass
class ZeroResult:
    """What one rank measured in ``zero_run`` (lesson 10)."""

    stage: int
    precision: str
    recompute: bool
    rank: int
    world: int
    numel: int                        # Ψ: the model's parameters
    losses: list[float]
    params: np.ndarray                # the whole model after the last step, float64
    memory: Memory                    # kept after the last step; activations: the most its
                                      # forwards kept for backward
    sent: float                       # bytes this rank sent per step
    seconds: float                    # per step, after the first
    trace: list[str] = field(default_factory=list)


def _batches(batch: int, steps: int, seed: int, dtype: torch.dtype):
    """This rank's examples of each step: its ``tensor_split`` share of the batch."""
    n, r = dist.get_world_size(), dist.get_rank()
    return [(X.to(dtype).tensor_split(n)[r].to(device()), y.tensor_split(n)[r].to(device()))
            for X, y in digits_batches(batch, steps, seed)]


def held_tensors(engine: _Flat | _Sharded) -> list[torch.Tensor]:
    params, grads = engine.held()
    return [t for t in params + grads if t is not None]


def _held(engine: _Flat | _Sharded) -> Memory:
    """What this rank keeps between steps: parameters, gradients, optimizer state."""
    params, grads = engine.held()
    state = [t for t in state_tensors(engine.opt)
             if not any(t.data_ptr() == h.data_ptr() for h in params)]
    return Memory(f"ZeRO-{engine.stage}", dist.get_rank(), tensor_bytes(params),
                  tensor_bytes(grads), tensor_bytes(state), 0)


def zero_run(stage: int, precision: str = "fp32", recompute: bool = False, hidden: int = 64,
             depth: int = 4, batch: int = 32, steps: int = 3, optimizer: str = "adam",
             lr: float = 1e-2, seed: int = 0, builtin: bool = False) -> ZeroResult:
    """Worker: ``steps`` of the MLP under ZeRO ``stage`` (0–3) on every rank, in ``precision``
    ('fp32', or 'bf16': bf16 parameters, gradients and activations, fp32 masters and
    state), with or without recomputation (√n segments); what this rank measured.
    ``builtin``: gloo's reduce-scatter and all-gather (padded chunks) instead of the ring by
    hand — the same algorithm, without Python between the messages."""
    from ddl_lab.runtime.wiretap import Wiretap
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}, got {stage!r}")
    low, n = precision != "fp32", dist.get_world_size()
    dtype = torch.bfloat16 if low else torch.float32
    layers = build_layers("mlp", hidden, seed, depth).to(device(), dtype)
    numel = sum(p.numel() for p in layers.parameters())
    engine = (_Sharded(layers, make_optimizer(optimizer, lr), low) if stage == 3 else
              _Flat(layers, stage, make_optimizer(optimizer, lr), low))
    losses, times = [], []
    _BUILTIN[0] = builtin
    with Wiretap() as tap:
        for X, y in _batches(batch, steps, seed, dtype):
            t0 = time.perf_counter()
            meter = ActivationMeter()
            meter.resident(X, y, *held_tensors(engine), *layers.parameters())
            out = forward_blocks(engine.blocks(), X, segments_for(len(layers)) if recompute
                                 else 0, meter)
            loss = nn.functional.cross_entropy(out.float(), y, reduction="sum") / batch * n
            engine.before_backward()               # × n above: DDP's mean over the ranks
            loss.backward()
            engine.step()
            times.append(time.perf_counter() - t0)
            losses.append(float(loss.detach()) / n)
        sent = tap.sent
    memory = _held(engine)
    memory.activations = meter.peak
    dist.barrier()                                          # every rank ends together
    return ZeroResult(stage, precision, recompute, dist.get_rank(), dist.get_world_size(),
                      numel, losses, engine.full().detach().double().cpu().numpy(), memory,
                      sent / steps, float(np.median(times[1:] or times)))


def ddp_run(hidden: int = 64, depth: int = 4, batch: int = 32, steps: int = 3,
            optimizer: str = "adam", lr: float = 1e-2, seed: int = 0) -> ZeroResult:
    """Worker: the same training with torch's ``DistributedDataParallel`` and the same
    optimizer (fp32): the reference every stage must equal."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ddl_lab.runtime.wiretap import Wiretap
    layers = build_layers("mlp", hidden, seed, depth).to(device())
    with Wiretap() as tap:                    # DDP's reducer talks to the tapped group
        model = DDP(layers, gradient_as_bucket_view=True)
        opt = make_optimizer(optimizer, lr)(list(model.parameters()))
        return library_steps("DDP", model, layers, opt, tap, batch, steps, seed)


def library_steps(kind: str, model: nn.Module, layers: nn.Module, opt: torch.optim.Optimizer,
                  tap: Any, batch: int, steps: int, seed: int) -> ZeroResult:
    """``steps`` of a model a library wraps (DDP, FSDP2, ZeroRedundancyOptimizer; fp32) while
    ``tap`` counts the bytes sent: what this rank measured (lesson 10)."""
    n, losses, times = dist.get_world_size(), [], []
    tap.sent = 0.0                            # setting up (a start-up broadcast) is not a step
    for X, y in _batches(batch, steps, seed, torch.float32):
        t0 = time.perf_counter()
        opt.zero_grad()
        meter = ActivationMeter()
        meter.resident(X, y, *layers.parameters())
        with meter.recording():               # the libraries average gradients over ranks
            loss = nn.functional.cross_entropy(model(X), y, reduction="sum") / batch * n
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(float(loss.detach()) / n)
    sent = tap.sent
    ps = list(layers.parameters())
    memory = Memory(kind, dist.get_rank(), tensor_bytes(ps), tensor_bytes(p.grad for p in ps),
                    tensor_bytes(state_tensors(opt)), meter.peak)
    full = [p.full_tensor() if hasattr(p, "full_tensor") else p for p in ps]   # FSDP2's shards
    flat = torch.cat([p.detach().reshape(-1) for p in full]).double().cpu().numpy()
    return ZeroResult(0, "fp32", False, dist.get_rank(), n, flat.size, losses, flat, memory,
                      sent / steps, float(np.median(times[1:] or times)))