"""Expert parallelism by hand, on real workers (lesson 14, experts; GShard, Lepikhin et al.
2020; Switch Transformer, Fedus et al. 2021).

On rank r of n, the E experts are split in whole experts: rank r holds experts
[r·E/n, (r+1)·E/n) (E must divide by n), the router is replicated, and the tokens are
data-parallel — each rank routes its own slice of the batch. One MoE layer is then:

1. **route** the rank's T tokens (``moe.route``, capacity C = ``cfg.capacity(T)`` of *its*
   slice) and sort the kept (token, choice) pairs by expert, hence by destination rank;
2. **split sizes first**: an ``all_to_all_single`` of E counts, E/n to each rank — how many
   pairs it will get from this rank for each of its experts, so it knows which expert each
   arriving row is for (the n split sizes are their sums per rank; with one expert per rank,
   exactly n counts). Megatron-core's all-to-all dispatcher all-gathers these per-expert
   counts instead; a rank needs only its own column;
3. **dispatch**: ``dist.all_to_all_single(out, inp, output_split_sizes, input_split_sizes)``
   with those uneven splits sends each pair's activation (a token with both choices on one
   rank goes twice); gloo on CPU supports uneven splits, zero included (torch 2.13);
4. the rank's **experts** run on what arrived (rows by source rank, then by expert);
5. **combine**: the reverse all-to-all, splits swapped; each output goes back to its token,
   weighted by its gate (``index_add``); a dropped pair adds nothing (the residual carries it).

``_AllToAll`` is the autograd function of steps 3 and 5: its backward is the all-to-all of the
gradient with the splits swapped, so the forward and backward equal the one-process MoE.

**Capacity.** Each rank's slice is routed with the capacity of a slice; ``one_process`` routes
the same slices one by one with that same capacity (``moe.moe_forward`` per slice), so the
same pairs are dropped on both sides.

**The comparison** (``ep_step`` against ``one_process``; the loss of a step is
Σ_r [Σ (y_r · w_r) + aux_weight · aux_r], w a fixed random weight, aux_r the slice's
load-balancing loss): outputs and input gradients are per token — concatenated in rank order
they equal one process's; the experts' gradients live on the rank that owns them —
concatenated along dimension 0 they equal one process's; the router is replicated and each
rank's router gradient is for its own tokens — their *sum* over ranks equals one process's
(data-parallel training would all-reduce it; that allreduce is not part of ``ep_bytes``).

**Bytes** (``ep_bytes``): rank r sending S_r pairs to other ranks and receiving R_r from
them, with a = h · element size, puts on the wire forward 8E(n−1)/n (the counts, int64) +
S_r·a (dispatch) + R_r·a (combine), backward S_r·a (combine's gradient) + R_r·a
(dispatch's). Pairs for the rank's own experts stay on it; the wiretap counts what leaves.
"""
from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddl_lab.experts.moe import MoEConfig, moe_forward, route
from ddl_lab.runtime.backends import device
from ddl_lab.runtime.costs import sent_bytes
from ddl_lab.runtime.wiretap import Wiretap

__all__ = ["local_experts", "all_to_all", "ep_moe", "problem", "ep_bytes", "ep_step",
           "one_process", "assemble", "differences", "ep_wait", "PHASES"]

EXPERT_PARAMS = ("fc.weight", "fc.bias", "proj.weight", "proj.bias")
# what ``ep_moe(clock=...)`` times, in order
PHASES = ("route", "split sizes", "dispatch", "experts", "combine")


def local_experts(cfg: MoEConfig, rank: int, n: int) -> range:
    """The experts rank ``rank`` of ``n`` holds: [rank·E/n, (rank+1)·E/n)."""
    if cfg.experts % n:
        raise ValueError(f"expert parallelism gives each of the {n} ranks the same number of "
                         f"whole experts: experts ({cfg.experts}) must divide by n ({n})")
    per = cfg.experts // n
    return range(rank * per, (rank + 1) * per)


# --------------------------------------------------------------------------- the all-to-all

def _exchange(x: torch.Tensor, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
    out = x.new_empty((sum(out_splits), *x.shape[1:]))
    dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits)
    return out


