"""Context parallelism by ring attention (lesson 12 `transformers`, "Context parallelism";
Liu et al. 2023, "Ring Attention with Blockwise Transformers").

Each of n ranks holds a slice of the sequence: its queries, keys and values, (b, a, s_r, d).
Attention needs every query against every key, so the K/V blocks travel round the ring:
at step t rank r holds the block of rank (r − t) mod n, computes its queries against it,
and meanwhile (``dist.isend``/``dist.irecv``, double-buffered) passes it on to r + 1 and
receives the next one from r − 1. The partial results merge by the log-sum-exp (online
softmax) rule: a running max m, a running sum z of exp(score − m) and an output rescaled
by exp(m_old − m_new) whenever the max grows; at the end o / z is exactly softmax(q kᵀ/√d) v.

- **Causal masking on global positions.** A rank's slice is a list of chunks of global
  positions (``layout``); a tile (a chunk of queries against a chunk of keys) is skipped
  when every key comes after every query, masked when some do, computed whole otherwise.
- **Uneven slices, no padding.** s not divisible by n: the slices differ by one position
  (as ``torch.tensor_split``); every rank knows every slice's length from (s, n), so each
  receive is sized to the block it gets. An empty block is neither sent nor received.
- **Zig-zag balancing.** Causal attention without it gives rank n − 1 n times the work of
  rank 0; cut into 2n chunks with rank r holding chunks r and 2n − 1 − r, every rank
  computes the same 2n + 1 tiles (``ring_work``: max work zig-zag / naive → 1/2).
- **Backward runs the ring again.** The autograd function keeps q, k, v, the output and
  the log-sum-exp per query; backward sends the K/V blocks round once more and with each a
  dK/dV accumulator that every rank adds its share to; after n hops it is home.
- **A recorder** (``RingRecorder``) keeps, per step, which block a rank holds and its
  running max and sum: plain data for the lesson's stepper.

Ulysses (all-to-all over heads) and the bytes of both: ``ddl_lab.transformers.ulysses``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from ddl_lab.runtime import device
from ddl_lab.runtime.wiretap import Wiretap

__all__ = ["Chunk", "split_sizes", "layout", "positions", "take", "place", "tiles_work",
           "ring_work", "balance_ratio", "RingStep", "RingRecorder", "ring_bytes",
           "ring_case", "inputs"]

Chunk = tuple[int, int]                   # global positions [start, stop)
_NEG = float("-inf")


# ------------------------------------------------------------- who holds what

def split_sizes(total: int, parts: int) -> list[int]:
    """``total`` items cut into ``parts`` in order, sizes as ``torch.tensor_split`` gives
    them (the first ``total % parts`` one longer)."""
    return [total // parts + (i < total % parts) for i in range(parts)]


def layout(s: int, n: int, zigzag: bool = False) -> list[list[Chunk]]:
    """The chunks of global positions each of ``n`` ranks holds of a sequence of ``s``.

    Naive: ``s`` cut into n slices in order (rank r: slice r). Zig-zag: cut into 2n chunks,
    rank r holds chunks r and 2n − 1 − r. Sizes as ``torch.tensor_split`` (the first ones one
    longer when the cut is uneven); empty chunks are left out."""
    if n < 1 or s < 0:
        raise ValueError(f"need n >= 1 ranks and a length s >= 0, got n={n}, s={s}")
    parts = 2 * n if zigzag else n
    sizes = split_sizes(s, parts)
    bounds = [sum(sizes[:i]) for i in range(parts + 1)]
    chunks = [(bounds[i], bounds[i + 1]) for i in range(parts)]
    mine = [[i, parts - 1 - i] if zigzag else [i] for i in range(n)]
    return [[chunks[i] for i in ids if chunks[i][1] > chunks[i][0]] for ids in mine]


def _length(chunks: list[Chunk]) -> int:
    return sum(b - a for a, b in chunks)


def positions(chunks: list[Chunk]) -> torch.Tensor:
    """The global positions of a rank's chunks, in the order it holds them."""
    return torch.cat([torch.arange(a, b) for a, b in chunks] + [torch.zeros(0, dtype=torch.long)])


def take(x: torch.Tensor, chunks: list[Chunk], dim: int = 2) -> torch.Tensor:
    """A rank's slice of a whole-sequence tensor (sequence along ``dim``)."""
    return x.index_select(dim, positions(chunks)).contiguous()


