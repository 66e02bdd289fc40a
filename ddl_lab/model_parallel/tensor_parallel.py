"""Tensor parallelism: one layer split across ranks (lesson 09; Megatron-LM, Shoeybi et al.
2019).

A linear layer y = x Wᵀ + b with W of shape (out, in) splits two ways over n ranks:

- **column-parallel**: rank r keeps the rows W_r of W (its block of *output* features)
  and b_r; it computes its slice y_r = x W_rᵀ + b_r of the output with no communication
  (``all_gather`` would join the slices).
- **row-parallel**: rank r keeps the columns W_r of W (its block of *input* features) and
  sees only its slice x_r of the input; x_r W_rᵀ is a *partial sum* of y, so one
  ``all_reduce`` adds the n partial sums — and the bias is added once, not n times.

Megatron's MLP puts the two together: column-parallel, then the activation on each
rank's slice, then row-parallel: one allreduce forward, one backward, and the hidden
activation is never gathered. ``megatron_mlp`` does it by hand with two autograd
functions (Megatron's f and g); ``tp_run`` trains the course's MLP that way or with
``torch.distributed.tensor.parallel`` on a CPU device mesh (it runs on gloo), and both
equal one process.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ddl_lab.model_parallel.pipeline import sgd_update
from ddl_lab.model_parallel.stages import build_layers, digits_batches

__all__ = ["shard", "column_parallel", "gather_columns", "row_parallel", "split_layer",
           "ColumnParallelLinear", "RowParallelLinear", "megatron_mlp", "tp_run",
           "device_mesh", "library_tp"]

_MESH: dict[tuple[int, str], Any] = {}


def shard(t: torch.Tensor, dim: int, rank: int, n: int) -> torch.Tensor:
    """Rank ``rank``'s block of ``t`` along ``dim`` (n blocks, sizes differ by at most 1)."""
    if not 0 <= rank < n:
        raise ValueError(f"need n >= 1 blocks and a rank in 0..n-1, got n={n}, rank={rank}")
    return torch.tensor_split(t, n, dim)[rank].clone()


# ------------------------------------------------------------- the two splits

def column_parallel(x: torch.Tensor, weight_rows: torch.Tensor,
                    bias_rows: torch.Tensor) -> torch.Tensor:
    """This rank's output features y_r = x W_rᵀ + b_r (no communication)."""
    return x @ weight_rows.T + bias_rows


def gather_columns(y_part: torch.Tensor) -> torch.Tensor:
    """The whole output from every rank's slice (equal slices): an ``all_gather``."""
    parts = [torch.empty_like(y_part) for _ in range(dist.get_world_size())]
    dist.all_gather(parts, y_part.contiguous())
    return torch.cat(parts, dim=-1)


def row_parallel(x_part: torch.Tensor, weight_cols: torch.Tensor,
                 bias: torch.Tensor) -> torch.Tensor:
    """y = Σ_r x_r W_rᵀ + b: this rank's partial sum, one allreduce, the bias once."""
    y = x_part @ weight_cols.T
    dist.all_reduce(y)
    return y + bias


# ------------------------------------------------ Megatron's f and g, for training

class _CopyToRanks(torch.autograd.Function):
    """Megatron's f: forward the input as it is; backward, sum its gradient over ranks."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


class _SumOverRanks(torch.autograd.Function):
    """Megatron's g: forward, sum the partial outputs over ranks; backward, pass through."""

    @staticmethod
    def forward(ctx, y: torch.Tensor) -> torch.Tensor:
        y = y.clone()
        dist.all_reduce(y)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


