"""Part 2's naive plans (lesson 15): each misses the brief for a reason the course taught.
Plain data parallelism with AdamW (torch's DDP, lessons 05 and 10) holds the whole model's
state on every rank: memory. The same plan on one rank sees a quarter of the text per step:
it misses the target within the steps (and the memory). ZeRO-3 with no care — as FSDP's
defaults do it (lesson 10) — gathers every block's parameters for its forward and again
for its backward: bytes.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.capstone.transformer import GPTBatches
from ddl_lab.capstone.wire import Wire
from ddl_lab.ml.gpt import GPT, lm_loss
from ddl_lab.runtime.collectives import all_gather_single, reduce_scatter_single

__all__ = ["LR", "ddp_plan", "zero3_plan"]

LR = 3e-3


def _adam(params: list[nn.Parameter]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.99), weight_decay=0.0)


def _warm(opt: torch.optim.Optimizer, step: int) -> None:
    """The rate warms up linearly over 20 steps, then stays."""
    for group in opt.param_groups:
        group["lr"] = LR * min(1.0, (step + 1) / 20)


def _gather(shard: torch.Tensor) -> torch.Tensor:
    """The whole flat tensor from every rank's equal shard (one all_gather)."""
    full = shard.new_empty(shard.numel() * dist.get_world_size())
    all_gather_single(full, shard.contiguous())
    return full


def _views(shapes: list[tuple[str, torch.Size]], flat: torch.Tensor) -> dict[str, torch.Tensor]:
    """Parameters named and shaped as ``shapes``, as views of ``flat`` in that order."""
    out, offset = {}, 0
    for name, shape in shapes:
        out[name] = flat[offset:offset + shape.numel()].view(shape)
        offset += shape.numel()
    return out


class _Sharded(torch.autograd.Function):
    """A block whose parameters this rank holds a 1/n shard of: gathered for the forward
    and freed, gathered again for the backward (which recomputes the block), its gradient
    reduce-scattered back to the shards — ZeRO-3 as FSDP's defaults do it."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, shard: torch.Tensor, block: nn.Module,
                shapes: list) -> torch.Tensor:
        from torch.func import functional_call
        ctx.block, ctx.shapes = block, shapes
        ctx.save_for_backward(x, shard)
        with torch.no_grad():
            return functional_call(block, _views(shapes, _gather(shard)), (x,))

    @staticmethod
    def backward(ctx, gy: torch.Tensor):
        from torch.func import functional_call
        x, shard = ctx.saved_tensors
        full = _gather(shard).requires_grad_()
        with torch.enable_grad():
            xx = x.detach().requires_grad_()
            y = functional_call(ctx.block, _views(ctx.shapes, full), (xx,))
            gx, gfull = torch.autograd.grad(y, (xx, full), gy)
        gshard = torch.empty_like(shard)
        reduce_scatter_single(gshard, gfull)
        return gx, gshard / dist.get_world_size(), None, None


def _shard_of(block: nn.Module) -> nn.Parameter:
    """This rank's equal shard of ``block``'s flattened parameters (zero-padded); the
    block's own parameters are emptied."""
    n, rank = dist.get_world_size(), dist.get_rank()
    flat = torch.cat([p.detach().reshape(-1) for p in block.parameters()])
    flat = torch.cat([flat, flat.new_zeros(-flat.numel() % n)])
    size = flat.numel() // n
    for p in block.parameters():
        p.data = p.data.new_empty(0)
    return nn.Parameter(flat[rank * size:(rank + 1) * size].clone())


def zero3_plan(model: GPT, batches: GPTBatches, wire: Wire) -> GPT:
    """ZeRO-3 with no care: every block's parameters sharded over the ranks (AdamW on the
    shards), gathered for its forward, dropped, gathered again for its backward; the
    embeddings and the final norm (2 % of the model) kept whole, their gradients summed."""
    shapes = [[(name, p.shape) for name, p in block.named_parameters()] for block in model.blocks]
    shards = [_shard_of(block) for block in model.blocks]
    rest = [p for name, p in model.named_parameters() if not name.startswith("blocks.")]
    opt = _adam(shards + rest)
    for step, (x, y) in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        h = model.embed(x)
        for block, shard, shape in zip(model.blocks, shards, shapes):
            h = _Sharded.apply(h, shard, block, shape)
        lm_loss(model.head(h), y).backward()
        for p in rest:
            wire.allreduce(p.grad)
            p.grad /= wire.world_size
        _warm(opt, step)
        opt.step()
    with torch.no_grad():                   # the whole model back on every rank
        for block, shard, shape in zip(model.blocks, shards, shapes):
            views = _views(shape, _gather(shard.detach()))
            for name, p in block.named_parameters():
                p.data = views[name].clone()
    return model


def ddp_plan(model: GPT, batches: GPTBatches, wire: Wire) -> GPT:
    """Plain data parallelism: torch's DDP (gradients summed in buckets during backward)
    and AdamW on every rank's whole model; on one rank, plain training."""
    from torch.nn.parallel import DistributedDataParallel as DDP
    ddp = DDP(model)
    opt = _adam(list(ddp.parameters()))
    for step, (x, y) in enumerate(batches):
        opt.zero_grad(set_to_none=True)
        lm_loss(ddp(x), y).backward()
        _warm(opt, step)
        opt.step()
    return model
