"""The interleaved 1F1B schedule: v model chunks per rank (lesson 09; Narayanan et al.,
*Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM*, SC 2021).

The model is cut into p·v *virtual stages*; rank r holds chunks c = 0…v−1, chunk c being
virtual stage s = c·p + r, so a micro-batch goes round the ring of ranks v times. Each
operation is one chunk's forward or backward of one micro-batch, ``("F", i, c)`` or
``("B", i, c)``, and takes 1/v of a whole stage's time: the bubble, p − 1 operations at
each end, shrinks v-fold to (p − 1)/(v·m) of the ideal time, for v times the messages.
``interleaved_order`` is Megatron-LM's order (micro-batches in groups of p, m a multiple
of p); ``slot_makespan`` replays orders with every operation one slot (the bubble by
counting); ``interleaved_run`` is the worker that runs the order on real processes and
records the same ``Timeline`` as ``pipeline.pipeline_run``.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from ddl_lab.model_parallel.pipeline import (StageRun, input_shape, sgd_update, stage_params,
                                             validate_order)
from ddl_lab.model_parallel.stages import (build_layers, cut, digits_batches, group,
                                           loss_share, microbatches, pad_stage)
from ddl_lab.timeline import Timeline

__all__ = ["ChunkOp", "interleaved_order", "validate_interleaved", "slot_makespan",
           "slot_bubble_of_ideal", "recorded_order", "run_chunks", "interleaved_run"]

ChunkOp = tuple[str, int, int]           # ("F" | "B", micro-batch, chunk)


def interleaved_order(rank: int, p: int, m: int, v: int) -> list[ChunkOp]:
    """Megatron-LM's interleaved 1F1B on ``rank`` of ``p``, ``v`` chunks, ``m`` micro-batches
    (a multiple of p): warm up with 2(p − rank − 1) + (v − 1)p forwards, then one forward /
    one backward, then drain. Forwards go chunk 0, 1, …, v−1 over groups of p micro-batches;
    backwards the other way round (the last chunk first)."""
    if p < 1 or v < 1 or m < p or m % p:
        raise ValueError(f"the interleaved schedule needs m a multiple of p (m = {m}, p = {p})"
                         f" and v >= 1 (v = {v})")
    total = m * v

    def op(kind: str, k: int) -> ChunkOp:
        group_, within = divmod(k, p * v)
        c = within // p
        return kind, (group_ * p) + within % p, (c if kind == "F" else v - 1 - c)

    warmup = total if m == p else min(total, 2 * (p - rank - 1) + (v - 1) * p)
    order = [op("F", k) for k in range(warmup)]
    for k in range(total - warmup):
        order += [op("F", warmup + k), op("B", k)]
    return order + [op("B", k) for k in range(total - warmup, total)]


def _deps(op: ChunkOp, rank: int, p: int, v: int) -> list[tuple[int, ChunkOp]]:
    """The operations (rank, op) on *other* virtual stages that ``op`` needs first."""
    kind, i, c = op
    s = c * p + rank
    if kind == "F":
        return [((s - 1) % p, ("F", i, (s - 1) // p))] if s > 0 else []
    return [((s + 1) % p, ("B", i, (s + 1) // p))] if s < p * v - 1 else []


def slot_makespan(orders: Sequence[Sequence[ChunkOp]], v: int) -> int:
    """Replay each rank's order, every operation one slot, each after what it needs (the
    previous virtual stage's forward, the next one's backward): the last slot used.
    Raises ValueError if the orders wait for each other."""
    p = len(orders)
    finish: dict[tuple[int, ChunkOp], int] = {}
    clock, pos = [0] * p, [0] * p
    while any(pos[r] < len(orders[r]) for r in range(p)):
        moved = False
        for r in range(p):
            if pos[r] == len(orders[r]):
                continue
            op = tuple(orders[r][pos[r]])
            deps = _deps(op, r, p, v)
            if any(d not in finish for d in deps):
                continue
            clock[r] = max([clock[r]] + [finish[d] for d in deps]) + 1
            finish[(r, op)] = clock[r]
            pos[r] += 1
            moved = True
        if not moved:
            stuck = {r: orders[r][pos[r]] for r in range(p) if pos[r] < len(orders[r])}
            raise ValueError(f"these orders wait for each other: no schedule (stuck at {stuck})")
    return max(clock)


def slot_bubble_of_ideal(orders: Sequence[Sequence[ChunkOp]], v: int) -> float:
    """Idle slots over busy slots (Megatron-LM's convention: the bubble against the ideal
    time), every operation one slot."""
    busy = sum(len(o) for o in orders)
    return (len(orders) * slot_makespan(orders, v) - busy) / busy


def validate_interleaved(orders: Sequence[Sequence[ChunkOp]], m: int, v: int) -> str | None:
    """What is wrong with ``orders`` (one per rank) as an interleaved schedule, or None: every
    chunk must run every micro-batch's forward before its backward (``validate_order``), and
    the ranks must not wait for each other in a circle."""
    for r, order in enumerate(orders):
        for c in range(v):
            if problem := validate_order([(k, i) for k, i, cc in order if cc == c], m):
                return f"rank {r}, chunk {c}: {problem}"
        if extra := [o for o in order if not 0 <= o[2] < v]:
            return f"rank {r}: {extra[0]} names a chunk outside 0…{v - 1}"
    try:
        slot_makespan(orders, v)
    except ValueError as e:
        return str(e)
    return None


def recorded_order(run: StageRun, step: int = -1) -> list[ChunkOp]:
    """The operations a rank ran in one step, in the order its timeline recorded them
    (a span's ``step`` is chunk·m + micro-batch; chunk 0 for a one-chunk schedule)."""
    kinds = {"forward": "F", "backward": "B"}
    spans = sorted(run.timelines[step].spans, key=lambda s: s.start)
    return [(kinds[s.kind], s.step % run.m, s.step // run.m) for s in spans if s.kind in kinds]


def _tag(s: int, i: int, m: int, kind: str) -> int:
    """The tag of what enters virtual stage s for micro-batch i (activation or gradient)."""
    return 2 * (s * m + i) + (kind == "B")


def run_chunks(chunks: Sequence[nn.Module], order: Sequence[ChunkOp], batches: Sequence,
               loss_fn: Callable, rank: int, p: int, in_shapes: Sequence[Sequence[int]],
               timeline: Timeline | None = None, lookahead: int = 4) -> float | None:
    """Run ``rank``'s interleaved ``order`` over its ``chunks`` on ranks 0…p−1 (lesson 09):
    chunk c is virtual stage c·p + rank; activations go to the next rank, gradients to the
    previous (round the ring), tagged by virtual stage and micro-batch. Sends do not block,
    the receives of the next ``lookahead`` operations are posted ahead (as
    ``pipeline.run_schedule`` does), and waiting for a tensor is recorded as ``wait``.
    Returns the batch loss on the rank with the last virtual stage."""
    m = len(batches)
    last = p * len(chunks) - 1
    total = sum(len(y) for _, y in batches)
    kept: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
    posted: dict[int, tuple] = {}
    pending: list = []
    loss = None

    def span(kind: str):
        return timeline.span(kind) if timeline is not None else nullcontext()

    def post(k: int) -> None:
        """Post operation k's receive, if it needs one and its shape is known."""
        if k >= len(order) or k in posted:
            return
        kind, i, c = order[k]
        s = c * p + rank
        if kind == "F" and s > 0:
            buf = torch.empty((len(batches[i][1]), *in_shapes[c]))
            posted[k] = (dist.irecv(buf, (rank - 1) % p, tag=_tag(s, i, m, "F")), buf)
        elif kind == "B" and s < last and (i, c) in kept:
            buf = torch.empty_like(kept[(i, c)][1])
            posted[k] = (dist.irecv(buf, (rank + 1) % p, tag=_tag(s, i, m, "B")), buf)

    def take(k: int) -> torch.Tensor:
        post(k)
        work, buf = posted.pop(k)
        with span("wait"):
            work.wait()
        return buf

    for k, (kind, i, c) in enumerate(order):
        s = c * p + rank
        if timeline is not None:
            timeline.step = c * m + i
        for j in range(k, k + lookahead):
            post(j)
        if kind == "F":
            x, y = batches[i]
            if s > 0:
                x = take(k).requires_grad_()
            with span("forward"):
                out = chunks[c](x)
                if s == last:
                    out = loss_fn(out, y) * loss_share(loss_fn, len(y), total)
            if s < last:
                sent = out.detach()
                pending.append((dist.isend(sent, (rank + 1) % p, tag=_tag(s + 1, i, m, "F")),
                                sent))
            kept[(i, c)] = (x, out)
        else:
            grad = None if s == last else take(k)
            x, out = kept.pop((i, c))
            with span("backward"):
                if out.requires_grad:              # not a first chunk without parameters
                    out.backward(grad)
            if s == last:
                loss = (loss or 0.0) + out.item()
            if s > 0:
                pending.append((dist.isend(x.grad, (rank - 1) % p, tag=_tag(s - 1, i, m, "B")),
                                x.grad))
            del x, out, grad
    with span("wait"):
        for work, _ in pending:
            work.wait()
    return loss


def interleaved_run(p: int = 2, v: int = 2, m: int = 4, steps: int = 1, batch: int = 32,
                    lr: float = 0.1, pad: float = 0.0, seed: int = 0, hidden: int = 64,
                    kind: str = "mlp") -> StageRun | None:
    """Worker function: the model cut into p·v virtual stages on ranks 0…p−1 (p ≥ 2), rank
    r holding chunks r, r + p, …, trained with ``interleaved_order`` (lesson 09). Ranks
    from p on have no chunk and return None.

    ``pad``: seconds of padded compute per example and *rank*, split evenly over its v
    chunks — the same compute per rank as ``pipeline_run(..., pad=pad)`` on p stages.
    ``StageRun.params`` is the rank's chunks' parameters, chunk 0 first; a span's ``step``
    is chunk·m + micro-batch.
    """
    n, rank = dist.get_world_size(), dist.get_rank()
    if not 2 <= p <= n:
        raise ValueError(f"the interleaved schedule needs 2 <= p <= {n} ranks, got p = {p}")
    g = group(list(range(p)))
    if rank >= p:
        return None
    order = interleaved_order(rank, p, m, v)
    layers = cut(build_layers(kind, hidden, seed), p * v)
    chunks = [pad_stage(layers[c * p + rank], pad / v) for c in range(v)]
    shapes = [input_shape(layers, c * p + rank) for c in range(v)]
    loss_fn = nn.CrossEntropyLoss()
    run = StageRun(rank, p, m, "interleaved 1F1B", v=v, pad=pad)
    for X, y in digits_batches(batch, steps, seed):
        tl = Timeline(rank=rank)
        dist.barrier(group=g)
        t0 = time.perf_counter()
        loss = run_chunks(chunks, order, microbatches(X, y, m), loss_fn, rank, p, shapes, tl)
        run.step_times.append(time.perf_counter() - t0)
        run.timelines.append(tl)
        if loss is not None:
            run.losses.append(loss)
        for chunk in chunks:
            sgd_update(chunk, lr)
    run.params = torch.cat([stage_params(layers[c * p + rank]) for c in range(v)])
    return run
