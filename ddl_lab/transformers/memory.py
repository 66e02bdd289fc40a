"""Activation memory of one transformer layer, measured and predicted (lesson 12, transformers;
Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models").

Measured: a ``Block`` of ``ddl_lab.ml.gpt`` runs forward under
``torch.autograd.graph.saved_tensors_hooks``; every tensor autograd keeps for backward is
counted once per storage (views of one tensor — q, k, v of one projection, a reshaped
input — share it), parameters not counted; what ``torch.utils.checkpoint`` keeps to
recompute from (its inputs) is counted too.

Predicted: Korthikanti et al. count, per layer, at 16 bits with dropout,
sbh(34 + 5as/h) bytes (s sequence, b batch, h hidden, a heads). Their terms, in elements of
e bytes (e = 2 for them) and dropout masks of 1 byte each:

  ====================================  ==========  ========================================
  kept for backward                      sbh · e     extra
  ====================================  ==========  ========================================
  LayerNorm 1 and 2: their inputs        2
  QKV projection: its input              1
  q kᵀ: q and k                          2
  softmax: its output                                 as²b · e
  dropout on the probabilities                        as²b (mask) + as²b · e (its output)
  probabilities · v: v                   1
  output projection: its input           1
  dropout after it                                    sbh (mask)
  MLP fc: its input                      1
  GELU: its input (4h wide)              4
  MLP proj: its input (4h wide)          4
  dropout after it                                    sbh (mask)
  ====================================  ==========  ========================================

so bytes = sbh·(16e + 2δ) + as²b·(e + δ(1 + e)), δ = 1 with dropout, 0 without: at e = 2 with
dropout, sbh(34 + 5as/h) — the paper's number. This block keeps exactly those tensors
(``attention`` adds its causal mask rather than ``masked_fill`` it, so no mask is kept; the
scaling by 1/√d is a multiplication by a number, which keeps nothing), so the constants
for it are those of the table with its own dtype:

- fp32 (e = 4): sbh(64 + 4as/h) without dropout, sbh(66 + 9as/h) with it;
- bf16 (e = 2; the block's weights and input in bf16): sbh(32 + 2as/h) without dropout,
  sbh(34 + 5as/h) with it.

What the formula leaves out: each LayerNorm keeps its mean and 1/σ per token, 2 × 2 × sb
numbers in the block's dtype, 4e·sb bytes per layer (under 1 % at h ≥ 32). Measured on
torch 2.x (CPU), every row of ``activation_table`` is the formula plus exactly these bytes:
measured / formula = 1.000–1.008.

Recomputation (section "Selective recomputation"): full recomputation checkpoints the whole
block and keeps only its input, sbh·e; selective recomputation checkpoints only the
attention core (q kᵀ, softmax, dropout, · v: the as² terms, cheap to compute again, large
to keep) and keeps q, k, v as the core's inputs instead, so it keeps sbh·(16e + 2δ): the
paper's 34sbh at 16 bits. What recomputing costs is a second forward of what is recomputed:
the attention core's share of a layer's work is 4bs²h / (4bs²h + 24bsh²) = s / (s + 6h) —
a few % for the paper's models (h = 12288, s = 2048), most of the work for this small one.
Measured (``recompute_times``, 4 layers, h = 64, a = 4, b = 8, one thread, load 4.5): at
s = 256 selective takes the time of none (within noise) and full 1.29×, keeping 0.50× and
0.03× the bytes; at s = 512 selective 1.47× and full 1.49×, keeping 0.33× and 0.02×.
"""
from __future__ import annotations

import functools
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ddl_lab.ml.gpt import GPT, Block, GPTConfig, attention

__all__ = ["RECOMPUTE", "Saved", "block_forward", "constants", "formula",
           "korthikanti", "Row", "measure_row", "activation_table", "recompute_times"]

RECOMPUTE = ("none", "selective", "full")
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


class Saved:
    """The storages autograd keeps for backward, each once (``pack`` is the saved-tensor hook),
    parameters (and views of them, such as a Linear's transposed weight) and tensors sharing
    memory with ``exclude`` left out; ``kept`` names each with its shape."""

    def __init__(self, exclude: Sequence[torch.Tensor] = ()):
        self.skip = {t.untyped_storage().data_ptr() for t in exclude}
        self.kept: dict[int, tuple[int, str]] = {}

    def add(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        where = storage.data_ptr()
        if isinstance(t, nn.Parameter) or isinstance(t._base, nn.Parameter) or \
                where in self.skip or where in self.kept:
            return
        self.kept[where] = (storage.nbytes(), f"{tuple(t.shape)} {str(t.dtype)[6:]}")

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        self.add(t)
        return t

    @property
    def total(self) -> int:
        return sum(n for n, _ in self.kept.values())

    @contextmanager
    def recording(self) -> Iterator["Saved"]:
        with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t):
            yield self


def _recomputed_core(saved: Saved):
    def core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kw) -> torch.Tensor:
        for t in (q, k, v):                   # what the checkpoint keeps to recompute from
            saved.add(t)
        return checkpoint(functools.partial(attention, **kw), q, k, v, use_reentrant=False)
    return core