def place(parts: list[torch.Tensor], chunks: list[list[Chunk]], dim: int = 2) -> torch.Tensor:
    """The whole-sequence tensor from every rank's slice (``take``'s inverse)."""
    where = torch.cat([positions(c) for c in chunks])
    joined = torch.cat(parts, dim)
    return joined.index_select(dim, torch.argsort(where))


# ------------------------------------------------------------- the tiles and their work

def _tiles(q_chunks: list[Chunk], k_chunks: list[Chunk], causal: bool, device: Any = "cpu"
           ) -> list[tuple[slice, slice, torch.Tensor | None]]:
    """The tiles a rank computes of its queries against one K/V block: (query rows, key
    rows, mask) in local rows; the mask (True: masked) is None where no key comes after a
    query. A tile whose keys all come after all its queries is skipped."""
    out, qo = [], 0
    for qa, qb in q_chunks:
        ko = 0
        for ka, kb in k_chunks:
            if not (causal and ka > qb - 1):
                mask = None
                if causal and kb - 1 > qa:
                    mask = (torch.arange(ka, kb, device=device)[None, :]
                            > torch.arange(qa, qb, device=device)[:, None])
                out.append((slice(qo, qb - qa + qo), slice(ko, kb - ka + ko), mask))
            ko += kb - ka
        qo += qb - qa
    return out


def tiles_work(q_chunks: list[Chunk], k_chunks: list[Chunk], causal: bool) -> int:
    """Query–key scores computed for one K/V block: the areas of the tiles not skipped
    (the masked part of a diagonal tile is computed, then masked)."""
    return _area(_tiles(q_chunks, k_chunks, causal))


def _area(tiles: list[tuple[slice, slice, Any]]) -> int:
    return sum((q.stop - q.start) * (k.stop - k.start) for q, k, _ in tiles)


def ring_work(s: int, n: int, zigzag: bool = False, causal: bool = True) -> list[int]:
    """Scores each rank computes over a whole ring pass (its queries against every block),
    fully masked tiles skipped. Naive causal, s = n·c: rank r computes (r + 1)·c²; zig-zag,
    s = 2n·h: every rank (2n + 1)·h²."""
    chunks = layout(s, n, zigzag)
    return [sum(tiles_work(mine, block, causal) for block in chunks) for mine in chunks]


def balance_ratio(s: int, n: int) -> float:
    """Max work per rank, zig-zag over naive, causal: (2n + 1)/(4n) when 2n divides s,
    → 1/2 as n grows."""
    return max(ring_work(s, n, True)) / max(ring_work(s, n, False))


# ------------------------------------------------------------- the recorder

@dataclass(frozen=True)
class RingStep:
    """One rank's state after one ring step: ``block`` the rank whose K/V it held,
    ``keys`` their global positions, ``work`` the scores it computed, ``max`` and ``sum``
    its running max m and sum z per query (nested lists, shape (b, a, s_r))."""

    step: int
    rank: int
    block: int
    keys: tuple[Chunk, ...]
    work: int
    max: list
    sum: list


@dataclass
class RingRecorder:
    """Collects a rank's ``RingStep`` per forward step (the lesson's ring stepper)."""

    steps: list[RingStep] = field(default_factory=list)

    def record(self, step: int, rank: int, block: int, keys: list[Chunk], work: int,
               m: torch.Tensor, z: torch.Tensor) -> None:
        self.steps.append(RingStep(step, rank, block, tuple(keys), work, m.tolist(),
                                   z.tolist()))


# ------------------------------------------------------------- round the ring

class _Transfer:
    """One hop of the ring: send ``block`` to the next rank, receive a block of ``shape``
    from the previous one (non-blocking; ``wait`` returns the received block). Empty
    blocks are not sent."""

    def __init__(self, block: torch.Tensor, shape: tuple[int, ...], tag: int):
        rank, n = dist.get_rank(), dist.get_world_size()
        self.works = []
        if block.numel():
            self.works.append(dist.isend(block.contiguous(), (rank + 1) % n, tag=tag))
        self.got = block.new_zeros(shape)
        if self.got.numel():
            self.works.append(dist.irecv(self.got, (rank - 1) % n, tag=tag))

    def wait(self) -> torch.Tensor:
        while self.works:                       # a gloo work waited twice never returns
            self.works.pop().wait()
        return self.got


