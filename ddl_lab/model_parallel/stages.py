"""Layers split across processes by hand (lesson 09, ID2223 review question 2).

A network is cut into p *stages*, one per rank. Going forward, a stage receives the
activation of the previous stage, runs its layers and sends its output on; going
backward, it receives the gradient of that output, runs backward through its layers and
sends the gradient of its *input* back. The received activation is made a leaf that
requires grad, so autograd fills its ``.grad``: that is the tensor the previous stage
needs. With micro-batches (GPipe), every stage runs all forwards, then all backwards;
the gradients accumulate in ``.grad`` and, with each micro-batch's loss weighted by its
share of the batch, equal one un-pipelined step exactly.

- ``send_tensor`` / ``recv_tensor``: point-to-point with a small shape header, so the
  receiver need not know the shape in advance; ``isend_tensor`` does not block.
- ``build_layers`` / ``cut``: the course's MLP or CNN as one ``nn.Sequential``, cut into
  p contiguous stages; ``pad_stage`` adds a fixed cost per example (``time.sleep`` in
  forward and backward) so that a 2-core machine can show a pipeline's shape.
- ``stage_step``: the textbook GPipe step of one stage, the version the lesson shows.
"""
from __future__ import annotations

import time
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.ml.data import digits
from ddl_lab.ml.models import MLP, SmallCNN

__all__ = ["send_tensor", "recv_tensor", "isend_tensor", "neighbours", "group",
           "build_layers", "cut", "pad_stage", "SleepPerSample", "microbatches",
           "loss_share", "digits_batches", "stage_step", "full_step"]

_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64]
_HEADER = 8                  # dtype code, number of dimensions, up to 6 sizes
_GROUPS: dict[tuple[int, ...], object] = {}


# --------------------------------------------------------------- point to point

def _header(t: torch.Tensor) -> torch.Tensor:
    if t.dim() > _HEADER - 2 or t.dtype not in _DTYPES:
        raise ValueError(f"send_tensor sends tensors of at most {_HEADER - 2} dimensions "
                         f"and dtype in {_DTYPES}; got {tuple(t.shape)} {t.dtype}")
    h = torch.zeros(_HEADER, dtype=torch.int64, device=t.device)
    h[0], h[1] = _DTYPES.index(t.dtype), t.dim()
    h[2:2 + t.dim()] = torch.tensor(t.shape, dtype=torch.int64)
    return h


def send_tensor(t: torch.Tensor, dst: int) -> None:
    """Send ``t`` to rank ``dst``: its shape and dtype first, then the values (lesson 09)."""
    dist.send(_header(t), dst)
    dist.send(t.detach().contiguous(), dst)


def isend_tensor(t: torch.Tensor, dst: int) -> list:
    """``send_tensor`` without blocking: returns the works to ``wait()`` on (they keep
    the tensors alive until then)."""
    t = t.detach().contiguous()
    return [dist.isend(_header(t), dst), dist.isend(t, dst), t]


def recv_tensor(src: int, device: torch.device | None = None) -> torch.Tensor:
    """Receive a tensor that rank ``src`` sent with ``send_tensor`` (lesson 09)."""
    h = torch.empty(_HEADER, dtype=torch.int64, device=device)
    dist.recv(h, src)
    shape = [int(s) for s in h[2:2 + int(h[1])]]
    t = torch.empty(shape, dtype=_DTYPES[int(h[0])], device=device)
    dist.recv(t, src)
    return t


def neighbours(rank: int, ranks: Sequence[int]) -> tuple[int | None, int | None]:
    """(previous, next) rank of ``rank`` in the pipeline ``ranks`` (None at the ends)."""
    i = list(ranks).index(rank)
    return (ranks[i - 1] if i > 0 else None,
            ranks[i + 1] if i + 1 < len(ranks) else None)


def group(ranks: Sequence[int]):
    """A process group of ``ranks``, made once per worker (every rank must call this with
    the same ``ranks``, in the same order of calls: ``dist.new_group`` is collective)."""
    key = tuple(ranks)
    if len(key) == dist.get_world_size():
        return dist.group.WORLD
    if key not in _GROUPS:
        _GROUPS[key] = dist.new_group(list(key))
    return _GROUPS[key]


# ------------------------------------------------------------------ the model