def block_forward(block: Block, x: torch.Tensor, recompute: str, saved: Saved) -> torch.Tensor:
    """``block(x)`` under ``saved``'s hooks: ``recompute`` "none", "selective" (the attention
    core recomputed in backward) or "full" (the whole block recomputed; only x kept)."""
    if recompute not in RECOMPUTE:
        raise ValueError(f"recompute is one of {RECOMPUTE}, got {recompute!r}")
    with saved.recording():
        if recompute == "full":
            saved.add(x)
            return checkpoint(block, x, use_reentrant=False)
        if recompute == "selective":
            block.attn.core = _recomputed_core(saved)
            try:
                return block(x)
            finally:
                del block.attn.core
        return block(x)


def constants(dtype: torch.dtype, dropout: bool) -> tuple[int, int]:
    """(c₁, c₂) with bytes per layer = s·b·h·c₁ + a·s²·b·c₂ (the module docstring's table)."""
    e, d = torch.finfo(dtype).bits // 8, int(bool(dropout))
    return 16 * e + 2 * d, e + d * (1 + e)


def formula(s: int, b: int, h: int, a: int, dtype: torch.dtype = torch.bfloat16,
            dropout: bool = True, recompute: str = "none") -> float:
    """Bytes of activations one layer keeps for backward."""
    c1, c2 = constants(dtype, dropout)
    e = torch.finfo(dtype).bits // 8
    return {"none": s * b * h * c1 + a * s * s * b * c2, "selective": s * b * h * c1,
            "full": s * b * h * e}[recompute]


def korthikanti(s: int, b: int, h: int, a: int) -> float:
    """Korthikanti et al. (2022), eq. (1): sbh(34 + 5as/h) bytes per layer at 16 bits."""
    return s * b * h * (34 + 5 * a * s / h)


@dataclass(frozen=True)
class Row:
    """One configuration: shape, dtype, dropout, recomputation, bytes measured and predicted."""

    s: int
    b: int
    h: int
    a: int
    dtype: str
    dropout: float
    recompute: str
    measured: int
    formula: float

    @property
    def ratio(self) -> float:
        return self.measured / self.formula


def _block(s: int, h: int, a: int, dtype: torch.dtype, dropout: float, seed: int) -> Block:
    cfg = GPTConfig(vocab=2, seq=s, hidden=h, heads=a, layers=1, dropout=dropout)
    return GPT(cfg, seed).blocks[0].to(dtype)


def measure_row(s: int, b: int, h: int, a: int, dtype: str = "fp32", dropout: float = 0.0,
                recompute: str = "none", seed: int = 0) -> Row:
    """Measure one layer's activation bytes (forward only: that is when they are kept)."""
    dt = DTYPES[dtype]
    block = _block(s, h, a, dt, dropout, seed)
    x = torch.randn(b, s, h, generator=torch.Generator().manual_seed(seed)).to(dt)
    saved = Saved()
    out = block_forward(block, x.requires_grad_(), recompute, saved)
    del out
    return Row(s, b, h, a, dtype, dropout, recompute, saved.total,
               formula(s, b, h, a, dt, dropout > 0, recompute))


def activation_table(shapes: Sequence[tuple[int, int, int, int]] = (
        (32, 2, 64, 4), (64, 2, 64, 4), (128, 2, 64, 4), (64, 1, 64, 4), (64, 4, 64, 4),
        (64, 2, 32, 4), (64, 2, 128, 4), (64, 2, 64, 1), (64, 2, 64, 8)),
        dtypes: Sequence[str] = ("fp32", "bf16"), dropouts: Sequence[float] = (0.0, 0.1),
        recompute: Sequence[str] = RECOMPUTE) -> list[Row]:
    """Every (s, b, h, a) of ``shapes`` under each dtype, dropout and recomputation: s, b, h
    and a each varied alone around (64, 2, 64, 4)."""
    return [measure_row(*shape, dtype=dt, dropout=p, recompute=r)
            for shape in shapes for dt in dtypes for p in dropouts for r in recompute]


def recompute_times(s: int = 256, b: int = 8, h: int = 64, a: int = 4, layers: int = 4,
                    repeats: int = 5, seed: int = 0) -> dict[str, float]:
    """Median seconds of a forward and backward of ``layers`` blocks under each recomputation
    (the settings alternated, so that a change of load hits each alike)."""
    blocks = [_block(s, h, a, torch.float32, 0.0, seed + i) for i in range(layers)]
    x = torch.randn(b, s, h, generator=torch.Generator().manual_seed(seed), requires_grad=True)
    times: dict[str, list[float]] = {r: [] for r in RECOMPUTE}
    for _ in range(repeats):
        for r in RECOMPUTE:
            t0 = time.perf_counter()
            y = x
            for blk in blocks:
                y = block_forward(blk, y, r, Saved())
            y.square().mean().backward()
            times[r].append(time.perf_counter() - t0)
    return {r: float(np.median(t)) for r, t in times.items()}
