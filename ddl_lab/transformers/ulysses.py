"""All-to-all sequence parallelism, DeepSpeed-Ulysses (lesson 12 `transformers`, "Context
parallelism"; Jacobs et al. 2023), beside ring attention (``ddl_lab.transformers.ring``).

Each of n ranks holds a slice of the sequence of q, k and v with every head, (b, a, s_r, d).
One ``all_to_all`` turns that into every position of a group of heads, (b, a_r, s, d):
rank r sends head group g of its slice to rank g and gets its own group of every other
rank's slice. Heads are independent, so plain attention (``ddl_lab.ml.gpt.attention``, the
causal mask on the whole sequence) runs locally, and one ``all_to_all`` back returns the
output to sequence slices. Backward is the same exchanges reversed (an all-to-all's
gradient is the opposite all-to-all).

Bytes: each all-to-all moves a rank's tensor but its own share, (n − 1)/n of b·a·s·d/n
items; forward four (q, k, v in, the output back), backward four. Ring attention's rank
forwards n − 1 K/V blocks forward alone: 2(n − 1)·b·a·s·d/n items, n/2 times Ulysses's
forward. Ulysses needs n to be at most the number of heads (head groups here may differ by
one head; DeepSpeed asks n to divide a).
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from ddl_lab.ml.gpt import attention
from ddl_lab.runtime import device
from ddl_lab.runtime.wiretap import Wiretap
from ddl_lab.transformers.ring import _home, inputs, layout, split_sizes, take

__all__ = ["seq_to_heads", "heads_to_seq", "ulysses_attention", "ulysses_bytes",
           "ulysses_case"]


def _splits(total: int, n: int) -> list[slice]:
    """n consecutive slices of ``total`` items, sizes as ``torch.tensor_split``."""
    sizes = split_sizes(total, n)
    starts = [sum(sizes[:i]) for i in range(n)]
    return [slice(a, a + size) for a, size in zip(starts, sizes)]


def _exchange(pieces: list[torch.Tensor], shapes: list[tuple[int, ...]]) -> list[torch.Tensor]:
    """One ``all_to_all_single``: ``pieces[g]`` goes to rank g; the piece from rank i comes
    back with ``shapes[i]`` (sizes may differ: flat buffers with split sizes)."""
    send = torch.cat([p.reshape(-1) for p in pieces])
    sizes_in = [p.numel() for p in pieces]
    sizes_out = [int(torch.Size(shape).numel()) for shape in shapes]
    got = send.new_empty(sum(sizes_out))
    dist.all_to_all_single(got, send, sizes_out, sizes_in)
    return [g.view(shape) for g, shape in zip(got.split(sizes_out), shapes)]


def seq_to_heads(x: torch.Tensor, seq: int) -> torch.Tensor:
    """(b, a, s_r, d) sequence slices → (b, a_r, s, d) this rank's heads, every position."""
    rank, n = dist.get_rank(), dist.get_world_size()
    b, a, _, d = x.shape
    heads, lengths = _splits(a, n), _splits(seq, n)
    mine = heads[rank].stop - heads[rank].start
    got = _exchange([x[:, h] for h in heads],
                    [(b, mine, s.stop - s.start, d) for s in lengths])
    return torch.cat(got, 2)


def heads_to_seq(y: torch.Tensor, heads: int) -> torch.Tensor:
    """(b, a_r, s, d) this rank's heads → (b, a, s_r, d) every head of its sequence slice
    (``seq_to_heads``'s inverse)."""
    rank, n = dist.get_rank(), dist.get_world_size()
    b, _, s, d = y.shape
    groups, lengths = _splits(heads, n), _splits(s, n)
    mine = lengths[rank].stop - lengths[rank].start
    got = _exchange([y[:, :, part] for part in lengths],
                    [(b, g.stop - g.start, mine, d) for g in groups])
    return torch.cat(got, 1)


class _AllToAll(torch.autograd.Function):
    """``seq_to_heads`` (``to_heads``) or ``heads_to_seq``; backward, the other one."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, to_heads: bool, size: int) -> torch.Tensor:
        ctx.to_heads = to_heads
        ctx.size = x.shape[1] if to_heads else x.shape[2]     # all heads; all positions
        return seq_to_heads(x, size) if to_heads else heads_to_seq(x, size)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple:
        grad = grad.contiguous()
        back = heads_to_seq(grad, ctx.size) if ctx.to_heads else seq_to_heads(grad, ctx.size)
        return back, None, None


def ulysses_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: int,
                      causal: bool = True) -> torch.Tensor:
    """Attention of this rank's sequence slice (b, a, s_r, d; contiguous slices as
    ``layout(seq, n)``) by all-to-all over heads: worker code, differentiable."""
    n = dist.get_world_size()
    if n > q.shape[1]:
        raise ValueError(f"Ulysses splits the {q.shape[1]} heads over the ranks: "
                         f"{n} ranks is more than heads")
    local = attention(*(_AllToAll.apply(x, True, seq) for x in (q, k, v)), causal=causal)
    return _AllToAll.apply(local, False, q.shape[1])


def ulysses_bytes(s: int, n: int, b: int, a: int, d: int, itemsize: int = 4,
                  backward: bool = False) -> list[float]:
    """Bytes each rank puts on the wire in one Ulysses attention, forward (``backward``:
    its backward), as the wiretap counts an all-to-all: the pieces for the other ranks (a
    rank's piece for itself never leaves it) — (n − 1)/n of the tensor it hands in when
    heads and positions split evenly. Forward: q, k, v of its s_r positions, the other
    ranks' heads (b·(a − a_r)·s_r·d each) out; its a_r heads' output for the other ranks'
    positions (b·a_r·(s − s_r)·d) back; backward: the output's gradient out, the three
    gradients back."""
    lengths, heads = _splits(s, n), _splits(a, n)
    unit = b * d * itemsize
    slices = [p.stop - p.start for p in lengths]
    groups = [h.stop - h.start for h in heads]
    ins, outs = (3, 1) if not backward else (1, 3)
    return [unit * (ins * (a - groups[r]) * slices[r] + outs * groups[r] * (s - slices[r]))
            for r in range(n)]


def ulysses_case(b: int, a: int, s: int, d: int, causal: bool = True, seed: int = 0,
                 dtype: str = "float64") -> dict:
    """Worker function: Ulysses attention on this rank's slice of ``ring.inputs``, forward
    and backward, under the wiretap: the output, the gradients, the bytes sent each way."""
    rank, n = dist.get_rank(), dist.get_world_size()
    mine = layout(s, n)[rank]
    q, k, v, grad = (take(x, mine).to(device())
                     for x in inputs(b, a, s, d, seed, getattr(torch, dtype)))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    with Wiretap() as forward:
        out = ulysses_attention(q, k, v, s, causal)
    with Wiretap() as backward:
        out.backward(grad)
    return {"rank": rank, **_home(out=out.detach(), dq=q.grad, dk=k.grad, dv=v.grad),
            "sent": (forward.sent, backward.sent)}
