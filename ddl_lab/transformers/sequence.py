"""Sequence parallelism (lesson 12, transformers; Korthikanti et al. 2022, "Reducing
Activation Recomputation in Large Transformer Models", section 4.2.2).

Plain tensor parallelism leaves the LayerNorms, the dropouts and the residual stream
replicated: every rank computes and *stores* them over the whole sequence. Sequence
parallelism shards those regions along the sequence instead. Megatron's g (an allreduce
after the row-parallel layer) becomes a reduce-scatter to sequence shards, and its f (the
identity before the column-parallel layer) an all-gather of the shards:

    x_r (b, s/n, h) ─ LayerNorm ─ all-gather ─ column ∥ … row ∥ ─ reduce-scatter ─ + x_r

An allreduce *is* a reduce-scatter then an all-gather, so the bytes on the wire are the
same as plain tensor parallelism's (ring model: 2(n−1)/n · bsh per allreduce, (n−1)/n ·
bsh for each half); what changes is the memory the LayerNorm and dropout regions keep, cut
n-fold (``norm_bytes``). One thing is new: a replicated parameter used in those regions (a
LayerNorm's weight and bias, the row-parallel biases, the position table) now sees only
this rank's tokens, so its gradient is summed over ranks in backward, as Megatron-LM does
(``tensor.tp_bytes`` counts it): ``sum_grads_over_ranks`` does it for all of them in one
allreduce of a flat buffer (the same bytes as one per parameter, one call instead of
6L + 3, as Megatron-LM's ``_allreduce_layernorm_grads`` does). ``gather_sequence`` and
``scatter_sequence`` are the two operators as autograd functions, each the other's
backward (dimension 1 is the sequence).

The gathered input of each column-parallel layer is still kept whole for backward. The
paper keeps its shard only and gathers it again in backward (``gathered_linear``;
``regather=True`` in ``tensor``): one more all-gather per column-parallel layer, and then
every activation of the block is cut n-fold. ``activation_bytes`` accounts, tensor by
tensor, for what a rank keeps in each form (Korthikanti's sbh(10 + 24/t + 5as/h) at 16 bits
with dropout), and equals what saved-tensor hooks measure.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddl_lab.ml.gpt import GPTConfig
from ddl_lab.runtime.collectives import all_gather_single, reduce_scatter_single
from ddl_lab.transformers.vocab import loss_dtype, vocab_range

__all__ = ["gather_sequence", "scatter_sequence", "gathered_linear", "sum_grads_over_ranks",
           "sequence_slice", "norm_bytes", "activation_bytes"]


def _gather(x: torch.Tensor) -> torch.Tensor:
    """The whole sequence from every rank's (b, s/n, …) shard: (b, s, …)."""
    n = dist.get_world_size()
    part = x.transpose(0, 1).contiguous()                     # the sequence first
    whole = part.new_empty((n * part.shape[0], *part.shape[1:]))
    all_gather_single(whole, part)
    return whole.transpose(0, 1)