class _AllToAll(torch.autograd.Function):
    """All-to-all of rows with uneven splits; backward: the same with the splits swapped."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, out_splits: list[int],
                in_splits: list[int]) -> torch.Tensor:
        ctx.splits = (out_splits, in_splits)
        return _exchange(x, out_splits, in_splits)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        out_splits, in_splits = ctx.splits
        return _exchange(grad, in_splits, out_splits), None, None


def all_to_all(x: torch.Tensor, out_splits: Sequence[int],
               in_splits: Sequence[int]) -> torch.Tensor:
    """Rows ``x`` sent ``in_splits[j]`` to rank j, ``out_splits[i]`` received from rank i
    (rank order), differentiable."""
    return _AllToAll.apply(x, list(out_splits), list(in_splits))


# --------------------------------------------------------------------------- the layer

def _experts(params: dict[str, torch.Tensor], x: torch.Tensor,
             expert: torch.Tensor) -> torch.Tensor:
    """Row i of ``x`` through local expert ``expert[i]`` (rows grouped by expert, a matmul
    per expert, then put back in their order)."""
    order = torch.argsort(expert, stable=True)
    sizes = torch.bincount(expert, minlength=params["fc.weight"].shape[0]).tolist()
    outs = [F.gelu(rows @ params["fc.weight"][j] + params["fc.bias"][j])
            @ params["proj.weight"][j] + params["proj.bias"][j]
            for j, rows in enumerate(x[order].split(sizes))]
    return torch.cat(outs)[torch.argsort(order)]


def ep_moe(params: dict[str, torch.Tensor], x: torch.Tensor, cfg: MoEConfig,
           clock: list[float] | None = None) -> tuple[torch.Tensor, dict[str, Any]]:
    """The MoE layer on this rank's tokens ``x`` (T, h) with expert parallelism over the
    default group: ``params`` holds the whole ``router.weight`` and this rank's slice of the
    stacked experts (``local_experts``). Returns y (T, h) and the step's facts: ``aux``,
    ``dropped`` pairs, ``splits`` (pairs sent to each rank), ``received`` (from each).
    ``clock``: if given, ``time.perf_counter()`` is appended after each phase (``PHASES``)."""
    tick = clock.append if clock is not None else (lambda _: None)
    n = dist.get_world_size()
    per = len(local_experts(cfg, dist.get_rank(), n))
    r = route(x @ params["router.weight"].t(), cfg.k, cfg.capacity(x.shape[0]))
    tok, choice = r.kept.nonzero(as_tuple=True)
    expert = r.expert[tok, choice]
    order = torch.argsort(expert, stable=True)               # by expert, so by rank
    tok, choice, expert = tok[order], choice[order], expert[order]
    counts = torch.bincount(expert, minlength=cfg.experts)
    tick(time.perf_counter())
    incoming = _exchange(counts, [per] * n, [per] * n).view(n, per)
    splits, received = counts.view(n, per).sum(1).tolist(), incoming.sum(1).tolist()
    tick(time.perf_counter())
    arrived = all_to_all(x[tok], received, splits)                       # dispatch
    tick(time.perf_counter())
    mine = torch.arange(per, device=x.device).repeat(n).repeat_interleave(incoming.reshape(-1))
    done = _experts(params, arrived, mine)
    tick(time.perf_counter())
    back = all_to_all(done, splits, received)                            # combine
    tick(time.perf_counter())
    y = x.new_zeros(x.shape).index_add(0, tok, back * r.gate[tok, choice, None])
    return y, {"aux": r.aux, "dropped": r.dropped, "splits": splits, "received": received}


# --------------------------------------------------------------------------- the problem

def problem(cfg: MoEConfig, n: int, tokens_per_rank: int, seed: int = 0,
            dtype: torch.dtype = torch.float64, skew: float = 1.5) -> dict[str, Any]:
    """One seeded step's data, the same in every process: the MoE's parameters (``MoE``'s
    names, whole), the tokens ``x`` (n·tokens_per_rank, h) — rank r's slice is rows
    [r·T, (r+1)·T) — and the loss's weights ``w`` (x's shape). ``skew`` unbalances the
    router: every token leans along one direction u and expert 0's router row along u too,
    so expert 0 (rank 0) is everyone's favourite and the splits are far from even."""
    g = torch.Generator().manual_seed(seed)
    e, h, f = cfg.experts, cfg.hidden, cfg.width

    def draw(*shape: int, scale: float) -> torch.Tensor:
        return torch.randn(shape, generator=g, dtype=torch.float64) * scale

    params = {"fc.weight": draw(e, h, f, scale=h ** -0.5), "fc.bias": draw(e, f, scale=0.1),
              "proj.weight": draw(e, f, h, scale=f ** -0.5), "proj.bias": draw(e, h, scale=0.1)}
    u = draw(h, scale=1.0)
    u /= u.norm()
    params["router.weight"] = draw(e, h, scale=h ** -0.5)
    params["router.weight"][0] += skew * u
    x = draw(n * tokens_per_rank, h, scale=1.0) + skew * u
    w = draw(*x.shape, scale=1.0)
    cast = {k: v.to(dtype) for k, v in params.items()}
    return {"params": cast, "x": x.to(dtype), "w": w.to(dtype)}