def build_layers(kind: str = "mlp", hidden: int = 64, seed: int = 0, depth: int = 2
                 ) -> nn.Sequential:
    """The course's ``MLP(64, hidden, 10)`` (``depth`` hidden layers; 2 is the course's)
    or ``SmallCNN(10)`` as one flat ``nn.Sequential`` of layers, the same on every rank
    for a given ``seed``."""
    torch.manual_seed(seed)
    if kind == "mlp" and depth == 2:
        return nn.Sequential(nn.Flatten(), *MLP(64, hidden, 10).net)
    if kind == "mlp":
        widths = [64] + [hidden] * depth
        body = [m for a, b in zip(widths[:-1], widths[1:]) for m in (nn.Linear(a, b), nn.ReLU())]
        return nn.Sequential(nn.Flatten(), *body, nn.Linear(hidden, 10))
    if kind == "cnn":
        cnn = SmallCNN(10, channels=max(1, hidden // 8))
        return nn.Sequential(nn.Unflatten(1, (1, 8, 8)), *cnn.features, nn.Flatten(), cnn.head)
    raise ValueError(f"unknown model kind {kind!r}: use 'mlp' or 'cnn'")


def _balanced_bounds(sizes: Sequence[int], p: int) -> list[int]:
    """Cut points splitting ``sizes`` into p non-empty runs with the smallest largest sum."""
    n = len(sizes)
    pre = np.concatenate([[0], np.cumsum(sizes)])
    best = {(0, 0): (0, [0])}                      # (layers used, stages) -> (max, bounds)
    for k in range(1, p + 1):
        for j in range(k, n - (p - k) + 1):
            best[(j, k)] = min(((max(best[(i, k - 1)][0], int(pre[j] - pre[i])),
                                 best[(i, k - 1)][1] + [j])
                                for i in range(k - 1, j) if (i, k - 1) in best),
                               key=lambda c: c[0])
    return best[(n, p)][1]


def cut(layers: nn.Sequential, p: int, by: str = "layers") -> list[nn.Sequential]:
    """``layers`` cut into ``p`` contiguous stages: of (nearly) equal numbers of layers
    (``by='layers'``) or with the largest stage's parameter count smallest (``'params'``)."""
    if not 1 <= p <= len(layers):
        raise ValueError(f"cannot cut {len(layers)} layers into {p} stages: use 1 <= p <= "
                         f"{len(layers)}")
    if by == "params":
        bounds = _balanced_bounds([sum(q.numel() for q in layer.parameters()) for layer in layers], p)
    else:
        bounds = list(np.cumsum([0] + [len(a) for a in np.array_split(np.arange(len(layers)), p)]))
    return [layers[int(a):int(b)] for a, b in zip(bounds[:-1], bounds[1:])]


class _Sleep(torch.autograd.Function):
    """Identity that takes ``cost`` seconds per example, forward and backward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, cost: float) -> torch.Tensor:
        ctx.cost = cost
        time.sleep(cost * len(x))
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        time.sleep(ctx.cost * len(grad))
        return grad, None


class SleepPerSample(nn.Module):
    """A layer that adds ``cost`` seconds per example to forward and to backward: compute
    that does not compete for the cores (as lesson 07 pads its replicas)."""

    def __init__(self, cost: float):
        super().__init__()
        self.cost = cost

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Sleep.apply(x, self.cost) if self.cost > 0 else x


def pad_stage(stage: nn.Module, cost: float) -> nn.Module:
    """``stage`` followed by ``cost`` seconds per example of padded compute (0: itself)."""
    return nn.Sequential(stage, SleepPerSample(cost)) if cost > 0 else stage


# ------------------------------------------------------------------- the data

def microbatches(X: torch.Tensor, y: torch.Tensor, m: int) -> list[tuple[torch.Tensor,
                                                                         torch.Tensor]]:
    """The mini-batch cut into ``m`` micro-batches (sizes differ by at most one)."""
    if not 1 <= m <= len(y):
        raise ValueError(f"m = {m} micro-batches of a batch of {len(y)}: use 1 <= m <= {len(y)}")
    return list(zip(torch.tensor_split(X, m), torch.tensor_split(y, m)))


@lru_cache(maxsize=1)
def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    return digits(seed=0)[0].tensors()


def digits_batches(batch: int, steps: int, seed: int = 0) -> list[tuple[torch.Tensor,
                                                                        torch.Tensor]]:
    """``steps`` mini-batches of ``batch`` digits (the same on every rank for a seed)."""
    X, y = _digits()
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(len(y), (steps, batch), generator=g)
    return [(X[i], y[i]) for i in idx]


def loss_share(loss_fn: Callable, n_i: int, total: int) -> float:
    """The weight of a micro-batch of ``n_i`` examples in a loss over ``total``: its share
    n_i/total for a mean, 1 for a sum (``loss_fn.reduction``, mean if absent)."""
    return 1.0 if getattr(loss_fn, "reduction", "mean") == "sum" else n_i / total


# --------------------------------------------------------------- the stage step

def stage_step(stage: nn.Module, batches: list, loss_fn: Callable, prev: int | None,
               nxt: int | None) -> float | None:
    """One GPipe training step of one stage (lesson 09): all forwards, then all backwards.

    ``batches``: the m micro-batches (x_i, y_i); the first stage reads x_i, the last y_i.
    ``prev``/``nxt``: the neighbouring stages' ranks (None at the ends). The gradients of
    all micro-batches accumulate in ``.grad``; the last stage returns the batch's loss.
    """
    total = sum(len(y) for _, y in batches)
    inputs, outputs = [], []
    for x, y in batches:                                    # forward, micro-batch by micro-batch
        if prev is not None:
            x = recv_tensor(prev).requires_grad_()          # a leaf whose .grad goes back
        out = stage(x)
        if nxt is None:                                     # last stage: its share of the loss
            out = loss_fn(out, y) * loss_share(loss_fn, len(y), total)
        else:
            send_tensor(out, nxt)                           # the activation goes on
        inputs.append(x)
        outputs.append(out)
    for x, out in zip(inputs, outputs):                     # backward, driven by what arrives
        out.backward(None if nxt is None else recv_tensor(nxt))
        if prev is not None:
            send_tensor(x.grad, prev)                       # d loss / d input goes back
    return sum(out.item() for out in outputs) if nxt is None else None


def full_step(layers: nn.Module, batches: Sequence[tuple[torch.Tensor, torch.Tensor]],
              loss_fn: Callable) -> float:
    """The un-pipelined step in one process: the whole batch at once, ``.grad`` filled."""
    X = torch.cat([x for x, _ in batches])
    y = torch.cat([t for _, t in batches])
    loss = loss_fn(layers(X), y)
    loss.backward()
    return loss.item()
