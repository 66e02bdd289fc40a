"""Tensor parallelism of the transformer (lesson 12, transformers; Megatron-LM, Shoeybi et al.
2019), and its sequence-parallel form (Korthikanti et al. 2022; ``sequence.py``).

Built from a plain ``ml.gpt.GPT``'s weights, parameter names kept, on rank r of n:

- **attention**: the heads split over ranks (heads must divide by n). ``qkv`` is
  column-parallel: the rank keeps its heads' rows of each of Q, K and V (rows
  [q heads…, k heads…, v heads…], so three blocks of rows, not one); the attention runs on
  its heads alone; ``proj`` is row-parallel: its partial sums are added over ranks, the bias
  once.
- **MLP**: ``fc`` column-parallel, GELU on the rank's slice, ``proj`` row-parallel.
- **the boundaries**: Megatron's f (identity forward, allreduce backward) before each
  column-parallel layer and g (allreduce forward, identity backward) after each row-parallel
  one — lesson 09's ``_CopyToRanks``/``_SumOverRanks``, reused as they are (same default
  group, same contract). Under sequence parallelism f and g become an all-gather and a
  reduce-scatter along the sequence (``sequence.py``; ``regather``: the paper's form, which
  keeps only the shard of a column-parallel layer's input and gathers it again in backward).
- **vocabulary**: the token embedding and the tied head by vocabulary slices, and the
  cross-entropy without the full logits (``vocab.py``).

Per step, with bsh the bytes of one (b, s, h) activation, every block sends two allreduces
of bsh forward (attention, MLP) and two backward (the f's), the embedding one forward, the
head one backward, the cross-entropy three of b·s numbers forward: ``tp_bytes``. The
workers' ``tp_step`` measures loss, gradients, bytes (the wiretap) and activation memory
(saved-tensor hooks); ``one_process`` is the reference; ``library_step`` does the same with
torch's ``parallelize_module`` (``ColwiseParallel``, ``RowwiseParallel``,
``SequenceParallel``) on a device mesh.
"""
from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from ddl_lab.ml.activations import ActivationMeter
from ddl_lab.ml.gpt import GPT, Attention, Block, GPTConfig, attention, build_gpt, drop
from ddl_lab.model_parallel.tensor_parallel import _CopyToRanks, _SumOverRanks, device_mesh, shard
from ddl_lab.runtime.backends import device
from ddl_lab.runtime.costs import sent_bytes
from ddl_lab.runtime.wiretap import Wiretap
from ddl_lab.transformers.sequence import (gather_sequence, gathered_linear, scatter_sequence,
                                           sequence_slice, sum_grads_over_ranks)
from ddl_lab.transformers.vocab import (VocabParallelEmbedding, loss_dtype,
                                        _vocab_parallel_cross_entropy)

__all__ = ["TPAttention", "TPMLP", "TPBlock", "TPGPT", "tp_block", "tp_gpt", "split_of",
           "unshard", "differences", "tp_bytes", "batch", "one_process", "tp_step", "library_step",
           "SplitAttention", "library_plan"]


def _check_heads(cfg: GPTConfig, n: int) -> None:
    if cfg.heads % n:
        raise ValueError(f"tensor parallelism gives each of the {n} ranks whole attention "
                         f"heads: heads ({cfg.heads}) must divide by n ({n})")