# --------------------------------------------------------------------------- bytes

def ep_bytes(cfg: MoEConfig, splits: Sequence[Sequence[int]],
             dtype: torch.dtype = torch.float32) -> list[dict[str, dict[str, float]]]:
    """Bytes each rank puts on the wire in one step of ``ep_moe``, by phase and operation,
    from the routing alone: ``splits[i][j]`` pairs rank i sends rank j, a = h · element size.
    Rank r sends 8E(n−1)/n bytes of counts (E/n to each rank, its own stays), then the rows
    it sends others, Σ_{j≠r} splits[r][j]·a (dispatch), and the rows others sent it, back,
    Σ_{i≠r} splits[i][r]·a (combine); backward the same rows' gradients the other way. A
    pair routed to one of the rank's own experts never leaves it: the wiretap counts an
    uneven all-to-all so, not by the ring model's (n−1)/n of what was handed in."""
    n = len(splits)
    a = cfg.hidden * torch.empty((), dtype=dtype).element_size()
    out = []
    for r in range(n):
        away = a * sum(splits[r][j] for j in range(n) if j != r)
        back = a * sum(splits[i][r] for i in range(n) if i != r)
        out.append({"forward": {"splits": sent_bytes("all_to_all", n, 8 * cfg.experts),
                                "dispatch": away, "combine": back},
                    "backward": {"combine": away, "dispatch": back}})
    return out


# --------------------------------------------------------------------------- the workers

def _loss(y: torch.Tensor, w: torch.Tensor, aux: torch.Tensor, cfg: MoEConfig) -> torch.Tensor:
    return (y * w).sum() + cfg.aux_weight * aux


def _measured(tap: Wiretap, names: Sequence[str]) -> dict[str, float]:
    """The all-to-alls ``tap`` saw, named in the order they ran."""
    ops = [o for o in tap.ops if o.op == "all_to_all"]
    if len(ops) != len(names) or len(ops) != len(tap.ops):
        raise RuntimeError(f"expected all-to-alls {list(names)}, the wiretap saw "
                           f"{[o.op for o in tap.ops]}")
    return {name: o.sent for name, o in zip(names, ops)}


def ep_step(cfg: MoEConfig, tokens_per_rank: int, seed: int = 0,
            dtype: torch.dtype = torch.float32, skew: float = 1.5) -> dict[str, Any]:
    """Worker function: one forward and backward of ``ep_moe`` on this rank's slice of
    ``problem`` (on its device, ``runtime.device()``). Returns its ``output`` (T, h),
    ``grads`` (``router.weight``: its tokens' part; its experts' slices; ``input``: its
    tokens'), ``bytes`` by phase and all-to-all (the wiretap), ``dropped``, ``splits`` (pairs
    sent to each rank) and ``received`` (pairs received, in all)."""
    rank, n, dev = dist.get_rank(), dist.get_world_size(), device()
    mine = local_experts(cfg, rank, n)
    data = problem(cfg, n, tokens_per_rank, seed, dtype, skew)
    rows = slice(rank * tokens_per_rank, (rank + 1) * tokens_per_rank)
    params = {k: (v if k == "router.weight" else v[mine.start:mine.stop]).to(dev).clone()
              .requires_grad_() for k, v in data["params"].items()}
    x = data["x"][rows].to(dev).requires_grad_()
    with Wiretap() as forward:
        y, facts = ep_moe(params, x, cfg)
    with Wiretap() as backward:
        _loss(y, data["w"][rows].to(dev), facts["aux"], cfg).backward()
    grads = {k: p.grad.detach().cpu() for k, p in params.items()}
    return {"output": y.detach().cpu(), "grads": {**grads, "input": x.grad.detach().cpu()},
            "bytes": {"forward": _measured(forward, ("splits", "dispatch", "combine")),
                      "backward": _measured(backward, ("combine", "dispatch"))},
            "dropped": facts["dropped"], "splits": facts["splits"],
            "received": sum(facts["received"])}


