"""The vocabulary split over ranks (lesson 12, transformers; Megatron-LM, Shoeybi et al. 2019,
section 3): the token embedding and the tied head's logits by vocabulary slices.

Rank r of n keeps the rows ``vocab_range(V, r, n)`` of the token embedding (slices differ
by at most one row, so V need not divide by n):

- **embedding**: an id outside the slice looks up nothing (a zero row), so each rank holds a
  *partial sum* of the embeddings, and one allreduce (or, under sequence parallelism, one
  reduce-scatter) adds them: every id was found on exactly one rank.
- **head** (tied): this rank's logits are ln_f(x) · tok_rᵀ, its slice of the vocabulary.
- **cross-entropy** (``_vocab_parallel_cross_entropy``, private: lesson 12's graded task 2
  asks for it): log Σ_v e^{z_v} − z_target needs the
  whole vocabulary, but only three numbers per token cross the wire: the max (an allreduce
  with MAX, so that no rank's exponentials overflow), the sum of exponentials (an allreduce),
  and the target's logit (each rank contributes it if it holds the target, else 0; an
  allreduce). No rank ever holds the full logits, and the backward needs no communication:
  ∂loss/∂z_v = (softmax_v − [v = target]) / N on the rank that holds v.
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

__all__ = ["vocab_range", "VocabParallelEmbedding", "loss_dtype"]


def vocab_range(vocab: int, rank: int, n: int) -> tuple[int, int]:
    """[start, end) of rank ``rank``'s vocabulary rows (``torch.tensor_split``'s blocks)."""
    if not 0 <= rank < n:
        raise ValueError(f"need n >= 1 ranks and a rank in 0..n-1, got n={n}, rank={rank}")
    if vocab < n:
        raise ValueError(f"a vocabulary of {vocab} ids cannot be split over {n} ranks")
    small, extra = divmod(vocab, n)
    start = rank * small + min(rank, extra)
    return start, start + small + (rank < extra)


def _local_ids(idx: torch.Tensor, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids relative to the slice, 0 where outside; which ids fall inside [start, end))."""
    inside = (idx >= start) & (idx < end)
    return torch.where(inside, idx - start, torch.zeros_like(idx)), inside


class VocabParallelEmbedding(nn.Module):
    """This rank's rows of a token embedding. ``partial(idx)`` is this rank's share of the
    embeddings (zero rows for ids outside its slice); the caller sums the shares over ranks
    (an allreduce in plain tensor parallelism, a reduce-scatter under sequence parallelism)."""

    def __init__(self, full: nn.Embedding, rank: int, n: int):
        super().__init__()
        self.start, self.end = vocab_range(full.num_embeddings, rank, n)
        self.weight = nn.Parameter(full.weight.detach()[self.start:self.end].clone())

    def partial(self, idx: torch.Tensor) -> torch.Tensor:
        local, inside = _local_ids(idx, self.start, self.end)
        return F.embedding(local, self.weight).masked_fill(~inside.unsqueeze(-1), 0.0)


def loss_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the loss is computed in: at least float32 (as ``ml.gpt.lm_loss``)."""
    return torch.promote_types(dtype, torch.float32)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy of logits split by vocabulary slices (see the module's docstring):
    three allreduces of N numbers forward, nothing backward."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, start: int) -> torch.Tensor:
        z = logits.to(loss_dtype(logits.dtype))               # (N, V_r)
        top = z.max(dim=-1).values
        dist.all_reduce(top, op=dist.ReduceOp.MAX)             # the global max per token
        e = (z - top.unsqueeze(-1)).exp()                      # ≤ 1 everywhere: no overflow
        total = e.sum(dim=-1)
        dist.all_reduce(total)                                 # Σ_v e^{z_v − max}
        local, inside = _local_ids(targets, start, start + z.shape[-1])
        picked = z.gather(-1, local.unsqueeze(-1)).squeeze(-1) - top
        picked = torch.where(inside, picked, torch.zeros_like(picked))
        dist.all_reduce(picked)                                # z_target − max, from its rank
        ctx.save_for_backward(e / total.unsqueeze(-1), local, inside)
        ctx.dtype = logits.dtype
        return (total.log() - picked).mean()

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        probs, local, inside = ctx.saved_tensors
        g = probs.clone()
        rows = torch.arange(g.shape[0], device=g.device)
        g[rows, local] -= inside.to(g.dtype)                   # −1 at the target, if mine
        return (g * (grad / g.shape[0])).to(ctx.dtype), None, None


def _vocab_parallel_cross_entropy(logits: torch.Tensor, targets: torch.Tensor,
                                 start: int) -> torch.Tensor:
    """Mean next-token cross-entropy over every position from this rank's logits (…, V_r) —
    the vocabulary ids start … start + V_r − 1 — and the targets (…): equal on every rank
    to ``F.cross_entropy`` of the full logits, which no rank holds."""
    return _VocabParallelCrossEntropy.apply(logits.reshape(-1, logits.shape[-1]),
                                            targets.reshape(-1), start)
