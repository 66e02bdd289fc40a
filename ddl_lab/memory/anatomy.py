"""A training step taken apart, byte by byte (lesson 10).

The bytes one process holds for an MLP trained with SGD, momentum or Adam, in fp32 or in
mixed precision, counted from the tensors themselves — parameters, gradients, the
optimizer's state walked tensor by tensor, the activations autograd saved for backward
(saved-tensor hooks, ``ActivationMeter``) — and the peak of the whole step read off the
profiler's memory events, beside the formulas of ZeRO (Rajbhandari et al., SC 2020, §3.1):
fp32 Adam keeps 4 + 4 + 8 = 16 bytes per parameter; mixed-precision Adam 2 + 2 + 12 = 16
(bf16/fp16 parameters and gradients, an fp32 master copy and two fp32 moments).
"""
from __future__ import annotations

import gc
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import torch
from torch import nn

from ddl_lab.ml.activations import ActivationMeter
from ddl_lab.ml.profiling import quiet_stderr
from ddl_lab.model_parallel.stages import build_layers, digits_batches

__all__ = ["MiB", "OPTIMIZERS", "PRECISIONS", "Memory", "tensor_bytes", "state_tensors",
           "per_param", "per_rank", "MixedPrecision", "make_optimizer", "profiled",
           "anatomy_step"]

MiB = 2 ** 20
OPTIMIZERS = ("sgd", "momentum", "adam")
PRECISIONS = ("fp32", "bf16")                 # bf16: mixed precision with fp32 masters
_STATE = {"sgd": 0, "momentum": 4, "adam": 8}  # fp32 bytes of optimizer state per parameter


@dataclass
class Memory:
    """Bytes one rank holds under one scheme (lesson 10); ``peak``: the profiler's, if read."""

    scheme: str
    rank: int
    params: int
    grads: int
    optimizer: int
    activations: int
    peak: int = 0

    @property
    def total(self) -> int:
        return self.params + self.grads + self.optimizer + self.activations


def tensor_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of distinct tensors (a ``DTensor`` counts its local shard; views count once)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for t in tensors:
        if t is None:
            continue
        local = t.to_local() if hasattr(t, "to_local") else t
        key = (local.data_ptr(), local.numel())
        if key not in seen and local.numel():
            seen.add(key)
            total += local.numel() * local.element_size()
    return total


def state_tensors(opt: Any) -> list[torch.Tensor]:
    """Every tensor an optimizer keeps between steps: its state walked (a
    ``ZeroRedundancyOptimizer``'s own shard; a ``MixedPrecision``'s masters too)."""
    inner = getattr(opt, "optim", getattr(opt, "inner", opt))
    found = list(getattr(opt, "masters", []))

    def walk(x: Any) -> None:
        if isinstance(x, torch.Tensor):
            found.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
    walk(list(inner.state.values()))
    return found


def per_param(optimizer: str, precision: str) -> dict[str, int]:
    """Bytes per parameter of parameters, gradients and optimizer state (ZeRO §3.1): fp32
    4 + 4 + K; mixed precision 2 + 2 + (4 master + K), K = 0 SGD, 4 momentum, 8 Adam."""
    low = precision != "fp32"
    return {"params": 2 if low else 4, "grads": 2 if low else 4,
            "optimizer": _STATE[optimizer] + (4 if low else 0)}


def per_rank(params: int, ranks: int, stage: int, optimizer: str = "adam",
             precision: str = "fp32") -> dict[str, float]:
    """Bytes per rank by ZeRO's formulas: stage 1 divides the optimizer state by n, stage 2
    the gradients too, stage 3 the parameters too (stage 0: data parallelism, nothing)."""
    sharded = {0: (), 1: ("optimizer",), 2: ("optimizer", "grads"),
               3: ("optimizer", "grads", "params")}[stage]
    return {k: b * params / (ranks if k in sharded else 1)
            for k, b in per_param(optimizer, precision).items()}


class MixedPrecision:
    """Mixed-precision training's optimizer (Micikevicius et al., ICLR 2018): the model keeps
    bf16/fp16 parameters and gradients; this keeps an fp32 master copy of each parameter,
    runs ``make(masters)`` on them, and writes the result back rounded to the model's dtype."""

    def __init__(self, params: Iterable[torch.Tensor], make: Callable[[list], Any]):
        self.params = list(params)
        self.masters = [p.detach().float().clone() for p in self.params]
        self.inner = make(self.masters)

    @property
    def state(self) -> Any:
        return self.inner.state

    def step(self) -> None:
        for p, m in zip(self.params, self.masters):
            m.grad = None if p.grad is None else p.grad.float()
        self.inner.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.masters):
                p.copy_(m)
                m.grad = None


def make_optimizer(name: str, lr: float = 1e-2) -> Callable[[list], torch.optim.Optimizer]:
    """A factory: ``make_optimizer('adam')(params)`` (momentum: SGD with momentum 0.9)."""
    if name == "adam":
        return lambda ps: torch.optim.Adam(ps, lr=lr)
    if name == "momentum":
        return lambda ps: torch.optim.SGD(ps, lr=lr, momentum=0.9)
    if name == "sgd":
        return lambda ps: torch.optim.SGD(ps, lr=lr)
    raise ValueError(f"unknown optimizer {name!r}: use one of {OPTIMIZERS}")


def profiled(fn: Callable[[], Any]) -> tuple[Any, int, int]:
    """``fn()`` under the profiler with memory events: (its result, the most bytes allocated
    at once beyond what was there before, the bytes it left allocated), on the CPU."""
    from torch.profiler import ProfilerActivity, profile
    gc.collect()            # earlier work's garbage, freed inside the window, would count
    gc.disable()            # against the step's own bytes: none is collected during it
    try:
        with quiet_stderr(), \
                profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            out = fn()
    finally:
        gc.enable()
    events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    live = peak = 0
    for e in sorted(events, key=lambda e: e.start_ns()):
        live += e.nbytes()
        peak = max(peak, live)
    return out, peak, live


def anatomy_step(optimizer: str = "adam", precision: str = "fp32", hidden: int = 256,
                 depth: int = 4, batch: int = 64, seed: int = 0) -> Memory:
    """One training step of the MLP (``depth`` hidden layers) in one process, measured: the
    parameters, gradients and optimizer state after the step, the activations saved for
    backward at their peak, and the profiler's peak over the whole step (the step's own
    allocations: gradients, state, activations and temporaries; not the parameters)."""
    dtype = torch.float32 if precision == "fp32" else torch.bfloat16
    model = build_layers("mlp", hidden, seed, depth).to(dtype)
    ps = list(model.parameters())
    make = make_optimizer(optimizer)
    opt = make(ps) if precision == "fp32" else MixedPrecision(ps, make)
    X, y = digits_batches(batch, 1, seed)[0]
    X = X.to(dtype)
    meter = ActivationMeter()
    meter.resident(X, y, *ps)

    def step() -> None:
        with meter.recording():
            loss = nn.functional.cross_entropy(model(X).float(), y)
        loss.backward()
        opt.step()
    _, peak, _ = profiled(step)
    return Memory(f"{optimizer}, {precision}", 0, tensor_bytes(ps),
                  tensor_bytes(p.grad for p in ps), tensor_bytes(state_tensors(opt)),
                  meter.peak, peak)