def one_process(cfg: MoEConfig, n: int, tokens_per_rank: int, seed: int = 0,
                dtype: torch.dtype = torch.float32, skew: float = 1.5) -> dict[str, Any]:
    """The reference, in this process: the plain MoE (``moe_forward``) on each of the n
    slices of ``problem`` with a slice's capacity, the same loss, one backward. Returns what
    ``assemble`` makes of ``ep_step``'s runs: ``output`` and ``grads`` whole, ``dropped``
    and ``received`` per rank, ``splits`` (n × n pairs, rank i to rank j)."""
    per = len(local_experts(cfg, 0, n))
    data = problem(cfg, n, tokens_per_rank, seed, dtype, skew)
    params = {k: v.clone().requires_grad_() for k, v in data["params"].items()}
    x = data["x"].clone().requires_grad_()
    ys, loss, dropped, splits = [], 0.0, [], []
    for xs, ws in zip(x.split(tokens_per_rank), data["w"].split(tokens_per_rank)):
        y, stats = moe_forward(params, xs, cfg)
        ys.append(y)
        loss = loss + _loss(y, ws, stats.aux, cfg)
        dropped.append(stats.dropped)
        kept = stats.routing.expert[stats.routing.kept]
        splits.append(torch.bincount(kept // per, minlength=n).tolist())
    loss.backward()
    grads = {k: p.grad.detach() for k, p in params.items()}
    return {"output": torch.cat(ys).detach(), "grads": {**grads, "input": x.grad.detach()},
            "dropped": dropped, "splits": splits,
            "received": [sum(row[j] for row in splits) for j in range(n)]}


def assemble(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The ranks' ``ep_step`` results as one process's: outputs and input gradients
    concatenated, expert gradients concatenated along the experts, router gradients summed
    over ranks; ``dropped``, ``received`` and ``splits`` listed by rank."""
    grads = {"router.weight": sum(r["grads"]["router.weight"] for r in runs)}
    for name in (*EXPERT_PARAMS, "input"):
        grads[name] = torch.cat([r["grads"][name] for r in runs])
    return {"output": torch.cat([r["output"] for r in runs]), "grads": grads,
            **{key: [r[key] for r in runs] for key in ("dropped", "received", "splits")}}


def differences(got: dict[str, Any], want: dict[str, Any], rtol: float = 1e-4,
                atol: float = 1e-6) -> list[str]:
    """Where ``got`` (``assemble``d runs) and ``want`` (``one_process``) differ: counts
    exactly, the output and every gradient beyond the tolerance. Empty when they agree."""
    out = [f"{key}: {got[key]} ≠ {want[key]}" for key in ("dropped", "received", "splits")
           if got[key] != want[key]]
    pairs = [("output", got["output"], want["output"])]
    pairs += [(f"grad {k}", got["grads"].get(k), g) for k, g in want["grads"].items()]
    for name, a, b in pairs:
        if a is None or a.shape != b.shape:
            out.append(f"{name}: shape {None if a is None else tuple(a.shape)}, one process "
                       f"{tuple(b.shape)}")
        elif not torch.allclose(a, b, rtol, atol):
            out.append(f"{name}: off by {(a - b).abs().max().item():.3g}")
    return out


def ep_wait(cfg: MoEConfig, tokens_per_rank: int, skew: float, repeats: int = 5,
            seed: int = 0) -> dict[str, Any]:
    """Worker function (lesson 14, §2, "what a rank waits for"): forwards of ``ep_moe`` on
    this rank's slice of ``problem(skew=skew)``, each phase timed (``PHASES``, the median of
    ``repeats`` after one warm-up, a barrier before each). With an unbalanced router the
    rank that holds the favourite expert computes longest and every other rank waits for it
    inside the combine's all-to-all. Returns ``seconds`` by phase and ``received`` pairs."""
    rank, n = dist.get_rank(), dist.get_world_size()
    mine = local_experts(cfg, rank, n)
    data = problem(cfg, n, tokens_per_rank, seed, torch.float32, skew)
    params = {k: (v if k == "router.weight" else v[mine.start:mine.stop])
              for k, v in data["params"].items()}
    x = data["x"][rank * tokens_per_rank:(rank + 1) * tokens_per_rank]
    laps, facts = [], {}
    with torch.no_grad():
        for _ in range(repeats + 1):
            dist.barrier()
            clock = [time.perf_counter()]
            _, facts = ep_moe(params, x, cfg, clock)
            laps.append([b - a for a, b in zip(clock, clock[1:])])
    middle = sorted(laps[1:], key=sum)[repeats // 2]
    return {"seconds": dict(zip(PHASES, middle)), "received": sum(facts["received"])}