def _scatter(x: torch.Tensor) -> torch.Tensor:
    """This rank's (b, s/n, …) shard of the sum over ranks of (b, s, …)."""
    n = dist.get_world_size()
    whole = x.transpose(0, 1).contiguous()
    part = whole.new_empty((whole.shape[0] // n, *whole.shape[1:]))
    reduce_scatter_single(part, whole)
    return part.transpose(0, 1)


class _GatherSequence(torch.autograd.Function):
    """Forward all-gather along the sequence; backward reduce-scatter (Korthikanti's g)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return _gather(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return _scatter(grad)


class _ScatterSequence(torch.autograd.Function):
    """Forward reduce-scatter to sequence shards; backward all-gather (Korthikanti's ḡ)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return _scatter(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return _gather(grad)


class _GatheredLinear(torch.autograd.Function):
    """The column-parallel layer on the gathered sequence, keeping only this rank's shard of
    its input for backward, where the whole is gathered again (Korthikanti et al. 2022,
    section 4.2.2): one more all-gather per layer for an n-fold smaller saved input."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        return F.linear(_gather(x), weight, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        whole = _gather(x).reshape(-1, x.shape[-1])
        rows = grad.reshape(-1, grad.shape[-1])
        return _scatter(grad @ weight), rows.T @ whole, rows.sum(0)


def gathered_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``F.linear(gather_sequence(x), weight, bias)`` that keeps x's shard, not the whole
    sequence, for backward (and gathers it again there)."""
    return _GatheredLinear.apply(x, weight, bias)


def gather_sequence(x: torch.Tensor) -> torch.Tensor:
    """(b, s/n, …) shards → the whole (b, s, …) on every rank; backward, the gradient summed
    over ranks and cut back to this rank's shard."""
    return _GatherSequence.apply(x)


def scatter_sequence(x: torch.Tensor) -> torch.Tensor:
    """(b, s, …) partial sums → this rank's (b, s/n, …) shard of their sum; backward, the
    shards' gradients gathered."""
    return _ScatterSequence.apply(x)


class _SumGradsOverRanks(torch.autograd.Function):
    """Megatron's f on many parameters at once: forward, each as it is; backward (once every
    one's gradient is in), their gradients summed over ranks by one allreduce of a flat
    buffer."""

    @staticmethod
    def forward(ctx, *params: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(p.view_as(p) for p in params)

    @staticmethod
    def backward(ctx, *grads: torch.Tensor) -> tuple[torch.Tensor, ...]:
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        return tuple(g.view_as(p) for g, p in zip(flat.split([g.numel() for g in grads]), grads))


def sum_grads_over_ranks(*params: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The replicated ``params`` as sequence-parallel regions use them (each applied to this
    rank's tokens only): the same values; backward, their gradients summed over the ranks in
    one allreduce (lesson 12, "Sequence parallelism")."""
    return _SumGradsOverRanks.apply(*params)


def sequence_slice(s: int, rank: int, n: int) -> slice:
    """The positions rank ``rank`` holds in the sequence-parallel regions (s divides by n)."""
    if s % n:
        raise ValueError(f"sequence parallelism shards the sequence of {s} tokens over {n} "
                         f"ranks: s must divide by n")
    return slice(rank * s // n, (rank + 1) * s // n)


def norm_bytes(cfg: GPTConfig, b: int, n: int, dtype: torch.dtype = torch.float32,
               sequence: bool = False, s: int | None = None) -> int:
    """Bytes the LayerNorm regions keep for backward on one rank: each of the 2L + 1
    LayerNorms (``ln1``, ``ln2`` of every block, ``ln_f``) its input (b, s, h) and its
    mean and 1/σ per token; sequence parallelism keeps s/n of the tokens. The rest of what a
    rank keeps is the same with and without it (the gathered input of each column-parallel
    layer is as large as plain TP's replicated one)."""
    s = cfg.seq if s is None else s
    tokens = b * (s // n if sequence else s)
    return (2 * cfg.layers + 1) * tokens * (cfg.hidden + 2) * \
        torch.empty((), dtype=dtype).element_size()


def activation_bytes(cfg: GPTConfig, b: int, n: int, dtype: torch.dtype = torch.float32,
                     sequence: bool = False, regather: bool = False, s: int | None = None,
                     rank: int = 0) -> int:
    """Bytes autograd keeps for backward on rank ``rank`` after ``TPGPT``'s forward (what
    ``tensor.tp_step`` measures), tensor by tensor (equal to the measure in float32,
    float64 and bfloat16 on a CPU). With N = b·s tokens, T the tokens of the
    LayerNorm and dropout regions (N, or N/n under sequence parallelism), a = heads:

    per block: two LayerNorms T(h + 2); the inputs of ``qkv`` and ``fc``, whole (N·h each;
    T·h with ``regather``); q, k, v and ``proj``'s input 4·N·h/n; the softmax's output
    b·(a/n)·s²; GELU's input and output 2·N·4h/n — all in the dtype's bytes; with dropout
    the probabilities' 1-byte mask and their dropped copy, and two 1-byte masks of T·h;
    then ``ln_f`` T(h + 2) and the head's input N·h; the embedding's ids (8 bytes) and
    out-of-slice mask (1 byte) per token (and a T·h dropout mask); the loss's
    probabilities N·V_r and its ids and mask. Korthikanti et al.'s per-layer
    sbh(10 + 24/t + 5as/h) is this at 16 bits with dropout, where sequence parallelism with
    ``regather`` divides every term by t."""
    s = cfg.seq if s is None else s
    e = torch.empty((), dtype=dtype).element_size()
    h, heads, N = cfg.hidden, cfg.heads // n, b * s
    T = N // n if sequence else N
    column = T if regather else N                  # a column-parallel layer's saved input
    drop = cfg.dropout > 0
    block = (2 * T * (h + 2) + 2 * column * h + 4 * N * h // n + b * heads * s * s
             + 8 * N * h // n) * e
    block += drop * (b * heads * s * s * (1 + e) + 2 * T * h)
    start, end = vocab_range(cfg.vocab, rank, n)
    ends = (T * (h + 2) + N * h) * e + N * 9 + drop * T * h
    loss = N * (end - start) * torch.empty((), dtype=loss_dtype(dtype)).element_size() + N * 9
    return cfg.layers * block + ends + loss