def _block_shape(like: torch.Tensor, chunks: list[Chunk]) -> tuple[int, ...]:
    """A stacked K/V block (2, b, a, s_j, d) of a rank holding ``chunks``."""
    two, b, a, _, d = like.shape
    return (two, b, a, _length(chunks), d)


def _scores(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    s = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    return s if mask is None else s.masked_fill(mask, _NEG)


def _merge(m: torch.Tensor, z: torch.Tensor, o: torch.Tensor, rows: slice,
           scores: torch.Tensor, v: torch.Tensor) -> None:
    """The online-softmax rule, in place on the rows ``rows``: raise the running max,
    rescale the old sum and output by exp(m_old − m_new), add the tile's."""
    m_old = m[..., rows]
    m_new = torch.maximum(m_old, scores.amax(-1))
    safe = m_new.masked_fill(m_new == _NEG, 0.0)      # rows that saw no key yet
    alpha = torch.exp(m_old - safe)
    p = torch.exp(scores - safe[..., None])
    z[..., rows] = alpha * z[..., rows] + p.sum(-1)
    o[..., rows, :] = alpha[..., None] * o[..., rows, :] + p @ v
    m[..., rows] = m_new


def _ring_forward(q: torch.Tensor, kv: torch.Tensor, chunks: list[list[Chunk]],
                  causal: bool, overlap: bool, recorder: RingRecorder | None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's output and log-sum-exp per query, its K/V blocks sent round the ring."""
    rank, n = dist.get_rank(), dist.get_world_size()
    m = q.new_full(q.shape[:-1], _NEG)            # running max per query
    z, o = q.new_zeros(q.shape[:-1]), torch.zeros_like(q)   # running sum, output
    for t in range(n):
        j = (rank - t) % n
        hop = None
        if t < n - 1:                             # the next block travels meanwhile
            hop = _Transfer(kv, _block_shape(kv, chunks[(j - 1) % n]), tag=t)
            if not overlap:
                kv_next = hop.wait()
        tiles = _tiles(chunks[rank], chunks[j], causal, q.device)
        for rows, cols, mask in tiles:
            _merge(m, z, o, rows, _scores(q[..., rows, :], kv[0][..., cols, :], mask),
                   kv[1][..., cols, :])
        if recorder is not None:
            recorder.record(t, rank, j, chunks[j], _area(tiles), m, z)
        if hop is not None:
            kv = hop.wait() if overlap else kv_next
    return o / z[..., None], m + torch.log(z)


def _ring_backward(do: torch.Tensor, q: torch.Tensor, kv: torch.Tensor, out: torch.Tensor,
                   lse: torch.Tensor, chunks: list[list[Chunk]], causal: bool
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """dq, and d(K, V) of this rank's own block: the K/V blocks go round again, each with
    an accumulator every rank adds its share to, which after n hops is back home."""
    rank, n = dist.get_rank(), dist.get_world_size()
    rest = (do * out).sum(-1)                     # Σ_j P_ij dP_ij = rowsum(dO ∘ O)
    scale = 1 / math.sqrt(q.shape[-1])
    dq, incoming = torch.zeros_like(q), None
    for t in range(n):
        j = (rank - t) % n
        hop = _Transfer(kv, _block_shape(kv, chunks[(j - 1) % n]), tag=t) if t < n - 1 \
            else None
        dkv = torch.zeros_like(kv)                # this rank's share of block j's gradient
        for rows, cols, mask in _tiles(chunks[rank], chunks[j], causal, q.device):
            qt, dot = q[..., rows, :], do[..., rows, :]
            k, v = kv[0][..., cols, :], kv[1][..., cols, :]
            p = torch.exp(_scores(qt, k, mask) - lse[..., rows, None])
            ds = p * (dot @ v.transpose(-1, -2) - rest[..., rows, None]) * scale
            dkv[1][..., cols, :] += p.transpose(-1, -2) @ dot
            dkv[0][..., cols, :] += ds.transpose(-1, -2) @ qt
            dq[..., rows, :] += ds @ k
        if n == 1:
            return dq, dkv
        if incoming is not None:                  # the shares of the ranks before
            dkv += incoming.wait()
        incoming = _Transfer(dkv, _block_shape(kv, chunks[(j - 1) % n]), tag=n + t)
        if hop is not None:
            kv = hop.wait()
    return dq, incoming.wait()                    # own block, every rank's share added


class _RingAttention(torch.autograd.Function):
    """Ring attention whose backward runs the ring again (see ``_ring_backward``)."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                chunks: list[list[Chunk]], causal: bool, overlap: bool,
                recorder: RingRecorder | None) -> torch.Tensor:
        kv = torch.stack([k, v])
        out, lse = _ring_forward(q, kv, chunks, causal, overlap, recorder)
        ctx.save_for_backward(q, kv, out, lse)
        ctx.chunks, ctx.causal = chunks, causal
        return out

    @staticmethod
    def backward(ctx: Any, do: torch.Tensor) -> tuple:
        q, kv, out, lse = ctx.saved_tensors
        dq, dkv = _ring_backward(do.contiguous(), q, kv, out, lse, ctx.chunks, ctx.causal)
        return dq, dkv[0], dkv[1], None, None, None, None


def _ring_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, seq: int,
                    causal: bool = True, zigzag: bool = False, overlap: bool = True,
                    recorder: RingRecorder | None = None) -> torch.Tensor:
    """softmax(q kᵀ/√d) v for this rank's queries against the whole sequence of ``seq``
    positions, on the default group's ranks (worker code). q, k, v: (b, a, s_r, d), this
    rank's slice as ``layout(seq, n, zigzag)`` gives it. ``overlap=False`` waits for each
    block before computing (the benchmark's baseline). Differentiable (backward: the ring
    again). Private: lesson 12's graded task 1 asks for its forward (``ring_case`` runs it)."""
    chunks = layout(seq, dist.get_world_size(), zigzag)
    want = _length(chunks[dist.get_rank()])
    if not q.shape[2] == k.shape[2] == v.shape[2] == want:
        raise ValueError(f"rank {dist.get_rank()} holds {want} of the {seq} positions, "
                         f"got q, k, v of lengths {q.shape[2]}, {k.shape[2]}, {v.shape[2]}")
    return _RingAttention.apply(q, k, v, chunks, causal, overlap, recorder)


def ring_bytes(s: int, n: int, b: int, a: int, d: int, itemsize: int = 4,
               zigzag: bool = False, backward: bool = False) -> list[int]:
    """Bytes each rank sends in one ring attention, forward (``backward=True``: its
    backward). A block of s_j positions is 2·b·a·s_j·d·itemsize (K and V). Forward: rank r
    forwards every block but its last, the one of rank r + 1: 2·b·a·d·(s − s_{r+1}) items,
    (n − 1) blocks of s/n when n divides s. Backward: that again, plus every block's dK/dV
    once: 2·b·a·d·s more."""
    lengths = [_length(c) for c in layout(s, n, zigzag)]
    per = 2 * b * a * d * itemsize
    if n == 1:
        return [0]
    return [per * (s - lengths[(r + 1) % n] + (s if backward else 0)) for r in range(n)]


# ------------------------------------------------------------- on the workers

def _home(**tensors: torch.Tensor) -> dict[str, torch.Tensor]:
    """Tensors a worker returns, on the CPU."""
    return {name: t.cpu() for name, t in tensors.items()}


def inputs(b: int, a: int, s: int, d: int, seed: int = 0, dtype: torch.dtype = torch.float64
           ) -> tuple[torch.Tensor, ...]:
    """Seeded whole-sequence q, k, v and an upstream gradient, (b, a, s, d) each."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, a, s, d, generator=g, dtype=dtype) for _ in range(4))


def ring_case(b: int, a: int, s: int, d: int, causal: bool = True, zigzag: bool = False,
              seed: int = 0, overlap: bool = True, dtype: str = "float64") -> dict:
    """Worker function: ring attention on this rank's slice of seeded inputs, forward and
    backward, under the wiretap. Returns the slice's output and gradients, the scores it
    computed, its recorded steps and the bytes it sent forward and backward."""
    rank, n = dist.get_rank(), dist.get_world_size()
    chunks = layout(s, n, zigzag)
    q, k, v, grad = (take(x, chunks[rank]).to(device()) for x in inputs(b, a, s, d, seed,
                                                                      getattr(torch, dtype)))
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    recorder = RingRecorder()
    with Wiretap() as forward:
        out = _ring_attention(q, k, v, s, causal, zigzag, overlap, recorder)
    with Wiretap() as backward:
        out.backward(grad)
    return {"rank": rank, **_home(out=out.detach(), dq=q.grad, dk=k.grad, dv=v.grad),
            "work": sum(st.work for st in recorder.steps), "steps": recorder.steps,
            "sent": (forward.sent, backward.sent)}
