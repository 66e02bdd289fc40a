"""Composition on a DeviceMesh (lesson 14, experts, section 3): the same small GPT trained under
1-D (DP, FSDP, TP, PP), 2-D (DP × TP, FSDP2 × TP, HSDP) and 3-D (DP × TP × PP) layouts of
real worker ranks (gloo), each step's loss beside one process's, bytes per step per mesh
dimension, model-state and activation memory per rank, and step time.

What is built, per layout (``layout_run``; ``LAYOUTS`` lists those that run here):

- the mesh: ``init_device_mesh("cpu", shape, mesh_dim_names=...)``, pipeline outermost,
  then data, tensor innermost (Megatron-LM's order; Narayanan et al. 2021); HSDP's data
  dimension is itself ("replicate", "shard") (PyTorch docs: DeviceMesh, FSDP2).
- **tensor parallelism**: torch's ``parallelize_module`` on the "tp" dimension with lesson
  12's plan (``ColwiseParallel`` into a block's attention and MLP, ``RowwiseParallel`` out),
  but with one fused ``qkv`` whose rows are interleaved by rank (rank r's chunk holds its
  heads' Q, K and V; Megatron-LM's layout): lesson 12's three separate Q, K, V layers make
  torch gather their input's gradient three times (each ``ColwiseParallel`` turns its own
  Replicate input back in backward), 6 all-reduces a layer instead of Megatron's 4. The
  embedding, the tied head and the norms stay whole on every tp rank (no vocabulary
  parallelism: a plan shards modules, and the tied head is no module of its own).
- **pipeline parallelism**: ``torch.distributed.pipelining`` (``PipelineStage`` with
  static shapes, ``ScheduleGPipe`` over ``m`` micro-batches, ``scale_grads``) on the "pp"
  dimension: the blocks split into p stages, embedding on the first, ln_f and the head on
  the last. The head is tied to the embedding, so the last stage keeps a copy of it and the
  two copies' gradients are summed over the (first, last) pair — Megatron-LM's embedding
  group, charged to "pp". It composes with DTensor TP inside a stage: the activations
  between stages are plain (replicated) tensors.
- **data parallelism**: by hand (one flat all-reduce of the rank's local gradients over
  "dp", averaged), or FSDP2 (``fully_shard`` per block, then the root, on the "dp" mesh;
  HSDP: on the 2-D ("replicate", "shard") mesh).
- Adam (fp32, ``foreach=False``) — the planner's 4 + 4 + 8 bytes a parameter.

Measured: the loss per step (the global mean), bytes per step per mesh dimension (the
wiretap with ``every_group``, plus a dispatch mode for DTensor's functional collectives,
which reach the C++ process group without passing its Python methods; each op charged to
the smallest mesh dimension whose group holds its ranks; the last step's: the first carries
the pipeline's one-time shape vote), model states actually held (local shards of DTensors:
parameters, gradients, Adam's moments), activations (``ActivationMeter``, saved-tensor
hooks) and the step time. ``validate`` sets the planner's predictions beside them.

What the runs showed (tests/experts/test_compose.py): every layout's loss after 3 steps is
one process's within 2e-6 relative (float32; seen: ≤ 5e-7 absolute on losses ≈ 3.46);
bytes per dimension and model states equal the planner's exactly, after three fixes to it
(``planner``'s docstring: tp keeps norms, row biases and an unparallelised vocabulary whole;
the busiest pipeline stage's bytes and its tied embedding's all-reduce, without Megatron's
scatter-gather; FSDP2's root gathered once). The wiretap alone reads 0 for TP: DTensor's
functional collectives call the C++ group directly (hence the dispatch mode). Step time is
not predicted: on a 2-core laptop running 4–8 ranks, with the FLOP/s one process reaches on
this model, measured steps take 6–36× the planner's (per-op overheads of DTensor, FSDP2's
hooks and the pipeline's schedule, and the oversubscribed cores, are not in its model).
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ddl_lab.ml.activations import ActivationMeter
from ddl_lab.ml.gpt import GPT, GPTConfig, attention, build_gpt, lm_loss
from ddl_lab.runtime.costs import sent_bytes
from ddl_lab.runtime.wiretap import FunctionalTap, Wiretap

__all__ = ["LAYOUTS", "layout_run", "one_process", "table", "validate", "predicted",
           "global_batch", "effective_flop_s", "ranks_of"]

LAYOUTS: list[dict[str, Any]] = [
    {"name": "DP4", "dp": 4}, {"name": "FSDP4", "dp": 4, "fsdp": True},
    {"name": "TP4", "tp": 4}, {"name": "PP4", "pp": 4, "m": 4},
    {"name": "DP2×TP2", "dp": 2, "tp": 2},
    {"name": "FSDP2×TP2", "dp": 2, "tp": 2, "fsdp": True},
    {"name": "HSDP2×2", "dp": 4, "hsdp": True},
    {"name": "DP2×TP2×PP2", "dp": 2, "tp": 2, "pp": 2, "m": 2},
]


def ranks_of(layout: dict[str, Any]) -> int:
    """World size of a layout."""
    return layout.get("dp", 1) * layout.get("tp", 1) * layout.get("pp", 1)


def global_batch(cfg: GPTConfig, batch: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded batch of token ids (batch, seq) and their next tokens (lesson 12's)."""
    ids = torch.randint(cfg.vocab, (batch, cfg.seq + 1),
                        generator=torch.Generator().manual_seed(seed))
    return ids[:, :-1], ids[:, 1:]