class _Weights(nn.Module):
    """A linear layer's weight and bias as one rank keeps them (no init drawn)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor):
        super().__init__()
        self.weight = nn.Parameter(weight.detach().clone())
        self.bias = nn.Parameter(bias.detach().clone())


def _qkv_rows(hidden: int, rank: int, n: int) -> torch.Tensor:
    """Rank ``rank``'s rows of ``qkv``: its heads' block in each of Q, K and V."""
    w = hidden // n
    return torch.cat([torch.arange(part * hidden + rank * w, part * hidden + (rank + 1) * w)
                      for part in range(3)])


class TPAttention(nn.Module):
    """This rank's heads: ``qkv`` column-parallel (its rows of Q, K, V), ``proj``
    row-parallel. ``forward`` takes the rank's ``qkv`` output (the block applies the
    column-parallel layer, with its f) and returns its *partial* output, before the sum
    over ranks and the bias."""

    def __init__(self, attn: Attention, rank: int, n: int):
        super().__init__()
        cfg = attn.cfg
        _check_heads(cfg, n)
        rows = _qkv_rows(cfg.hidden, rank, n)
        self.cfg, self.heads, self.core = cfg, cfg.heads // n, attn.core
        self.qkv = _Weights(attn.qkv.weight.detach()[rows], attn.qkv.bias.detach()[rows])
        self.proj = _Weights(shard(attn.proj.weight.detach(), 1, rank, n), attn.proj.bias)

    def forward(self, qkv: torch.Tensor) -> torch.Tensor:
        b, s, _ = qkv.shape
        q, k, v = qkv.view(b, s, 3, self.heads, self.cfg.head_dim).permute(2, 0, 3, 1, 4)
        p = self.cfg.dropout if self.training else 0.0
        y = self.core(q, k, v, causal=True, dropout=p).transpose(1, 2).reshape(b, s, -1)
        return F.linear(y, self.proj.weight)


class TPMLP(nn.Module):
    """``fc`` column-parallel, GELU, ``proj`` row-parallel: ``forward`` takes ``fc``'s
    output (applied by the block) and returns the partial output."""

    def __init__(self, mlp: nn.Module, rank: int, n: int):
        super().__init__()
        self.fc = _Weights(shard(mlp.fc.weight.detach(), 0, rank, n),
                           shard(mlp.fc.bias.detach(), 0, rank, n))
        self.proj = _Weights(shard(mlp.proj.weight.detach(), 1, rank, n), mlp.proj.bias)

    def forward(self, fc: torch.Tensor) -> torch.Tensor:
        return F.linear(F.gelu(fc), self.proj.weight)


def _norm(ln: nn.LayerNorm, x: torch.Tensor, weight: torch.Tensor,
          bias: torch.Tensor) -> torch.Tensor:
    """``ln(x)`` with ``weight`` and ``bias`` as used (``ln``'s own, or their
    ``sequence.sum_grads_over_ranks`` copies)."""
    return F.layer_norm(x, ln.normalized_shape, weight, bias, ln.eps)


class TPBlock(nn.Module):
    """A pre-LayerNorm block over the ranks: x + g(attn(f(ln1(x)))) + b, then the MLP alike.
    ``sequence``: x is this rank's sequence shard, f an all-gather, g a reduce-scatter;
    ``regather``: the column-parallel layers keep only the shard of their input and gather
    it again in backward (``sequence.gathered_linear``). ``shared()`` are the replicated
    parameters its sequence-parallel regions apply to this rank's tokens; their gradients
    are summed over ranks in one allreduce (``sequence.sum_grads_over_ranks``: the
    block's own, or ``TPGPT``'s for the whole model)."""

    def __init__(self, block: Block, rank: int, n: int, sequence: bool = False,
                 regather: bool = False):
        super().__init__()
        if regather and not sequence:
            raise ValueError("regather keeps sequence shards: it needs sequence=True")
        self.sequence, self.regather, self.p = sequence, regather, block.attn.cfg.dropout
        self.ln1, self.ln2 = copy.deepcopy(block.ln1), copy.deepcopy(block.ln2)
        self.attn, self.mlp = TPAttention(block.attn, rank, n), TPMLP(block.mlp, rank, n)

    def _column(self, x: torch.Tensor, layer: nn.Module) -> torch.Tensor:
        """f, then this rank's column-parallel ``layer``."""
        if self.regather:
            return gathered_linear(x, layer.weight, layer.bias)
        x = gather_sequence(x) if self.sequence else _CopyToRanks.apply(x)
        return F.linear(x, layer.weight, layer.bias)

    def _leave(self, y: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        y = scatter_sequence(y) if self.sequence else _SumOverRanks.apply(y)
        return drop(y + bias, self.p, self.training)

    def shared(self) -> list[nn.Parameter]:
        """The LayerNorms' weights and biases and the row-parallel layers' biases."""
        return [self.ln1.weight, self.ln1.bias, self.attn.proj.bias,
                self.ln2.weight, self.ln2.bias, self.mlp.proj.bias]

    def forward(self, x: torch.Tensor, shared: Sequence[torch.Tensor] | None = None
                ) -> torch.Tensor:
        """``shared``: ``self.shared()`` as used (by default, themselves, or under sequence
        parallelism their ``sum_grads_over_ranks`` copies)."""
        if shared is None:
            shared = sum_grads_over_ranks(*self.shared()) if self.sequence else self.shared()
        w1, b1, attn_bias, w2, b2, mlp_bias = shared
        qkv = self._column(_norm(self.ln1, x, w1, b1), self.attn.qkv)
        x = x + self._leave(self.attn(qkv), attn_bias)
        fc = self._column(_norm(self.ln2, x, w2, b2), self.mlp.fc)
        return x + self._leave(self.mlp(fc), mlp_bias)


def tp_block(block: Block, rank: int, n: int, sequence: bool = False,
             regather: bool = False) -> TPBlock:
    """Rank ``rank``'s part of ``block`` (its weights copied, names kept); ``sequence``: the
    sequence-parallel form (``regather``: Korthikanti's, saving the shards only)."""
    return TPBlock(block, rank, n, sequence, regather)


class TPGPT(nn.Module):
    """The whole GPT over the ranks: vocabulary-parallel embedding and tied head, the blocks
    tensor-parallel (``sequence``: sequence-parallel; ``regather``: see ``TPBlock``).
    ``forward(idx)`` returns this rank's
    vocabulary slice of the logits; ``loss(idx, targets)`` the mean cross-entropy."""

    def __init__(self, model: GPT, rank: int, n: int, sequence: bool = False,
                 regather: bool = False):
        super().__init__()
        cfg = model.cfg
        _check_heads(cfg, n)
        self.cfg, self.rank, self.n, self.sequence = cfg, rank, n, sequence
        self.tok = VocabParallelEmbedding(model.tok, rank, n)
        self.pos = copy.deepcopy(model.pos)
        self.blocks = nn.ModuleList(TPBlock(b, rank, n, sequence, regather)
                                    for b in model.blocks)
        self.ln_f = copy.deepcopy(model.ln_f)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        s = idx.shape[-1]
        pos, ln_w, ln_b, *shared = (self.pos.weight, self.ln_f.weight, self.ln_f.bias,
                                    *(p for block in self.blocks for p in block.shared()))
        if self.sequence:                         # one allreduce of their gradients, and
            pos, ln_w, ln_b, *shared = sum_grads_over_ranks(pos, ln_w, ln_b, *shared)
            x = scatter_sequence(self.tok.partial(idx))     # the embeddings' sum, my shard
            x = x + pos[sequence_slice(s, self.rank, self.n)]
        else:
            x = _SumOverRanks.apply(self.tok.partial(idx)) + pos[:s]
        x = drop(x, self.cfg.dropout, self.training)
        for i, block in enumerate(self.blocks):
            x = block(x, shared[6 * i: 6 * i + 6])
        x = _norm(self.ln_f, x, ln_w, ln_b)
        x = gather_sequence(x) if self.sequence else _CopyToRanks.apply(x)
        return F.linear(x, self.tok.weight)

    def loss(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return _vocab_parallel_cross_entropy(self(idx), targets, self.tok.start)


def tp_gpt(model: GPT, rank: int, n: int, sequence: bool = False,
           regather: bool = False) -> TPGPT:
    """Rank ``rank``'s part of ``model`` over ``n`` ranks (see ``TPGPT``)."""
    return TPGPT(model, rank, n, sequence, regather)


# ------------------------------------------------------- sharded parameters, whole again

def split_of(name: str) -> str | int | None:
    """How a ``TPGPT`` parameter is split: 'qkv' (a block of rows in each third), the
    dimension of its slices (0: rows, 1: columns), or None (replicated)."""
    if ".attn.qkv." in name:
        return "qkv"
    if name.endswith("proj.weight"):
        return 1
    if ".mlp.fc." in name or name == "tok.weight":
        return 0
    return None


def unshard(name: str, shards: list[torch.Tensor]) -> torch.Tensor:
    """The whole parameter (or gradient) ``name`` from every rank's piece, in rank order,
    laid out as the plain model's (a replicated one: rank 0's)."""
    split = split_of(name)
    if split == "qkv":
        thirds = [t.chunk(3, dim=0) for t in shards]
        return torch.cat([torch.cat([t[i] for t in thirds]) for i in range(3)])
    return shards[0] if split is None else torch.cat(shards, dim=split)


def differences(runs: list[dict[str, Any]], reference: dict[str, Any], rtol: float = 1e-4,
                atol: float = 1e-6, sharded: bool = True) -> list[str]:
    """Where the ranks' ``runs`` (``tp_step``'s) differ from ``reference`` (``one_process``)
    beyond the tolerance: the loss on any rank, each gradient made whole (a replicated one
    on every rank; ``sharded=False``: every rank's gradients are whole already), a parameter
    missing on either side. Empty when they agree."""
    out = [f"rank {r}: loss {run['loss']!r}, one process {reference['loss']!r}"
           for r, run in enumerate(runs)
           if abs(run["loss"] - reference["loss"]) > atol + rtol * abs(reference["loss"])]
    names = set(reference["grads"])
    out += [f"{name}: on one side only" for name in sorted(names ^ set(runs[0]["grads"]))]
    for name in sorted(names & set(runs[0]["grads"])):
        want, pieces = reference["grads"][name], [run["grads"][name] for run in runs]
        got = {"whole": unshard(name, pieces)} if sharded and split_of(name) is not None else \
            {f"rank {r}": p for r, p in enumerate(pieces)}
        for where, g in got.items():
            if g.shape != want.shape:
                out.append(f"{name} ({where}): shape {tuple(g.shape)}, one process "
                           f"{tuple(want.shape)}")
            elif not torch.allclose(g, want, rtol, atol):
                out.append(f"{name} ({where}): off by {(g - want).abs().max().item():.3g}")
    return out


# --------------------------------------------------------------------- bytes per step

def tp_bytes(cfg: GPTConfig, b: int, n: int, dtype: torch.dtype = torch.float32,
             sequence: bool = False, regather: bool = False,
             s: int | None = None) -> dict[str, dict[str, float]]:
    """Bytes one rank puts on the wire in one step of ``TPGPT`` (ring model,
    ``runtime.costs.sent_bytes``), by phase ('forward', 'backward') and operation.

    A (b, s, h) activation is A bytes; 2L + 1 regions cross the ranks (attention and MLP
    of each block, and the embedding forward / the head backward): plain TP sends forward
    (2L + 1) allreduces of A plus the cross-entropy's three of b·s numbers, backward
    (2L + 1) allreduces of A. Sequence parallelism turns every allreduce of A into a
    reduce-scatter of A and an all-gather of A/n, one in each phase — the same bytes over the
    step, 2(n − 1)/n · A per region — and adds, backward, the allreduces of the gradients of
    the parameters its regions apply to sequence shards (``TPBlock.shared``: the LayerNorms,
    the row-parallel biases; and ``ln_f``, the position table): (6L + 2 + seq) · h numbers,
    whatever b and s, in one allreduce (``sequence.sum_grads_over_ranks``).
    ``regather`` adds, backward, an all-gather of A/n for each of the 2L column-parallel
    layers (their inputs gathered again)."""
    s = cfg.seq if s is None else s
    e = torch.empty((), dtype=dtype).element_size()
    act = b * s * cfg.hidden * e
    tokens = b * s * torch.empty((), dtype=loss_dtype(dtype)).element_size()
    regions = 2 * cfg.layers + 1
    ce = 3 * sent_bytes("all_reduce", n, tokens)
    if not sequence:
        each = regions * sent_bytes("all_reduce", n, act)
        return {"forward": {"all_reduce": each + ce}, "backward": {"all_reduce": each}}
    halves = {"reduce_scatter": regions * sent_bytes("reduce_scatter", n, act),
              "all_gather": regions * sent_bytes("all_gather", n, act // n)}
    shared = (6 * cfg.layers + 2 + cfg.seq) * cfg.hidden * e
    again = regather * 2 * cfg.layers * sent_bytes("all_gather", n, act // n)
    return {"forward": {**halves, "all_reduce": ce},
            "backward": {**halves, "all_gather": halves["all_gather"] + again,
                         "all_reduce": sent_bytes("all_reduce", n, shared)}}


# ----------------------------------------------------------------------- the workers

def batch(cfg: GPTConfig, b: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A seeded batch of random token ids (b, cfg.seq) and their next tokens."""
    ids = torch.randint(cfg.vocab, (b, cfg.seq + 1), generator=torch.Generator().manual_seed(seed))
    return ids[:, :-1], ids[:, 1:]


def _grads(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: p.grad.detach().cpu().clone() for k, p in model.named_parameters()}


def one_process(cfg: GPTConfig, b: int = 2, seed: int = 0,
                dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The reference: one forward and backward of the plain GPT, in this process."""
    model = build_gpt(cfg, seed).to(dtype)
    idx, targets = batch(cfg, b, seed)
    logits = model(idx)
    loss = F.cross_entropy(logits.reshape(-1, cfg.vocab).to(loss_dtype(dtype)),
                           targets.reshape(-1))
    loss.backward()
    return {"loss": loss.item(), "grads": _grads(model)}


def tp_step(cfg: GPTConfig, b: int = 2, seed: int = 0, sequence: bool = False,
            dtype: torch.dtype = torch.float32, regather: bool = False) -> dict[str, Any]:
    """Worker function: one forward and backward of ``TPGPT`` over every rank (on its GPU
    under nccl, ``runtime.device()``). Returns the loss, this rank's gradients (by name),
    the bytes it put on the wire in each phase (the wiretap, ring model) and the calls
    behind them ("calls": phase → operation → count), and the activation bytes autograd
    kept after the forward (saved-tensor hooks)."""
    rank, n, dev = dist.get_rank(), dist.get_world_size(), device()
    model = tp_gpt(build_gpt(cfg, seed).to(dev, dtype), rank, n, sequence, regather)
    idx, targets = (t.to(dev) for t in batch(cfg, b, seed))
    meter = ActivationMeter()
    meter.resident(*model.parameters(), idx, targets)
    with Wiretap() as forward, meter.recording():
        loss = model.loss(idx, targets)
    with Wiretap() as backward:
        loss.backward()
    return {"loss": loss.item(), "grads": _grads(model), "activations": meter.peak,
            "forward": dict(forward.by_op), "backward": dict(backward.by_op),
            "calls": {phase: dict(Counter(o.op for o in tap.ops))
                      for phase, tap in (("forward", forward), ("backward", backward))}}


# ------------------------------------------------------ torch's own tensor parallelism

class SplitAttention(nn.Module):
    """A block's attention with Q, K and V as three Linear layers, so that
    ``ColwiseParallel``'s contiguous rows of each are whole heads; the heads a rank holds
    are read from its output's width."""

    def __init__(self, attn: Attention):
        super().__init__()
        self.cfg, self.proj = attn.cfg, attn.proj
        h = attn.cfg.hidden
        with torch.random.fork_rng(devices=[]):            # their init is overwritten
            self.q, self.k, self.v = (nn.Linear(h, h) for _ in range(3))
        with torch.no_grad():
            for i, layer in enumerate((self.q, self.k, self.v)):
                layer.weight.copy_(attn.qkv.weight[i * h:(i + 1) * h])
                layer.bias.copy_(attn.qkv.bias[i * h:(i + 1) * h])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape[0], x.shape[1], self.cfg.head_dim
        q, k, v = (f(x).view(b, s, -1, d).transpose(1, 2) for f in (self.q, self.k, self.v))
        return self.proj(attention(q, k, v, causal=True).transpose(1, 2).reshape(b, s, -1))


def library_plan(layers: int, sequence: bool) -> dict[str, Any]:
    """Lesson 12's plan for ``parallelize_module`` (blocks with ``SplitAttention``): Q, K, V
    and ``fc`` column-parallel, the projections row-parallel; ``sequence``: the LayerNorms
    on sequence shards (lesson 14's checkpoints reuse it)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput,
                                                   RowwiseParallel, SequenceParallel)
    row = RowwiseParallel(output_layouts=Shard(1)) if sequence else RowwiseParallel()
    plan: dict[str, Any] = {}
    for i in range(layers):
        at = f"blocks.{i}."
        plan.update({at + "attn.q": ColwiseParallel(), at + "attn.k": ColwiseParallel(),
                     at + "attn.v": ColwiseParallel(), at + "attn.proj": row,
                     at + "mlp.fc": ColwiseParallel(), at + "mlp.proj": row})
        if sequence:                             # LayerNorms on sequence shards
            gather = PrepareModuleInput(input_layouts=(Shard(1),),
                                        desired_input_layouts=(Replicate(),))
            plan.update({at + "ln1": SequenceParallel(), at + "ln2": SequenceParallel(),
                         at + "attn": gather, at + "mlp": gather})
    if sequence:                                 # into the shards, and out for the head
        plan["blocks.0"] = PrepareModuleInput(input_layouts=(Replicate(),),
                                              desired_input_layouts=(Shard(1),),
                                              use_local_output=True)
        plan["ln_f"] = PrepareModuleInput(input_layouts=(Shard(1),),
                                          desired_input_layouts=(Replicate(),),
                                          use_local_output=True)
    return plan


def library_step(cfg: GPTConfig, b: int = 2, seed: int = 0,
                 sequence: bool = False) -> dict[str, Any]:
    """Worker function: ``tp_step`` with torch's ``parallelize_module`` over lesson 09's
    CPU ``device_mesh()``: Q, K, V and ``fc`` ``ColwiseParallel``, the projections
    ``RowwiseParallel``; ``sequence``: the LayerNorms ``SequenceParallel``, the residual
    stream in sequence shards. The embedding and the tied head stay whole on every rank
    (a plan shards modules, and the head is no module of its own). Returns the loss and
    the whole gradients under the plain model's names."""
    from torch.distributed.tensor.parallel import parallelize_module
    model = build_gpt(cfg, seed)
    for block in model.blocks:
        block.attn = SplitAttention(block.attn)
    model = parallelize_module(model, device_mesh(), library_plan(cfg.layers, sequence))
    idx, targets = batch(cfg, b, seed)
    loss = F.cross_entropy(model(idx).reshape(-1, cfg.vocab), targets.reshape(-1))
    loss.backward()
    grads = {k: (p.grad.full_tensor() if hasattr(p.grad, "full_tensor") else p.grad).detach()
             for k, p in model.named_parameters()}
    for i in range(cfg.layers):
        for kind in ("weight", "bias"):
            at = f"blocks.{i}.attn."
            grads[f"{at}qkv.{kind}"] = torch.cat([grads.pop(f"{at}{x}.{kind}") for x in "qkv"])
    return {"loss": loss.item(), "grads": grads}