class ColumnParallelLinear(nn.Module):
    """This rank's rows of a ``nn.Linear`` (its output features)."""

    def __init__(self, full: nn.Linear, rank: int, n: int):
        super().__init__()
        self.weight = nn.Parameter(shard(full.weight.detach(), 0, rank, n))
        self.bias = nn.Parameter(shard(full.bias.detach(), 0, rank, n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(_CopyToRanks.apply(x), self.weight, self.bias)


class RowParallelLinear(nn.Module):
    """This rank's columns of a ``nn.Linear`` (its input features); the bias, whole."""

    def __init__(self, full: nn.Linear, rank: int, n: int):
        super().__init__()
        self.weight = nn.Parameter(shard(full.weight.detach(), 1, rank, n))
        self.bias = nn.Parameter(full.bias.detach().clone())

    def forward(self, x_part: torch.Tensor) -> torch.Tensor:
        return _SumOverRanks.apply(F.linear(x_part, self.weight)) + self.bias


def megatron_mlp(layers: nn.Sequential, rank: int, n: int) -> nn.Sequential:
    """``build_layers('mlp')``'s layers with its Linear layers alternately column- and
    row-parallel (a last unpaired Linear stays whole on every rank)."""
    linears = [i for i, layer in enumerate(layers) if isinstance(layer, nn.Linear)]
    out = list(layers)
    for a, b in zip(linears[0::2], linears[1::2]):
        out[a] = ColumnParallelLinear(layers[a], rank, n)
        out[b] = RowParallelLinear(layers[b], rank, n)
    return nn.Sequential(*out)


def split_layer(d_in: int = 7, d_out: int = 8, batch: int = 3, seed: int = 0
                ) -> dict[str, torch.Tensor]:
    """Worker function: one ``nn.Linear`` (the same on every rank) computed whole, split by
    columns (``column_parallel`` + ``gather_columns``; d_out must divide evenly) and by
    rows (``row_parallel``) over every rank."""
    rank, n = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(seed)
    full, x = nn.Linear(d_in, d_out), torch.randn(batch, d_in)
    with torch.no_grad():
        cols = column_parallel(x, shard(full.weight, 0, rank, n), shard(full.bias, 0, rank, n))
        return {"whole": full(x), "my columns": cols, "columns": gather_columns(cols),
                "rows": row_parallel(shard(x, 1, rank, n), shard(full.weight, 1, rank, n),
                                     full.bias)}


# ------------------------------------------------------------------ the worker

def device_mesh(kind: str = "cpu"):
    """A 1-D device mesh over every rank, made once per worker: on the CPU (the tensor
    parallelism of lesson 09 keeps its tensors there), or ``kind="cuda"`` where the
    model's tensors sit on this rank's GPU (FSDP2 under nccl, lesson 10)."""
    from torch.distributed.device_mesh import init_device_mesh
    key = (dist.get_world_size(), kind)
    if key not in _MESH:
        _MESH[key] = init_device_mesh(kind, (key[0],))
    return _MESH[key]


def library_tp(layers: nn.Sequential) -> nn.Sequential:
    """``layers`` with torch's ``parallelize_module``: Linear layers alternately
    ``ColwiseParallel`` and ``RowwiseParallel`` over ``device_mesh()``."""
    from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                   parallelize_module)
    linears = [str(i) for i, layer in enumerate(layers) if isinstance(layer, nn.Linear)]
    plan: dict[str, Any] = {}
    for a, b in zip(linears[0::2], linears[1::2]):
        plan.update({a: ColwiseParallel(), b: RowwiseParallel()})
    return parallelize_module(layers, device_mesh(), plan)


def _local(t: torch.Tensor) -> torch.Tensor:
    return (t.to_local() if hasattr(t, "to_local") else t).detach().clone()


def tp_run(hidden: int = 64, steps: int = 2, batch: int = 32, lr: float = 0.1, seed: int = 0,
           depth: int = 2, library: bool = False) -> dict:
    """Worker function: train the MLP tensor-parallel over every rank (lesson 09).

    By hand (``megatron_mlp``) or with torch's ``parallelize_module`` (``library``).
    Returns this rank's losses and its shard of each parameter (by name).
    """
    rank, n = dist.get_rank(), dist.get_world_size()
    layers = build_layers("mlp", hidden, seed, depth)
    model = library_tp(layers) if library else megatron_mlp(layers, rank, n)
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    for X, y in digits_batches(batch, steps, seed):
        loss = loss_fn(model(X), y)
        loss.backward()
        losses.append(loss.item())
        sgd_update(model, lr)
    return {"losses": losses, "shards": {k: _local(v) for k, v in model.named_parameters()}}