# ------------------------------------------------------------------------- the model


def _interleave(hidden: int, t: int) -> torch.Tensor:
    """qkv's rows ordered so that chunk r of t holds rank r's heads of Q, then K, then V."""
    w = hidden // t
    return torch.cat([torch.arange(part * hidden + r * w, part * hidden + (r + 1) * w)
                      for r in range(t) for part in range(3)])


class _Attention(nn.Module):
    """A block's attention with its fused ``qkv`` interleaved for t ranks (the heads a rank
    holds are read from its output's width)."""

    def __init__(self, attn: nn.Module, t: int):
        super().__init__()
        self.cfg, self.proj = attn.cfg, attn.proj
        rows = _interleave(attn.cfg.hidden, t)
        self.qkv = attn.qkv
        with torch.no_grad():
            self.qkv.weight.copy_(attn.qkv.weight[rows].clone())
            self.qkv.bias.copy_(attn.qkv.bias[rows].clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape[0], x.shape[1], self.cfg.head_dim
        y = self.qkv(x)
        q, k, v = y.view(b, s, 3, -1, d).permute(2, 0, 3, 1, 4)   # 3 × (b, heads, s, d)
        return self.proj(attention(q, k, v, causal=True).transpose(1, 2).reshape(b, s, -1))


class _Stage(nn.Module):
    """Stage ``i`` of ``p`` of the GPT: its blocks, the embeddings on the first, ln_f and the
    (tied) head on the last; parameter names as the GPT's."""

    def __init__(self, model: GPT, i: int, p: int, t: int):
        super().__init__()
        L = model.cfg.layers
        self.first, self.last = i == 0, i == p - 1
        if self.first:
            self.tok, self.pos = model.tok, model.pos
        self.blocks = nn.ModuleList(model.blocks[i * L // p:(i + 1) * L // p])
        for block in self.blocks:
            block.attn = _Attention(block.attn, t)
        if self.last:
            self.ln_f = model.ln_f
            if not self.first:                  # a copy of the tied embedding
                self.head = nn.Parameter(model.tok.weight.detach().clone())

    def head_weight(self) -> torch.Tensor:
        return self.tok.weight if self.first else self.head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.first:
            x = self.tok(x) + self.pos.weight[: x.shape[-1]]
        for block in self.blocks:
            x = block(x)
        return F.linear(self.ln_f(x), self.head_weight()) if self.last else x


def _tp_plan(blocks: int) -> dict[str, Any]:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel
    plan: dict[str, Any] = {}
    for i in range(blocks):
        plan.update({f"blocks.{i}.attn.qkv": ColwiseParallel(),
                     f"blocks.{i}.attn.proj": RowwiseParallel(),
                     f"blocks.{i}.mlp.fc": ColwiseParallel(),
                     f"blocks.{i}.mlp.proj": RowwiseParallel()})
    return plan


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


# -------------------------------------------------------------------- the bytes


def _charge(ops: list[tuple[str, float, tuple[int, ...]]],
            dims: dict[str, frozenset[int]]) -> dict[str, float]:
    """Bytes on the wire by mesh dimension: each op to the smallest dimension holding its
    ranks ('other' if none)."""
    out = {dim: 0.0 for dim in dims}
    for _, sent, ranks in ops:
        fits = [d for d, members in dims.items() if set(ranks) <= members]
        dim = min(fits, key=lambda d: len(dims[d])) if fits else "other"
        out[dim] = out.get(dim, 0.0) + sent
    return out


# -------------------------------------------------------------------- the workers


def _mesh(layout: dict[str, Any]):
    from torch.distributed.device_mesh import init_device_mesh
    d, t, p = (layout.get(k, 1) for k in ("dp", "tp", "pp"))
    dims = [("pp", p)] + ([("replicate", d // 2), ("shard", 2)] if layout.get("hsdp")
                          else [("dp", d)]) + [("tp", t)]
    dims = [(n, s) for n, s in dims if s > 1] or [("dp", 1)]
    return init_device_mesh("cpu", tuple(s for _, s in dims),
                            mesh_dim_names=tuple(n for n, _ in dims))


def _coordinate(mesh, name: str) -> int:
    return mesh.get_local_rank(name) if name in (mesh.mesh_dim_names or ()) else 0


def _tie_group(mesh) -> dist.ProcessGroup | None:
    """The (first, last) stage pair of this rank's pipeline (Megatron's embedding group)."""
    names = list(mesh.mesh_dim_names)
    if "pp" not in names or mesh.size(names.index("pp")) < 2:
        return None
    if mesh.size(names.index("pp")) == 2:
        return mesh.get_group("pp")
    rows = mesh.mesh.movedim(names.index("pp"), -1).reshape(-1, mesh.size(names.index("pp")))
    mine = None
    for row in rows.tolist():
        g = dist.new_group([row[0], row[-1]])
        if dist.get_rank() in row:
            mine = g
    return mine


def _states(model: nn.Module, opt: torch.optim.Optimizer) -> dict[str, int]:
    """Bytes of model states this rank holds (local shards of DTensors)."""
    def nbytes(ts):
        return sum(_local(t).numel() * _local(t).element_size() for t in ts)
    params = list(model.parameters())
    moments = [v for st in opt.state.values() for v in st.values()
               if isinstance(v, torch.Tensor) and v.dim() > 0]
    return {"weights": nbytes(params), "gradients": nbytes(p.grad for p in params
                                                           if p.grad is not None),
            "optimizer": nbytes(moments)}


@torch.no_grad()
def _sync(stage: nn.Module, tie: dist.ProcessGroup | None, dp_group: dist.ProcessGroup | None,
          d: int) -> None:
    """The hand collectives of a step: the tied embedding's two copies' gradients summed
    over the (first, last) stage pair; then every local gradient averaged over "dp" in one
    flat all-reduce (FSDP2 does its own)."""
    if tie is not None and (stage.first or stage.last):
        w = stage.tok.weight if stage.first else stage.head
        dist.all_reduce(_local(w.grad), group=tie)
    if dp_group is None:
        return
    grads = [_local(p.grad) for p in stage.parameters() if p.grad is not None]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=dp_group)
    flat /= d
    for g, piece in zip(grads, flat.split([g.numel() for g in grads])):
        g.copy_(piece.view_as(g))


def layout_run(layout: dict[str, Any], cfg: GPTConfig, steps: int = 3, batch: int = 8,
               seed: int = 0, lr: float = 1e-3) -> dict[str, Any]:
    """Worker function: ``steps`` Adam steps of the seeded GPT under ``layout`` (see the module
    docstring). Returns the loss per step (global mean), bytes per dimension (last step, and
    each step's), model states and activation bytes of this rank, and step times."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module
    d, t, p, m = (layout.get(k, 1) for k in ("dp", "tp", "pp", "m"))
    if ranks_of(layout) != dist.get_world_size():
        raise ValueError(f"{layout} needs {ranks_of(layout)} ranks, not {dist.get_world_size()}")
    if cfg.layers % p:
        raise ValueError(f"{p} pipeline stages need a number of layers they divide, not "
                         f"{cfg.layers}: every stage holds the same number of blocks")
    mesh = _mesh(layout)
    names = list(mesh.mesh_dim_names)
    dims = {n: frozenset(dist.get_process_group_ranks(mesh.get_group(n))) for n in names}
    i = _coordinate(mesh, "pp")
    stage = _Stage(build_gpt(cfg, seed), i, p, t)
    if t > 1:
        stage = parallelize_module(stage, mesh["tp"], _tp_plan(len(stage.blocks)))
    dp_names = ("replicate", "shard") if layout.get("hsdp") else ("dp",)
    fsdp = layout.get("fsdp") or layout.get("hsdp")
    if fsdp:
        dp_mesh = mesh[dp_names] if len(dp_names) > 1 else mesh["dp"]
        for block in stage.blocks:
            fully_shard(block, mesh=dp_mesh)
        fully_shard(stage, mesh=dp_mesh)
    dp_rank = _coordinate(mesh, "dp") if not layout.get("hsdp") else \
        _coordinate(mesh, "replicate") * 2 + _coordinate(mesh, "shard")
    tie = _tie_group(mesh)
    dp_group = mesh.get_group("dp") if d > 1 and not fsdp else None
    opt = torch.optim.Adam(stage.parameters(), lr=lr, foreach=False)
    sched = None
    if p > 1:
        from torch.distributed import pipelining
        mb, s, h = batch // (d * m), cfg.seq, cfg.hidden
        x_in = torch.zeros(mb, s, dtype=torch.long) if i == 0 else \
            torch.zeros(mb, s, h, requires_grad=True)       # static shapes: no inference
        y_out = torch.zeros(mb, s, cfg.vocab if i == p - 1 else h, requires_grad=True)
        pstage = pipelining.PipelineStage(stage, i, p, torch.device("cpu"), input_args=x_in,
                                          output_args=y_out, group=mesh.get_group("pp"))
        sched = pipelining.ScheduleGPipe(pstage, m, loss_fn=lm_loss, scale_grads=True)
    meter = ActivationMeter()
    meter.resident(*stage.parameters())
    losses, times, per_step = [], [], []
    with Wiretap(every_group=True) as tap:
        for step in range(steps):
            idx, tgt = global_batch(cfg, batch, seed + 1 + step)
            rows = slice(dp_rank * batch // d, (dp_rank + 1) * batch // d)
            idx, tgt = idx[rows], tgt[rows]
            meter.resident(idx, tgt)
            opt.zero_grad(set_to_none=True)
            start, functional = len(tap.ops), FunctionalTap()
            t0 = time.perf_counter()
            with functional if t > 1 else nullcontext(), meter.recording():
                if sched is None:
                    loss = lm_loss(stage(idx), tgt)
                    loss.backward()
                    losses.append(loss.item())
                else:
                    out: list[torch.Tensor] = []
                    if i == 0:
                        sched.step(idx)
                    elif i == p - 1:
                        sched.step(target=tgt, losses=out)
                    else:
                        sched.step()
                    losses.append(float(torch.stack(out).detach().mean()) if out else 0.0)
            _sync(stage, tie, dp_group, d)
            opt.step()
            times.append(time.perf_counter() - t0)
            ops = [(o.op, o.sent, o.ranks) for o in tap.ops[start:]]
            ops += [(op, sent_bytes(op, len(r), n), r) for op, n, r in functional.ops]
            per_step.append(_charge(ops, dims))
    states = _states(stage, opt)
    last_stage = i == p - 1
    share = torch.tensor([(x if last_stage else 0.0) / (d * t) for x in losses],
                         dtype=torch.float64)
    dist.all_reduce(share)
    return {"layout": layout.get("name", str(layout)), "rank": dist.get_rank(),
            "losses": share.tolist(), "bytes": per_step[-1], "bytes_steps": per_step,
            "states": states, "activations": meter.peak, "times": times}


def one_process(cfg: GPTConfig, steps: int = 3, batch: int = 8, seed: int = 0,
                lr: float = 1e-3) -> dict[str, Any]:
    """The reference: the same training of the plain GPT in this process."""
    model = build_gpt(cfg, seed)
    opt = torch.optim.Adam(model.parameters(), lr=lr, foreach=False)
    losses, times = [], []
    for step in range(steps):
        idx, tgt = global_batch(cfg, batch, seed + 1 + step)
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        loss = lm_loss(model(idx), tgt)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    return {"losses": losses, "times": times, "states": _states(model, opt)}


# -------------------------------------------------------------------- the table


def table(cfg: GPTConfig, layouts: list[dict[str, Any]] | None = None, steps: int = 3,
          batch: int = 8, seed: int = 0, lr: float = 1e-3) -> list[dict[str, Any]]:
    """Every layout run on ``shared_cluster(n)``: its loss after ``steps`` minus one
    process's, bytes per step per dimension (the busiest rank's), model states and
    activations of the busiest rank, step time (the slowest rank's median)."""
    from ddl_lab.runtime import shared_cluster
    ref = one_process(cfg, steps, batch, seed, lr)
    rows = []
    for layout in layouts or LAYOUTS:
        # the first run on fresh workers imports DTensor, FSDP2 and pipelining (and torch's
        # compiler with them): tens of seconds on a busy machine
        runs = shared_cluster(ranks_of(layout)).run_with(
            layout_run, (layout, cfg, steps, batch, seed, lr), timeout=300)
        dims = sorted({k for r in runs for k in r["bytes"]})
        rows.append({
            "layout": layout, "name": layout.get("name", str(layout)),
            "loss_diff": runs[0]["losses"][-1] - ref["losses"][-1],
            "losses": [r["losses"] for r in runs], "reference": ref["losses"],
            "bytes": {k: max(r["bytes"].get(k, 0.0) for r in runs) for k in dims},
            "states": max((r["states"] for r in runs), key=lambda s: sum(s.values())),
            "activations": max(r["activations"] for r in runs),
            "seconds": max(sorted(r["times"])[len(r["times"]) // 2] for r in runs),
            "batch": batch, "cfg": cfg, "runs": runs,
            "one_process_seconds": sorted(ref["times"])[len(ref["times"]) // 2]})
    return rows


# -------------------------------------------------------------------- the planner


def _model(cfg: GPTConfig):
    from ddl_lab.experts import planner as P
    return P.Model(layers=cfg.layers, hidden=cfg.hidden, heads=cfg.heads, seq=cfg.seq,
                   vocab=cfg.vocab, tied=True, e=4, biases=True, positions=True)


def predicted(layout: dict[str, Any], cfg: GPTConfig, batch: int, cluster) -> dict[str, Any]:
    """The planner's bytes per mesh dimension, model states and seconds for ``layout``
    (torch's way: no vocabulary parallelism, whole activations between stages; HSDP as
    ZeRO-3 over "shard" plus an all-reduce of the shards' gradients over "replicate")."""
    from ddl_lab.experts import planner as P
    d, t, p, m = (layout.get(k, 1) for k in ("dp", "tp", "pp", "m"))
    zero = 3 if (layout.get("fsdp") or layout.get("hsdp")) else 0
    model = _model(cfg)
    if layout.get("hsdp"):
        lay = P.Layout(dp=2, zero=3, micro=batch // d, sp=False, vocab_parallel=False,
                       scatter_gather=False)
        q = P.predict(model, batch // (d // 2), cluster, lay)
        shard = P.rank_params(model, lay) / 2
        rep = sent_bytes("all_reduce", d // 2, model.e * shard)
        bytes_ = {"shard": q.bytes["dp"], "replicate": rep}
        return {"bytes": bytes_, "states": {k: q.memory[k] for k in
                                            ("weights", "gradients", "optimizer")},
                "activations": q.memory["activations"], "seconds": q.seconds}
    lay = P.Layout(dp=d, tp=t, pp=p, zero=zero, micro=batch // (d * m), sp=False,
                   vocab_parallel=False, scatter_gather=False)
    q = P.predict(model, batch, cluster, lay)
    names = {"dp": d, "tp": t, "pp": p}
    return {"bytes": {k: q.bytes[k] for k, n in names.items() if n > 1},
            "states": {k: q.memory[k] for k in ("weights", "gradients", "optimizer")},
            "activations": q.memory["activations"], "seconds": q.seconds}


def effective_flop_s(cfg: GPTConfig, batch: int, seconds: float) -> float:
    """The FLOP/s one process reaches on this model: the planner's FLOPs of a step over
    its measured ``seconds`` (on tiny sizes, per-op overheads, not the FLOPs, set it)."""
    from ddl_lab.experts import planner as P
    q = P.predict(_model(cfg), batch, P.Cluster(1, 1e12, 1.0), P.Layout(micro=batch))
    return q.seconds["compute"] / seconds


def validate(rows: list[dict[str, Any]], flop_s: float, alpha: float, beta: float,
             cores: int | None = None) -> list[dict[str, Any]]:
    """For each row of ``table``: measured / predicted bytes per dimension, model states
    and step time, on a one-node cluster of the row's ranks with the measured machine
    numbers (``flop_s`` of one process, a message's α and β); ``cores``: the machine's
    cores, shared by the row's ranks (each gets flop_s · min(1, cores / ranks))."""
    from ddl_lab.experts import planner as P
    out = []
    for row in rows:
        n = ranks_of(row["layout"])
        share = min(1.0, cores / n) if cores else 1.0
        c = P.on_one_node(P.Cluster(n, 1e12, flop_s * share, per_node=n, alpha_node=alpha,
                                    beta_node=beta))
        q = predicted(row["layout"], row["cfg"], row["batch"], c)
        ratio = {k: (row["bytes"].get(k, 0.0) / v if v else float("nan"))
                 for k, v in q["bytes"].items()}
        other = {k: v for k, v in row["bytes"].items() if k not in q["bytes"] and v}
        states_m, states_p = sum(row["states"].values()), sum(q["states"].values())
        out.append({"name": row["name"], "loss_diff": row["loss_diff"],
                    "bytes": row["bytes"], "bytes_predicted": q["bytes"],
                    "bytes_ratio": ratio, "unpredicted": other,
                    "states": states_m, "states_predicted": states_p,
                    "states_ratio": states_m / states_p,
                    "activations": row["activations"],
                    "activations_predicted": q["activations"],
                    "seconds": row["seconds"], "seconds_predicted": q["seconds"]["total"],
                    "time_ratio": row["seconds"] / q["seconds"]["total"]})
    return out

